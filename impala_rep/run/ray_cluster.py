"""What the Ray launcher checks about the Ray it joins or starts, so that nothing waits forever.

Ray itself would wait: `ray.init` retries an address where no cluster answers
without end, and an actor whose resources no node has stays pending. Both are
refused here instead, as bad settings (`SetupError`, exit 2), before the learner
or any actor is started and before anything is written.
"""

from __future__ import annotations

import socket

from impala_rep.config import TrainConfig
from impala_rep.run.errors import SetupError

__all__ = ["check_reachable", "check_resources", "CONNECT_TIMEOUT_S"]

CONNECT_TIMEOUT_S = 10.0


def check_reachable(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """SetupError unless something accepts TCP connections at `address` ("HOST:PORT";
    "auto" and "ray://..." are Ray's to resolve)."""
    if address == "auto" or "://" in address:
        return
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise SetupError(f"bad ray_address {address!r}: expected auto or HOST:PORT")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except OSError as err:
        reason = (err.strerror or type(err).__name__).lower()
        raise SetupError(f"bad ray_address {address!r}: no Ray cluster answers there ({reason}; "
                         f"waited up to {timeout_s:.0f} s); start one with `ray start --head` or "
                         "check the address") from None


def check_resources(config: TrainConfig, resources: dict[str, float], *, embedded: bool) -> None:
    """SetupError if Ray could never place the run: GPUs the learner asks for that no node has,
    or (on a cluster) fewer CPUs than the run's processes. `resources`: `ray.cluster_resources()`."""
    from impala_rep.learner.ray_learner import learner_gpus

    hosts = config.learner.hosts
    gpus = learner_gpus(config.learner.devices) * hosts
    have = int(resources.get("GPU", 0))
    if gpus > have:
        where = "this machine" if embedded else "the Ray cluster"
        raise SetupError(f"bad learner_devices {config.learner.devices!r}: the learner asks for "
                         f"{gpus} GPU(s) and {where} has {have}; use --learner-devices cpu or auto")
    cpus = config.actors.num_actors + hosts
    if not embedded and cpus > resources.get("CPU", 0):
        raise SetupError(f"bad num_actors {config.actors.num_actors}: {config.actors.num_actors} "
                         f"actors and {hosts} learner host(s) need {cpus} CPUs and the Ray cluster "
                         f"has {resources.get('CPU', 0):g}; start more nodes first or use fewer actors")
