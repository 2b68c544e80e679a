"""The learner as a group of Ray actors: K hosts in one MultiWorkerMirroredStrategy, or one.

`create_learner_group(config, ...)` is what the Ray launcher uses; a single
learner (`config.learner.hosts == 1`) is a group of one, built the same way:

1. Ray places K learner host actors (`learner/ray_learner.py`; SPREAD over
   nodes; each asks for `learner_gpus` GPUs, so on a GPU cluster they land on
   GPU nodes).
2. For K > 1 each reports the address Ray placed it at: its node's IP
   (`ray.util.get_node_ip_address()`) and a port free there.
3. The driver hands every host the full list and its index; each builds its
   service with `build_learner_service` (`learner/build.py`): TF_CONFIG first,
   then the strategy, the `Learner` and, on resume, the restored checkpoint.
   All K start together: the strategy waits for the whole group.

Each host trains on B / K columns per step from its own queue, fed by the
actors assigned to it round robin (actor slot s -> host s % K); the
collectives make the update that of the whole batch of B. Host 0, the chief,
publishes the weights (every actor fetches them from it) and keeps the
checkpoints. `LearnerGroup` gives the driver one learner: merged reports, stop,
save, kill.
"""

from __future__ import annotations

from typing import Any, Callable

import ray

from impala_rep.config import TrainConfig
from impala_rep.learner.ray_learner import RayLearnerHost, learner_gpus
from impala_rep.learner.report import LearnerReport

__all__ = ["LearnerGroup", "create_learner_group", "distinct_addresses", "REPORT_TIMEOUT_S",
           "SAVE_TIMEOUT_S"]

# Seconds a host gets to end its training thread on stop: a host left in a
# collective by a dead or failed peer never ends it, and is killed instead.
_HOST_STOP_TIMEOUT_S = 120.0
# The driver's other calls are bounded too (a host that stops answering is then lost).
REPORT_TIMEOUT_S = 60.0
SAVE_TIMEOUT_S = 600.0


class LearnerGroup:
    """The driver's view of the learner: one host or a group (see the module docstring).

    Methods block until the hosts answer; a dead host raises `ray.exceptions.RayActorError`.
    """

    def __init__(self, hosts: list[Any], started: list[Any]):
        self.hosts = hosts
        self._started = started  # the hosts' pending `start` calls

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

    def wait_started(self) -> str | None:
        """Waits for every host to be built (a group's first collective: the strategy);
        returns the checkpoint the chief restored from (None: a new run)."""
        restored = ray.get(self._started)[0]
        self._started = []
        return restored

    def report(self) -> LearnerReport:
        """The merged report; `ray.exceptions.GetTimeoutError` if a host does not answer
        within `REPORT_TIMEOUT_S` (a report is served beside the training thread: it never
        waits for a step)."""
        return LearnerReport.merge(ray.get([host.report.remote() for host in self.hosts],
                                           timeout=REPORT_TIMEOUT_S))

    def stop(self) -> bool:
        """Stops every host together; False if some host's training did not end (then
        kill the group rather than save)."""
        return all(ray.get([host.stop.remote(_HOST_STOP_TIMEOUT_S) for host in self.hosts],
                           timeout=_HOST_STOP_TIMEOUT_S + REPORT_TIMEOUT_S))

    def save(self) -> tuple[str, int] | None:
        """The final checkpoint (every host takes part; the chief's is kept)."""
        return ray.get([host.save.remote() for host in self.hosts], timeout=SAVE_TIMEOUT_S)[0]

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
    """Starts the learner: `config.learner.hosts` Ray actors (see the module docstring).

    Call `wait_started()` before using it. `resume` restores every host from the
    newest readable checkpoint in LOGDIR/checkpoints (written by any number of hosts)."""
    count = config.learner.hosts
    hosts = [RayLearnerHost.options(
        num_cpus=1,
        num_gpus=learner_gpus(config.learner.devices),
        # Every actor of this host may block in enqueue (back-pressure) while the
        # driver still gets reports.
        max_concurrency=-(-config.actors.num_actors // count) + 4,
        # One host per node where Ray can, so the group's hosts really are hosts.
        scheduling_strategy="SPREAD" if count > 1 else "DEFAULT",
    ).remote() for _ in range(count)]
    addresses: list[str] = []
    if count > 1:
        try:
            addresses = distinct_addresses(
                lambda: ray.get([host.host_address.remote() for host in hosts]))
        except RuntimeError:
            for host in hosts:
                ray.kill(host)
            raise
    started = [host.start.remote(config=config, observation_shape=tuple(observation_shape),
                                 agent_factory=agent_factory, frame_skip=frame_skip,
                                 loss_fn=loss_fn, resume=resume, host=index, addresses=addresses)
               for index, host in enumerate(hosts)]
    return LearnerGroup(hosts, started)
