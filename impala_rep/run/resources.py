"""Whether this machine has what a run asks of it: memory for its unroll buffers, GPUs, a TPU.

`check_devices` and `check_memory` refuse, before anything starts or is written, a
run whose learner devices are not there or whose unroll buffers cannot fit: one
`ValueError` line naming the value and what is allowed (`prepare` turns it into a
`SetupError`, exit 2). They hold what a run needs (`run/memory_model.py`) against what
this machine has (`run/machine.py`); neither imports TensorFlow or Ray.

Only the machine the driver runs on is checked: the embedded Ray (its processes
all run here) and `--launcher local`. When joining a cluster (`--ray-address`) the
actors and the learner run on other nodes whose memory and devices the driver
cannot see before it connects; `run/ray_cluster.py` checks the GPUs and CPUs Ray
reports once connected, and memory is not checked there.

Every check errs on the side of running: the memory estimate is a lower bound, and a
device is "not there" only when nothing on the machine hints at it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

from impala_rep.config import TrainConfig
from impala_rep.devices import parse_devices, tpu_resolver_args
from impala_rep.observation_nest import Shape, describe
from impala_rep.run.machine import (
    available_memory,
    cuda_hides_all,
    local_gpu_count,
    local_tpu_present,
)
from impala_rep.run.memory_model import (
    SIZE_KEYS,
    XLA_LEARNER_BYTES,
    GiB,
    MemoryEstimate,
    estimate_from_sizes,
    estimate_memory,
    memory_sizes,
)

__all__ = ["check_memory", "check_devices"]


def check_memory(
    config: TrainConfig,
    observation_shape: Shape,
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
    sizes = memory_sizes(config)
    key = _culprit(sizes)
    most = _largest_fitting(
        sizes,
        key,
        lambda changed: (
            estimate_from_sizes(
                changed, observation_shape, observation_dtype, num_actions
            ).total_bytes
            <= have
        ),
    )
    allowed = (
        f"with the other settings as they are, {key} can be at most {most}"
        if most
        else f"even {key} 1 does not fit with the other settings as they are"
    )
    others = ", ".join(other for other in SIZE_KEYS if other != key)
    obs = describe(observation_shape, observation_dtype)
    raise ValueError(
        f"bad {key} {sizes[key]}: the unroll buffers need ~{_gib(estimate.buffer_bytes)} "
        f"({estimate.held_unrolls} unrolls of {sizes['envs_per_actor']} envs x "
        f"{sizes['unroll_length'] + 1} {obs} observations held by {sizes['num_actors']} actors "
        f"and the learner's queue, and a batch of {sizes['batch_size']}) and "
        f"{estimate.processes} process(es) ~{_gib(estimate.process_bytes)}, but "
        f"{where} {_gib(have)} available; {allowed}, or lower one of {others}"
    )


def _culprit(sizes: Mapping[str, int]) -> str:
    """What the memory refusal names: the setting furthest above its default (sizes scale
    linearly with each), so a run with --envs-per-actor 100000 is told about envs_per_actor."""
    defaults = TrainConfig()
    return max(SIZE_KEYS, key=lambda key: sizes[key] / defaults.get(key))


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
                if cuda_hides_all(environ)
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
