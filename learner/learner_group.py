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

Every start-up call is bounded: a host Ray does not place within
`PLACE_TIMEOUT_S`, or that is not built within `START_TIMEOUT_S`, ends the start
with `LearnerNotAnswering` naming it (and, for a placement, what it asks for).

Each host trains on B / K columns per step from its own queue, fed by the
actors assigned to it round robin (actor slot s -> host s % K); the
collectives make the update that of the whole batch of B. Host 0, the chief,
publishes the weights (every actor fetches them from it) and keeps the
checkpoints. `LearnerGroup` gives the driver one learner: merged reports, stop,
save, kill.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ray

from impala_rep.config import TrainConfig
from impala_rep.learner.ray_learner import RayLearnerHost, learner_gpus
from impala_rep.learner.report import LearnerReport
from impala_rep.observation_nest import shape_of

__all__ = [
    "LearnerGroup",
    "LearnerNotAnswering",
    "create_learner_group",
    "distinct_addresses",
    "PLACE_TIMEOUT_S",
    "START_TIMEOUT_S",
    "REPORT_TIMEOUT_S",
    "SAVE_TIMEOUT_S",
]

# Seconds a host gets to end its training thread on stop: a host left in a
# collective by a dead or failed peer never ends it, and is killed instead.
_HOST_STOP_TIMEOUT_S = 120.0
# The driver's other calls are bounded too (a host that stops answering is then lost).
REPORT_TIMEOUT_S = 60.0
SAVE_TIMEOUT_S = 600.0
# Seconds Ray gets to place every host and start its process (a new Python with Ray; the
# constructor imports no TensorFlow): seconds normally, several times that on a loaded
# machine with few cores. A host still unplaced after this waits for resources no node has
# free.
PLACE_TIMEOUT_S = 120.0
# Seconds the placed hosts get to build (`start`): importing TensorFlow and building the
# learner take tens of seconds on a loaded machine with few cores, a resume also reads a
# checkpoint (one that took up to SAVE_TIMEOUT_S to write), and a group's hosts wait for the
# slowest.
START_TIMEOUT_S = 600.0


class LearnerNotAnswering(RuntimeError):
    """A learner host did not answer a start-up call in time; the message says which and why."""


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
        returns the checkpoint the chief restored from (None: a new run).
        LearnerNotAnswering if some host is not built within `START_TIMEOUT_S`."""
        restored = _get_in_time(
            self._started,
            START_TIMEOUT_S,
            lambda late: (
                f"{_hosts(late, len(self.hosts))} did not finish starting within "
                f"{START_TIMEOUT_S:.0f} s (importing TensorFlow, building the learner, restoring a "
                "checkpoint, or the hosts of a group connecting to each other)"
            ),
        )[0]
        self._started = []
        return restored

    def node_ids(self, timeout_s: float) -> list[str]:
        """The Ray node of each host; `ray.exceptions.GetTimeoutError` past `timeout_s`."""
        return ray.get([host.node_id.remote() for host in self.hosts], timeout=timeout_s)

    def report(self) -> LearnerReport:
        """The merged report; `ray.exceptions.GetTimeoutError` if a host does not answer
        within `REPORT_TIMEOUT_S` (a report is served beside the training thread: it never
        waits for a step)."""
        return LearnerReport.merge(
            ray.get([host.report.remote() for host in self.hosts], timeout=REPORT_TIMEOUT_S)
        )

    def stop(self) -> bool:
        """Stops every host together; False if some host's training did not end (then
        kill the group rather than save)."""
        return all(
            ray.get(
                [host.stop.remote(_HOST_STOP_TIMEOUT_S) for host in self.hosts],
                timeout=_HOST_STOP_TIMEOUT_S + REPORT_TIMEOUT_S,
            )
        )

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
    raise RuntimeError(
        f"learner hosts were offered the same address {', '.join(duplicates)} "
        f"{tries} times in a row; start the run again"
    )


def create_learner_group(
    config: TrainConfig,
    observation_shape,
    agent_factory,
    frame_skip: int = 1,
    loss_fn: Callable[..., Any] | None = None,
    resume: bool = False,
) -> LearnerGroup:
    """Starts the learner: `config.learner.hosts` Ray actors (see the module docstring).

    Actors may be started at once (a host serves `latest_weights` and `enqueue` once
    built); the driver calls `wait_started()` before its own calls. `resume` restores every
    host from the newest readable checkpoint in LOGDIR/checkpoints (written by any number of
    hosts)."""
    count, gpus = config.learner.hosts, learner_gpus(config.learner.devices)
    hosts = [
        RayLearnerHost.options(
            num_cpus=1,
            num_gpus=gpus,
            # Every actor of this host may block in enqueue (back-pressure) while the
            # driver still gets reports.
            max_concurrency=-(-config.actors.num_actors // count) + 4,
            # One host per node where Ray can, so the group's hosts really are hosts.
            scheduling_strategy="SPREAD" if count > 1 else "DEFAULT",
        ).remote(config.learner)
        for _ in range(count)
    ]

    def placed(refs: list[Any]) -> list[Any]:  # the hosts' first answers: placed and running
        return _get_in_time(
            refs,
            PLACE_TIMEOUT_S,
            lambda late: (
                f"Ray did not place {_hosts(late, count)} within {PLACE_TIMEOUT_S:.0f} s: "
                f"{'it asks' if count == 1 else 'each host asks'} for 1 CPU"
                f"{f' and {gpus} GPU(s)' if gpus else ''} on one node, and no node had them free"
            ),
        )

    addresses: list[str] = []
    try:
        if count > 1:
            addresses = distinct_addresses(
                lambda: placed([host.host_address.remote() for host in hosts])
            )
        else:
            placed([hosts[0].pid.remote()])
    except (RuntimeError, ray.exceptions.RayError):  # nothing of the group may linger
        for host in hosts:
            ray.kill(host)
        raise
    started = [
        host.start.remote(
            config=config,
            observation_shape=shape_of(observation_shape),
            agent_factory=agent_factory,
            frame_skip=frame_skip,
            loss_fn=loss_fn,
            resume=resume,
            host=index,
            addresses=addresses,
        )
        for index, host in enumerate(hosts)
    ]
    return LearnerGroup(hosts, started)


def _get_in_time(refs: list[Any], timeout_s: float, late: Callable[[list[int]], str]) -> list[Any]:
    """`ray.get(refs)` bounded by `timeout_s`, as report/stop/save are; on a timeout,
    LearnerNotAnswering(`late(indices of the refs that did not answer)`)."""
    try:
        return ray.get(refs, timeout=timeout_s)
    except ray.exceptions.GetTimeoutError:
        _, pending = ray.wait(refs, num_returns=len(refs), timeout=0)
        if not pending:  # all answered just now
            return ray.get(refs)
        raise LearnerNotAnswering(late([refs.index(ref) for ref in pending])) from None


def _hosts(indices: list[int], count: int) -> str:
    """ "the learner" for a group of one, else which hosts ("learner hosts 0, 2 of 3")."""
    if count == 1:
        return "the learner"
    return (
        f"learner host{'s' if len(indices) > 1 else ''} {', '.join(map(str, indices))} of {count}"
    )
