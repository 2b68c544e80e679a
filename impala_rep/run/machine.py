"""What this machine has: the memory a run can still take, its GPUs, whether a TPU is attached.

Read without TensorFlow or Ray (the driver imports neither before it starts a run): memory
from /proc/meminfo and the process's memory cgroup, GPUs from the device files under /dev and
the NVIDIA driver's /proc entries (its library, through ctypes, only where neither shows one),
a TPU from /dev/accel* and /dev/vfio as Ray looks for one. Each answer errs towards "there may
be" (no count, or a TPU, where it cannot be told), so that `run/resources.py`, which checks a
run against these answers, never refuses one for what it could not see.
"""

from __future__ import annotations

import ctypes
import glob
import os
import re
import sys
from collections.abc import Mapping

__all__ = ["available_memory", "local_gpu_count", "local_tpu_present", "cuda_hides_all"]

# A Linux cgroup v1 limit at or above this means "no limit" (the kernel reports ~2**63).
_NO_CGROUP_LIMIT = 2**60


# --- memory ----------------------------------------------------------------------------


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
    if cuda_hides_all(environ):
        return 0
    device_files = [p for p in glob.glob("/dev/nvidia*") if re.fullmatch(r"/dev/nvidia\d+", p)]
    try:
        driver_gpus = os.listdir("/proc/driver/nvidia/gpus")
    except OSError:
        driver_gpus = []
    count = max(len(device_files), len(driver_gpus))
    return count if count else _cuda_device_count()


def cuda_hides_all(environ: Mapping[str, str]) -> bool:
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
