"""What the Ray launcher checks about the Ray it joins or starts, so that nothing waits forever.

Ray itself would wait or fail late: `ray.init` retries an address where no
cluster answers without end, `auto` with no cluster raises a bare
ConnectionError, and an actor whose resources no node has stays pending. These
are refused here instead, as bad settings (`SetupError`, exit 2), before the
learner or any actor is started and before anything is written.
"""

from __future__ import annotations

import os
import socket

from impala_rep.config import TrainConfig
from impala_rep.run.errors import SetupError

__all__ = [
    "answers",
    "check_reachable",
    "check_resources",
    "processes_asking_for_cpus",
    "CONNECT_TIMEOUT_S",
    "ACTOR_START_TIMEOUT_S",
]

CONNECT_TIMEOUT_S = 10.0
# Seconds Ray gets to place every actor on a cluster and run its constructor (import
# TensorFlow, build the env and the agent, fetch the weights): tens of seconds for one
# actor on a loaded machine with few cores, and the actors of a node start together on its
# cores. An actor still unplaced after this waits for CPUs the cluster has given to other
# work.
ACTOR_START_TIMEOUT_S = 600.0

_RAY_CLIENT_PORT = 10001  # Ray Client's default (`ray://HOST` without a port)


def check_reachable(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """SetupError unless something accepts TCP connections at the cluster `address` names:
    "HOST:PORT" (its GCS), "ray://HOST[:PORT]" (a Ray Client server) or "auto" (RAY_ADDRESS,
    else the cluster `ray start` started on this machine, as Ray resolves it). Other schemes
    are Ray's to resolve."""
    target, source = _resolve_auto() if address == "auto" else (address, None)
    named = repr(address) if source is None else f"{address!r} ({source}: {target})"
    scheme, _, rest = target.rpartition("://")
    if scheme not in ("", "ray"):
        return
    host, _, port = rest.rpartition(":")
    if scheme == "ray" and not port.isdigit() and not rest.endswith("]"):
        host, port = rest, str(_RAY_CLIENT_PORT)
    if not host or not port.isdigit():
        raise SetupError(f"bad ray_address {named}: expected auto, HOST:PORT or ray://HOST[:PORT]")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except OSError as err:
        reason = (err.strerror or type(err).__name__).lower()
        raise SetupError(
            f"bad ray_address {named}: no Ray cluster answers there ({reason}; "
            f"waited up to {timeout_s:.0f} s); start one with `ray start --head` or "
            "check the address"
        ) from None


def _resolve_auto() -> tuple[str, str | None]:
    """Where `ray.init(address="auto")` connects: RAY_ADDRESS, else the address `ray start`
    recorded on this machine; SetupError if neither is there. Ray would then also attach to
    any other Ray it finds running here (another user's run, say); joining such a one is
    refused instead. `("auto", None)` if Ray's own lookup is not available."""
    env = os.environ.get("RAY_ADDRESS", "")
    if env and env != "auto":
        return env, "RAY_ADDRESS"
    try:
        from ray._private.utils import read_ray_address
    except ImportError:  # Ray's layout changed: leave "auto" to Ray
        return "auto", None
    recorded = read_ray_address()
    if recorded:
        return recorded, "recorded by `ray start`"
    raise SetupError(
        "bad ray_address 'auto': no Ray cluster to join on this machine (RAY_ADDRESS is "
        "not set and `ray start` has not started one here); start one with "
        "`ray start --head`, or give the cluster's HOST:PORT"
    )


def check_resources(
    config: TrainConfig,
    resources: dict[str, float],
    *,
    embedded: bool,
    nodes: list[dict] | None = None,
) -> None:
    """SetupError if Ray could never place the run: GPUs the learner asks for that the cluster
    or any single node does not have, or (on a cluster) fewer CPUs than the run's processes.
    `resources`: `ray.cluster_resources()`; `nodes`: `ray.nodes()` (asked here if needed)."""
    from impala_rep.learner.ray_learner import learner_gpus

    hosts = config.learner.hosts
    per_host = learner_gpus(config.learner.devices)
    gpus = per_host * hosts
    have = int(resources.get("GPU", 0))
    where = "this machine" if embedded else "the Ray cluster"
    if gpus > have:
        raise SetupError(
            f"bad learner_devices {config.learner.devices!r}: the learner asks for "
            f"{gpus} GPU(s) and {where} has {have}; use --learner-devices cpu or auto"
        )
    if per_host:
        _check_gpus_per_node(config, per_host, nodes, where)
    cpus = processes_asking_for_cpus(config)
    if not embedded and cpus > resources.get("CPU", 0):
        evaluator = " and an evaluator" if config.run.eval_every is not None else ""
        raise SetupError(
            f"bad num_actors {config.actors.num_actors}: {config.actors.num_actors} "
            f"actors, {hosts} learner host(s){evaluator} need {cpus} CPUs and the Ray cluster "
            f"has {resources.get('CPU', 0):g}; start more nodes first or use fewer actors"
        )


def processes_asking_for_cpus(config: TrainConfig) -> int:
    """The run's Ray processes, each of which asks Ray for one CPU: its actors, its learner
    hosts and, with --eval-every, its evaluator."""
    evaluator = 0 if config.run.eval_every is None else 1
    return config.actors.num_actors + config.learner.hosts + evaluator


def _check_gpus_per_node(
    config: TrainConfig, per_host: int, nodes: list[dict] | None, where: str
) -> None:
    """A learner host's GPUs are one Ray actor's: all on one node. Enough GPUs in total
    can still leave every host pending forever if they are spread over smaller nodes."""
    if nodes is None:
        import ray

        nodes = ray.nodes()
    per_node = sorted(
        (int(node.get("Resources", {}).get("GPU", 0)) for node in nodes if node.get("Alive", True)),
        reverse=True,
    )
    hosts = config.learner.hosts

    def fit(gpus: int) -> int:  # hosts of `gpus` GPUs each the nodes can hold
        return sum(count // gpus for count in per_node)

    if fit(per_host) >= hosts:
        return
    best = max((g for g in range(1, per_host) if fit(g) >= hosts), default=0)
    listing = ", ".join(str(count) for count in per_node) or "no node"
    asks = "the learner asks" if hosts == 1 else f"each of the {hosts} learner hosts asks"
    holds = (
        "no node has that many" if hosts == 1 else f"the nodes hold only {fit(per_host)} of them"
    )
    instead = (
        f"--learner-devices gpu:{best} (with more --learner-hosts to use more GPUs)"
        if best
        else "--learner-devices cpu or auto"
    )
    raise SetupError(
        f"bad learner_devices {config.learner.devices!r}: {asks} for {per_host} GPUs "
        f"on one node and on {where} {holds} (GPUs per node: {listing}); use {instead}"
    )


def answers(refs: list, timeout_s: float) -> list:
    """What each of `refs` answered within `timeout_s` in all, in order: None for one still
    pending then; one that failed is left out (its caller hears of that failure elsewhere)."""
    import ray

    ready = set(ray.wait(refs, num_returns=len(refs), timeout=timeout_s)[0]) if refs else set()
    values = []
    for ref in refs:
        try:
            values.append(ray.get(ref) if ref in ready else None)
        except ray.exceptions.RayError:
            pass
    return values
