"""Shared pieces of the benchmark scripts: quiet TensorFlow, tables, JSON output."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

os.environ.setdefault(
    "TF_CPP_MIN_LOG_LEVEL", "3"
)  # errors too: TF logs "failed call to cuInit" as one


def import_tensorflow():
    """TensorFlow, imported as the CLI does: its start-up notes (oneDNN, "Could not find
    cuda drivers"), written before any log level applies, are discarded."""
    from impala_rep.run.console import quiet_native_logs

    quiet_native_logs(verbose=False)
    import tensorflow as tf

    return tf


def peer_venv(venv: pathlib.Path, installs: Sequence[Sequence[str]]) -> pathlib.Path:
    """A peer's Python in a venv of its own (this project never depends on a peer), made on
    the first call by one `pip install` per entry of `installs`, in order; a few minutes."""
    python = venv / "bin" / "python"
    if python.exists():
        return python
    print(
        f"making {venv} ({', '.join(dict.fromkeys(p for i in installs for p in i))}); "
        "a few minutes",
        flush=True,
    )
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        for packages in installs:
            subprocess.run([str(python), "-m", "pip", "install", "--quiet", *packages], check=True)
    except subprocess.CalledProcessError as err:
        shutil.rmtree(venv, ignore_errors=True)  # a half-made venv would be taken for a made one
        raise SystemExit(f"could not make the peer's venv: {err}") from None
    return python


def split_train_flags(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the script's own arguments, the `impala-rep train` flags after `--`)."""
    argv = list(argv)
    if "--" not in argv:
        return argv, []
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1 :]


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    import ledger

    tf = import_tensorflow()
    return {
        **ledger.cpu(),
        **ledger.package_versions(),
        "gpus": len(tf.config.list_physical_devices("GPU")),
    }


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table (readable in a terminal, pasteable into Markdown)."""
    cells = [[str(c) for c in row] for row in rows]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in cells]
    return "\n".join(lines)


def write_json(path: str, data: Any) -> None:
    out = pathlib.Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2) + "\n")
    print(f"wrote {out}")


class MetricsTail:
    """The records a running `impala-rep train` has appended to LOGDIR/metrics.jsonl since
    the last call; a line still being written is left for the next call."""

    def __init__(self, logdir: str | os.PathLike):
        self._path = pathlib.Path(logdir) / "metrics.jsonl"
        self._read = 0

    def new_records(self) -> list[dict]:
        if not self._path.is_file():
            return []
        records = []
        for line in self._path.read_text().splitlines()[self._read :]:
            if not line.endswith("}"):
                break
            self._read += 1
            records.append(json.loads(line))
        return records
