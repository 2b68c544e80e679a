"""TensorFlow's persistent XLA compilation cache for the learner's compiled step.

Compiling the learner's step with XLA takes seconds (about two of the CartPole MLP's start-up
on a small CPU), and a run compiles the same step again every time it starts. TensorFlow can
keep the compiled executables on disk (`--tf_xla_persistent_cache_directory` in
TF_XLA_FLAGS) and load one instead of compiling when the step, its input shapes and the
session config match; it verifies each loaded entry against the step's HLO, so a changed
step is compiled afresh. The entries are machine code for this CPU and this TensorFlow, so
the directory gets a subdirectory per TensorFlow version and CPU: a home directory shared by
a cluster's nodes never hands one node another's code.

The flag must be in the environment before TensorFlow first reads its XLA flags: `enable`
runs in the learner's process before it imports TensorFlow.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import pathlib
import platform
from collections.abc import MutableMapping

__all__ = ["FLAG", "cache_directory", "enable"]

FLAG = "--tf_xla_persistent_cache_directory"


def cache_directory(setting: str, environ: MutableMapping[str, str]) -> pathlib.Path | None:
    """Where compiled steps go for `setting` (`LearnerConfig.xla_cache`): None for "none";
    for "auto" $XDG_CACHE_HOME/impala-rep/xla (~/.cache without it); else that directory.
    Within it, one subdirectory for this TensorFlow version and CPU."""
    if setting == "none":
        return None
    if setting == "auto":
        base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = pathlib.Path(base) / "impala-rep" / "xla"
    else:
        root = pathlib.Path(setting).expanduser()
    return root / f"tf{importlib.metadata.version('tensorflow')}-{_cpu_fingerprint()}"


def enable(setting: str, environ: MutableMapping[str, str] = os.environ) -> pathlib.Path | None:
    """Adds the cache flag for `setting` to TF_XLA_FLAGS in `environ` and makes the directory;
    returns it. Leaves a cache directory the user set in TF_XLA_FLAGS alone (and returns
    None), as it does an unwritable one: the cache saves time, a run never fails for it."""
    flags = environ.get("TF_XLA_FLAGS", "")
    directory = cache_directory(setting, environ)
    if directory is None or FLAG in flags:
        return None
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    environ["TF_XLA_FLAGS"] = f"{flags} {FLAG}={directory}".strip()
    return directory


def _cpu_fingerprint() -> str:
    """A short hash of the CPU's model and instruction-set flags (Linux), else its machine."""
    described = platform.machine()
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            lines = [
                line.strip()
                for line in cpuinfo.read().split("\n\n", 1)[0].splitlines()  # the first CPU
                if line.startswith(("model name", "flags"))
            ]
        described += "".join(lines)
    except OSError:
        pass
    return hashlib.sha1(described.encode()).hexdigest()[:12]
