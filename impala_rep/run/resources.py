"""What a run asks of the machine it starts on: memory for its unroll buffers, GPUs, a TPU.

`check_devices` and `check_memory` refuse, before anything starts or is written, a
run whose learner devices are not there or whose unroll buffers cannot fit: one
`ValueError` line naming the value and what is allowed (`prepare` turns it into a
`SetupError`, exit 2). They import neither TensorFlow nor Ray: they read /proc, /sys
and /dev, and ask the NVIDIA driver library directly only where no NVIDIA device is
in sight.

Only the machine the driver runs on is checked: the embedded Ray (its processes
all run here) and `--launcher local`. When joining a cluster (`--ray-address`) the
actors and the learner run on other nodes whose memory and devices the driver
cannot see before it connects; `run/ray_cluster.py` checks the GPUs and CPUs Ray
reports once connected, and memory is not checked there.

Every estimate here errs on the side of running: the memory estimate counts only
buffers that are certainly held at once and a per-process cost measured below the
real one, and a device is "not there" only when nothing on the machine hints at it.
"""

from __future__ import annotations

import ctypes
import dataclasses
import glob
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from impala_rep.config import TrainConfig
from impala_rep.devices import parse_devices, tpu_resolver_args
from impala_rep.unroll import UnrollSpec

__all__ = [
    "MemoryEstimate",
    "estimate_memory",
    "available_memory",
    "check_memory",
    "local_gpu_count",
    "local_tpu_present",
    "check_devices",
    "PROCESS_BYTES",
]

GiB = 2**30

# Memory of one TensorFlow process that is its own, not shared with the others
# (/proc/self/smaps_rollup, Private_Dirty): about what an imported TensorFlow with Ray, a
# CartPole actor and a Pong actor hold, the last a little more, so the estimate errs on the
# side of running. Most of a process's RSS is TensorFlow's shared libraries, mapped once for
# all processes, so they are not counted per process; Ray's own processes (raylet, GCS) are
# not counted either (docs/notebook.md, "Where the CPU goes").
PROCESS_BYTES = GiB // 4
# What XLA adds to a learner that compiles its step with it (`--learner-xla`), measured the same
# way for CartPole's MLP on the CPU (same entry); a larger network under XLA would add more,
# not less.
XLA_LEARNER_BYTES = 180 * 2**20

# A Linux cgroup v1 limit at or above this means "no limit" (the kernel reports ~2**63).
_NO_CGROUP_LIMIT = 2**60


@dataclasses.dataclass(frozen=True)
class MemoryEstimate:
    """Memory a run certainly holds at once, at the least (bytes)."""

    column_bytes: int  # one env column of one unroll: T+1 observations and T transitions
    held_unrolls: int  # actor-sized unroll blocks (E columns) held at once
    batch_columns: int  # columns of the learner's batch (a copy of its own)
    processes: int  # processes that import TensorFlow
    unroll_bytes: int  # one actor's unroll (E columns)
    xla_learners: int = 0  # learner processes compiling their step with XLA

    @property
    def buffer_bytes(self) -> int:
        return (self.held_unrolls * self.unroll_bytes) + self.batch_columns * self.column_bytes

    @property
    def process_bytes(self) -> int:
        return self.processes * PROCESS_BYTES + self.xla_learners * XLA_LEARNER_BYTES

    @property
    def total_bytes(self) -> int:
        return self.buffer_bytes + self.process_bytes


def estimate_memory(
    config: TrainConfig, observation_shape: Sequence[int], observation_dtype, num_actions: int
) -> MemoryEstimate:
    """A lower bound of the memory the run's unroll buffers and processes hold at once.

    The buffers (actors/actor_loop.py, learner/unroll_queue.py, learner/service.py):
    - each actor holds 2 unrolls of E columns: the one it records, and the one it
      recorded before, which is still referenced while the next is recorded and then
      waits to be put into the learner's queue (Ray: sent, copied to the object store);
    - each learner host's queue holds up to `queue_capacity` such blocks; it is full
      whenever the learner is the slower side, which is what the back-pressure is for
      (under Ray these are the object store's copies, beyond the actors' own);
    - the learner trains on a batch of B columns converted to tensors (a copy).
    The processes: `PROCESS_BYTES` each (one per actor and learner host under Ray, one in
    all with the local launcher), and `XLA_LEARNER_BYTES` more for a learner under XLA.
    Not counted, so the estimate stays below the truth: the learner's activations and
    float copies of the observations, the envs' own state, the agent's recurrent state,
    Ray's object-store copies of the unrolls in flight, and Ray's system processes.
    """
    return _estimate(_sizes(config), observation_shape, observation_dtype, num_actions)


def _sizes(config: TrainConfig) -> dict[str, int]:
    """The settings the estimate depends on, by key."""
    sizes = {key: int(config.get(key)) for key in _SIZE_KEYS}
    sizes["learner_hosts"] = config.learner.hosts
    sizes["local"] = int(config.run.launcher == "local")
    # The config allows XLA on one learner host only.
    sizes["xla_learners"] = int(bool(config.learner.xla))
    return sizes


def _estimate(
    sizes: Mapping[str, int], observation_shape: Sequence[int], observation_dtype, num_actions: int
) -> MemoryEstimate:
    actors, hosts = sizes["num_actors"], sizes["learner_hosts"]
    # One env column of one unroll, as impala_rep/unroll.py lays it out (FIELDS): T+1
    # observations, T transitions, the per-column fields (the agent's state not counted).
    column = UnrollSpec(
        unroll_length=sizes["unroll_length"],
        observation_shape=observation_shape,
        observation_dtype=observation_dtype,
        num_actions=num_actions,
    ).column_bytes()
    return MemoryEstimate(
        column_bytes=column,
        held_unrolls=2 * actors + sizes["queue_capacity"] * hosts,
        batch_columns=sizes["batch_size"],
        # The local launcher: one process, actors as threads. Ray: one per actor and learner host.
        processes=1 if sizes["local"] else actors + hosts,
        unroll_bytes=column * sizes["envs_per_actor"],
        xla_learners=sizes["xla_learners"],
    )


def available_memory() -> tuple[int, str] | None:
    """Memory the run can still take (bytes) and what says so ("this machine has"); None
    where unknown (no /proc/meminfo: nothing is checked).

    MemAvailable plus free swap (a run that swaps is slow, but it runs), or less if a
    cgroup memory limit (a container's) leaves less: over that limit the kernel kills.
    Page cache inside the cgroup is counted as available (the kernel can drop it).
    """
    try:
        meminfo = _read_meminfo()
        available = meminfo["MemAvailable"] + meminfo.get("SwapFree", 0)
    except (OSError, KeyError, ValueError):
        return None
    where = "this machine has"
    limited = _cgroup_available()
    if limited is not None and limited + meminfo.get("SwapFree", 0) < available:
        available = limited + meminfo.get("SwapFree", 0)
        where = "this machine's cgroup memory limit leaves"
    return max(0, available), where


def check_memory(
    config: TrainConfig,
    observation_shape: Sequence[int],
    observation_dtype,
    num_actions: int,
    *,
    available: tuple[int, str] | None = None,
) -> MemoryEstimate:
    """ValueError naming the setting to lower if the estimate exceeds `available`
    (default: `available_memory()`; nothing is checked where that is unknown)."""
    estimate = estimate_memory(config, observation_shape, observation_dtype, num_actions)
    if available is None:
        available = available_memory()
    if available is None or estimate.total_bytes <= available[0]:
        return estimate
    have, where = available
    without_xla = estimate.total_bytes - estimate.xla_learners * XLA_LEARNER_BYTES
    if estimate.xla_learners and without_xla <= have:  # XLA's compiler is what does not fit
        raise ValueError(
            f"bad learner_xla {config.learner.xla}: XLA's compiler needs "
            f"~{_gib(XLA_LEARNER_BYTES)} more in the learner, the run "
            f"~{_gib(estimate.total_bytes)} in all, but {where} {_gib(have)} available; "
            "use --no-learner-xla"
        )
    sizes = _sizes(config)
    key = _culprit(sizes)
    most = _largest_fitting(
        sizes,
        key,
        lambda changed: (
            _estimate(changed, observation_shape, observation_dtype, num_actions).total_bytes
            <= have
        ),
    )
    allowed = (
        f"with the other settings as they are, {key} can be at most {most}"
        if most
        else f"even {key} 1 does not fit with the other settings as they are"
    )
    others = ", ".join(other for other in _SIZE_KEYS if other != key)
    obs = f"{list(observation_shape)} {np.dtype(observation_dtype).name}"
    raise ValueError(
        f"bad {key} {sizes[key]}: the unroll buffers need ~{_gib(estimate.buffer_bytes)} "
        f"({estimate.held_unrolls} unrolls of {sizes['envs_per_actor']} envs x "
        f"{sizes['unroll_length'] + 1} {obs} observations held by {sizes['num_actors']} actors "
        f"and the learner's queue, and a batch of {sizes['batch_size']}) and "
        f"{estimate.processes} process(es) ~{_gib(estimate.process_bytes)}, but "
        f"{where} {_gib(have)} available; {allowed}, or lower one of {others}"
    )


# What the memory refusal names: the setting furthest above its default (sizes scale linearly
# with each), so a run with --envs-per-actor 100000 is told about envs_per_actor.
_SIZE_KEYS = ("envs_per_actor", "unroll_length", "num_actors", "batch_size", "queue_capacity")


def _culprit(sizes: Mapping[str, int]) -> str:
    defaults = TrainConfig()
    return max(_SIZE_KEYS, key=lambda key: sizes[key] / defaults.get(key))


def _largest_fitting(
    sizes: Mapping[str, int], key: str, fits: Callable[[Mapping[str, int]], bool]
) -> int:
    """The largest value of `key` below its current one with which `fits` holds; 0 if none
    (each size only adds memory, so a binary search finds it)."""
    low, high = 0, sizes[key] - 1
    while low < high:
        middle = (low + high + 1) // 2
        if fits({**sizes, key: middle}):
            low = middle
        else:
            high = middle - 1
    return low


def _gib(size: int) -> str:
    return f"{size / GiB:.1f} GiB"


def _read_meminfo() -> dict[str, int]:
    values = {}
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            name, _, rest = line.partition(":")
            parts = rest.split()
            if parts and parts[0].isdigit():
                values[name] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    return values


def _cgroup_available() -> int | None:
    """limit - usage + page cache of this process's memory cgroup (the tightest one of it and
    its parents); None without a limit or where it cannot be read."""
    try:
        with open("/proc/self/cgroup") as cgroups:
            lines = cgroups.read().splitlines()
    except OSError:
        return None
    found = []
    for line in lines:
        number, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if number == "0" and controllers == "":  # cgroup v2: walk up, every level may limit
            directory = os.path.normpath("/sys/fs/cgroup/" + path.lstrip("/"))
            while directory.startswith("/sys/fs/cgroup"):
                found.append(_cgroup2_available(directory))
                directory = os.path.dirname(directory)
        elif "memory" in controllers.split(","):  # v1: the effective (hierarchical) limit
            for directory in ("/sys/fs/cgroup/memory/" + path.lstrip("/"), "/sys/fs/cgroup/memory"):
                if os.path.isdir(directory):
                    found.append(_cgroup1_available(directory))
                    break
    found = [value for value in found if value is not None]
    return min(found) if found else None


def _cgroup2_available(directory: str) -> int | None:
    try:
        with open(os.path.join(directory, "memory.max")) as limit_file:
            limit = limit_file.read().strip()
        if limit == "max":
            return None
        with open(os.path.join(directory, "memory.current")) as usage_file:
            usage = int(usage_file.read())
        stat = _read_stat(os.path.join(directory, "memory.stat"))
        return int(limit) - usage + stat.get("file", 0)
    except (OSError, ValueError):
        return None


def _cgroup1_available(directory: str) -> int | None:
    try:
        stat = _read_stat(os.path.join(directory, "memory.stat"))
        limit = stat.get("hierarchical_memory_limit")
        if limit is None:
            with open(os.path.join(directory, "memory.limit_in_bytes")) as limit_file:
                limit = int(limit_file.read())
        if limit >= _NO_CGROUP_LIMIT:
            return None
        with open(os.path.join(directory, "memory.usage_in_bytes")) as usage_file:
            usage = int(usage_file.read())
        return limit - usage + stat.get("total_cache", stat.get("cache", 0))
    except (OSError, ValueError):
        return None


def _read_stat(path: str) -> dict[str, int]:
    with open(path) as stat:
        return {
            name: int(value) for name, value in (line.split()[:2] for line in stat if line.strip())
        }


# --- devices ---------------------------------------------------------------------------


def local_gpu_count(environ: Mapping[str, str] = os.environ) -> int | None:
    """GPUs TensorFlow could see on this machine, at most; None where that cannot be told.

    None (never refused) on other systems than Linux (tensorflow-metal's GPU on macOS), with
    /dev/kfd (AMD ROCm) or /dev/dxg (WSL's GPUs). Else NVIDIA GPUs: the device files
    /dev/nvidiaN (a container gets those of its GPUs) or the driver's /proc/driver/nvidia/gpus,
    whichever lists more. Only when neither shows one is the driver library asked (cuInit, as
    TensorFlow does; it can load the kernel module on demand): no libcuda, or cuInit failing,
    means no GPU. CUDA_VISIBLE_DEVICES set to nothing (or starting with -1) hides them all.
    """
    if sys.platform != "linux" or os.path.exists("/dev/kfd") or os.path.exists("/dev/dxg"):
        return None
    if _cuda_hides_all(environ):
        return 0
    device_files = [p for p in glob.glob("/dev/nvidia*") if re.fullmatch(r"/dev/nvidia\d+", p)]
    try:
        driver_gpus = os.listdir("/proc/driver/nvidia/gpus")
    except OSError:
        driver_gpus = []
    count = max(len(device_files), len(driver_gpus))
    return count if count else _cuda_device_count()


def _cuda_hides_all(environ: Mapping[str, str]) -> bool:
    """CUDA_VISIBLE_DEVICES set to nothing, or to a list starting with a negative index."""
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    return visible is not None and (not visible.strip() or visible.strip().startswith("-"))


def _cuda_device_count() -> int:
    """cuInit + cuDeviceGetCount from the driver library; 0 if it is missing or fails."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    count = ctypes.c_int(0)
    try:
        if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
            return 0
    except (AttributeError, OSError):
        return 0
    return count.value


def local_tpu_present() -> bool:
    """Whether a TPU may be attached to this machine, as Ray looks for one
    (ray/_private/accelerators/tpu.py): a /dev/accel* device file (TPU v2-v4 VMs), or a
    /dev/vfio group whose PCI device is Google's (vendor 0x1ae0: v5e, v5p, v6e). A group
    whose device cannot be read counts as a TPU."""
    if [p for p in glob.glob("/dev/accel*") if not os.path.isdir(p)]:
        return True
    try:
        groups = [entry for entry in os.listdir("/dev/vfio") if entry.isdigit()]
    except OSError:
        return False
    for group in groups:
        vendors = glob.glob(f"/sys/kernel/iommu_groups/{group}/devices/*/vendor")
        if not vendors:
            return True
        for vendor in vendors:
            try:
                with open(vendor) as vendor_file:
                    if vendor_file.read().strip().lower() == "0x1ae0":
                        return True
            except OSError:
                return True
    return False


def check_devices(
    config: TrainConfig,
    *,
    environ: Mapping[str, str] = os.environ,
    gpu_count: Callable[[], int | None] | None = None,
    tpu_present: Callable[[], bool] = local_tpu_present,
) -> None:
    """ValueError if the learner's devices are not on this machine (embedded Ray or local).

    "gpu"/"gpu:N": refused if fewer GPUs than asked (N per learner host, 1 for "gpu") are
    here. "tpu" and "tpu:local": refused if no TPU is attached. "tpu:NAME" (or "tpu" with
    TPU_NAME set) is a TPU reached over the network, which cannot be checked from here.
    "auto" takes what there is.
    """
    if config.run.ray_address:
        return
    devices, hosts = config.learner.devices, config.learner.hosts
    spec = parse_devices(devices)
    if spec.kind == "gpu":
        asked = (spec.count or 1) * hosts
        have = (gpu_count or (lambda: local_gpu_count(environ)))()
        if have is not None and asked > have:
            hidden = (
                f" visible (CUDA_VISIBLE_DEVICES={environ['CUDA_VISIBLE_DEVICES']!r})"
                if _cuda_hides_all(environ)
                else ""
            )
            per_host = have // hosts
            raise ValueError(
                f"bad learner_devices {devices!r}: the learner asks for {asked} GPU(s) "
                f"and this machine has {have}{hidden}; use --learner-devices cpu or "
                "auto" + (f", or gpu:{per_host}" if per_host else "")
            )
    elif spec.kind == "tpu" and tpu_resolver_args(spec, environ)["tpu"] == "local":
        if not tpu_present():
            raise ValueError(
                f"bad learner_devices {devices!r}: this machine has no TPU (no /dev/accel* device, "
                "no Google device under /dev/vfio) and TPU_NAME is not set; use tpu:NAME for a "
                "TPU reached over the network, or --learner-devices cpu, gpu or auto"
            )
