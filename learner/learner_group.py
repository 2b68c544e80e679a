"""The learner as a group of Ray actors: one host, or K hosts in one MultiWorkerMirroredStrategy.

`create_learner_group(config, ...)` is what `train()` uses. With
`config.learner_hosts == 1` it starts the single learner actor of
`learner/ray_learner.py`, unchanged. With K > 1:

1. Ray places K learner host actors (SPREAD over nodes; each asks for
   `learner_gpus` GPUs, so on a GPU cluster they land on GPU nodes).
2. Each reports the address Ray placed it at: its node's IP
   (`ray.util.get_node_ip_address()`) and a port free there.
3. The driver hands every host the full list and its index; each sets
   TF_CONFIG (`learner/cluster_spec.py`) before any other TensorFlow work,
   creates `MultiWorkerMirroredStrategy` (the Replicator's between-graph mode)
   and its `Learner` and `LearnerService`. All K start together: the strategy
   waits for the whole group.

Each host trains on B / K columns per step from its own queue, fed by the
actors assigned to it round robin (actor slot s -> host s % K); the
collectives make the update that of the whole batch of B. Host 0, the chief,
publishes the weights (every actor fetches them from it) and keeps the
checkpoints; the others take part in each save into a scratch directory.
`LearnerGroup` gives the driver one learner: merged reports, stop, save, kill.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Sequence

import ray

from impala_rep.config import TrainConfig
from impala_rep.learner.service import RETURN_WINDOW
from impala_rep.learner.ray_learner import (LearnerEndpoints, create_learner, learner_gpus,
                                            learner_hyperparams)

__all__ = ["LearnerGroup", "create_learner_group", "distinct_addresses", "merge_reports",
           "RayLearnerHost"]

# Seconds a host gets to end its training thread on stop: a host left in a
# collective by a dead or failed peer never ends it, and is killed instead.
_HOST_STOP_TIMEOUT_S = 60.0


class _LearnerHostProcess(LearnerEndpoints):
    """One host of a multi-host learner. Cheap to construct: TensorFlow starts in `start`,
    once TF_CONFIG can be written."""

    def __init__(self):
        self._service = None

    def host_address(self) -> str:
        """"IP:PORT" this host will serve the group's collectives on."""
        from impala_rep.learner.cluster_spec import free_port

        ip = ray.util.get_node_ip_address()
        return f"{ip}:{free_port(ip)}"

    def start(self, *, config: TrainConfig, addresses: Sequence[str], index: int,
              observation_shape: tuple[int, ...], agent_factory: Callable[[], Any],
              frame_skip: int = 1, loss_fn: Callable[..., Any] | None = None) -> int:
        """Joins the group as host `index` of `addresses`; returns this process's pid."""
        from impala_rep.learner.cluster_spec import set_tf_config

        # Before any TensorFlow op: the strategy reads TF_CONFIG when it is created.
        set_tf_config(os.environ, addresses, index)
        import tensorflow as tf

        from impala_rep import Replicator
        from impala_rep.learner.checkpointing import CHECKPOINT_SUBDIR, RunCheckpoint
        from impala_rep.learner.host_sync import HostSync, ScratchCheckpoint
        from impala_rep.learner.learner import Learner
        from impala_rep.learner.service import LearnerService

        replicator = Replicator(strategy=tf.distribute.MultiWorkerMirroredStrategy())
        learner = Learner(agent=agent_factory(), replicator=replicator,
                          hyperparams=learner_hyperparams(config, frame_skip),
                          observation_shape=observation_shape, loss_fn=loss_fn)
        chief = index == 0
        checkpoint = None
        if config.logdir is not None:
            # LOGDIR must be writable from the chief's node (docs/cluster.md).
            checkpoint = (RunCheckpoint(learner=learner,
                                        directory=os.path.join(config.logdir, CHECKPOINT_SUBDIR))
                          if chief else ScratchCheckpoint(learner=learner))
        hosts = len(addresses)
        host_batch = config.batch_size // hosts
        # Every host stops after the same, known, number of steps.
        steps = config.total_learner_steps(frame_skip)
        self._service = LearnerService(
            learner=learner, batch_size=host_batch,
            total_frames=steps * config.unroll_length * host_batch,
            queue_capacity=config.queue_capacity, publish=ray.put if chief else None,
            checkpoint=checkpoint, checkpoint_every_s=config.checkpoint_every_s,
            sync=HostSync(replicator), frames_scale=hosts)
        return os.getpid()

    def restored_from(self) -> str | None:
        return None


RayLearnerHost = ray.remote(_LearnerHostProcess)


def merge_reports(reports: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One learner report from the hosts' reports (host 0 first).

    Frames, queue contents and episodes add up; the step is the one all hosts
    have completed; busy time is the hosts' mean; the loss metrics are the
    chief's (identical on every host: they are reduced over all replicas), the
    policy lag is over all hosts; the run is done, or failed, once any host is.
    """
    if len(reports) == 1:
        return reports[0]
    chief = reports[0]
    metrics = dict(chief["metrics"])
    lag_means = [r["metrics"]["policy_lag_mean"] for r in reports if "policy_lag_mean" in r["metrics"]]
    lag_maxes = [r["metrics"]["policy_lag_max"] for r in reports if "policy_lag_max" in r["metrics"]]
    if lag_means:
        metrics["policy_lag_mean"] = sum(lag_means) / len(lag_means)
        metrics["policy_lag_max"] = max(lag_maxes)
    # Each host's mean covers its own last episodes; weight by how many it holds.
    weighted = [(r["episode_return_mean"], min(r["episodes"], RETURN_WINDOW)) for r in reports
                if r["episode_return_mean"] is not None]
    total_weight = sum(w for _, w in weighted)
    return_mean = (sum(m * w for m, w in weighted) / total_weight) if total_weight else None

    def first(key):
        return next((r[key] for r in reports if r[key]), None)

    return {
        "learner_steps": min(r["learner_steps"] for r in reports),
        "frames_produced": sum(r["frames_produced"] for r in reports),
        "frames_consumed": sum(r["frames_consumed"] for r in reports),
        "frames_queued": sum(r["frames_queued"] for r in reports),
        "queue_size": sum(r["queue_size"] for r in reports),
        "learner_busy_s": sum(r["learner_busy_s"] for r in reports) / len(reports),
        "new_episode_returns": [x for r in reports for x in r["new_episode_returns"]],
        "episodes": sum(r["episodes"] for r in reports),
        "episode_return_mean": return_mean,
        "metrics": metrics,
        "done": any(r["done"] for r in reports),
        "error": first("error"),
        "non_finite": first("non_finite"),
        "last_checkpoint": chief["last_checkpoint"],
    }


class LearnerGroup:
    """The driver's view of the learner: one host or a group (see the module docstring).

    Methods block until the hosts answer; a dead host raises `ray.exceptions.RayActorError`.
    """

    def __init__(self, hosts: list[Any], started: list[Any] | None = None):
        self.hosts = hosts
        self._started = started or []  # pending `start` calls of a multi-host group

    @property
    def chief(self) -> Any:
        return self.hosts[0]

    def weights_source_for(self, slot: int) -> Any | None:
        """Where actor slot `slot` fetches weights if not from the host it feeds: the
        chief, the only publisher (None for the chief's own actors and for K = 1)."""
        return self.chief if slot % len(self.hosts) else None

    def host_for(self, slot: int) -> Any:
        """The host actor slot `slot` feeds: round robin."""
        return self.hosts[slot % len(self.hosts)]

    def wait_started(self) -> None:
        """Waits for a multi-host group to be built (its first collective: the strategy)."""
        if self._started:
            ray.get(self._started)
            self._started = []

    def report(self) -> dict[str, Any]:
        return merge_reports(ray.get([host.report.remote() for host in self.hosts]))

    def restored_from(self) -> str | None:
        return ray.get(self.chief.restored_from.remote())

    def stop(self) -> bool:
        """Stops every host together; False if some host's training did not end (then
        kill the group rather than save)."""
        if len(self.hosts) == 1:
            ray.get(self.chief.stop.remote())
            return True
        return all(ray.get([host.stop.remote(_HOST_STOP_TIMEOUT_S) for host in self.hosts]))

    def save(self) -> tuple[str, int] | None:
        """The final checkpoint (every host takes part; the chief's is kept)."""
        return ray.get([host.save.remote() for host in self.hosts])[0]

    def kill(self) -> None:
        for host in self.hosts:
            ray.kill(host)


def distinct_addresses(ask: Callable[[], list[str]], tries: int = 3) -> list[str]:
    """The hosts' `ip:port` addresses from `ask()`, asked up to `tries` times until no two agree.

    Two hosts on one node pick their free ports independently, so both may be
    offered the same one; a group with a duplicate address would hang in its
    first collective. RuntimeError naming the duplicates if every try had some.
    """
    for _ in range(tries):
        addresses = list(ask())
        if len(set(addresses)) == len(addresses):
            return addresses
    duplicates = sorted({a for a in addresses if addresses.count(a) > 1})
    raise RuntimeError(f"learner hosts were offered the same address {', '.join(duplicates)} "
                       f"{tries} times in a row; start the run again")


def create_learner_group(config: TrainConfig, observation_shape, agent_factory, frame_skip: int = 1,
                         loss_fn: Callable[..., Any] | None = None,
                         resume: bool = False) -> LearnerGroup:
    """Starts the learner: `config.learner_hosts` Ray actors (see the module docstring).

    Call `wait_started()` before using it. A multi-host learner cannot resume
    (`impala_rep.resume.check_resumable` refuses it first)."""
    if config.learner_hosts == 1:
        return LearnerGroup([create_learner(config, observation_shape, agent_factory, frame_skip,
                                            loss_fn=loss_fn, resume=resume)])
    if resume:
        raise ValueError("a multi-host learner cannot resume; resume with learner_hosts 1")
    hosts = [RayLearnerHost.options(
        num_cpus=1,
        num_gpus=learner_gpus(config.learner_devices),
        # Every actor of this host may block in enqueue while the driver reports.
        max_concurrency=-(-config.num_actors // config.learner_hosts) + 4,
        # One host per node where Ray can, so the group's hosts really are hosts.
        scheduling_strategy="SPREAD",
    ).remote() for _ in range(config.learner_hosts)]
    try:
        addresses = distinct_addresses(
            lambda: ray.get([host.host_address.remote() for host in hosts]))
    except RuntimeError:
        for host in hosts:
            ray.kill(host)
        raise
    started = [host.start.remote(config=config, addresses=addresses, index=index,
                                 observation_shape=tuple(observation_shape),
                                 agent_factory=agent_factory, frame_skip=frame_skip, loss_fn=loss_fn)
               for index, host in enumerate(hosts)]
    return LearnerGroup(hosts, started)
