"""The Ray launcher: every actor in a Ray actor process, the learner in one too or in the
driver's (the default).

On a machine of its own it starts an embedded Ray and runs the learner in this process
(`--learner-process driver`, `run/driver_learner.py`), which pulls the actors' unrolls.
With `--ray-address` it joins a cluster, where the learner is a Ray actor that lands on a
node with its devices (`--learner-process ray`; a multi-host learner is a group of them),
the actors spread over the nodes and push their unrolls to it, and the driver only
watches: training never passes through it.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from typing import Any

import ray

from impala_rep.learner.report import LearnerReport
from impala_rep.run.console import ray_console_options
from impala_rep.run.errors import LearnerLost, SetupError, TrainingFailed, one_line
from impala_rep.run.prepare import RunPlan
from impala_rep.run.ray_cluster import (
    answers,
    check_reachable,
    check_resources,
    processes_asking_for_cpus,
)
from impala_rep.run.ray_errors import describe_ray_error, failed_to_start
from impala_rep.run.ray_setup import WORKER_ENV, is_loopback
from impala_rep.startup import stamp

__all__ = ["RayLauncher", "start_ray"]

_LEARNER_DIED = "the learner process died"
_HOST_STUCK = "a learner host did not stop (a peer host failed during a step)"
_LEARNER_SILENT = "the learner stopped answering (no reply within its time limit)"


class RayLauncher:
    """Starts (or joins) Ray, the learner group and the actors: a
    `impala_rep.run.training.Launcher`."""

    def __init__(self, plan: RunPlan):
        self._plan = plan
        self._started_ray = False
        self._ray_owner = _RayOwner()
        self._learner = None  # a LearnerGroup, or a DriverLearner
        self._in_driver = None  # the DriverLearner, if the learner runs in this process
        self.fleet = None  # set by start()
        self.evaluations = None  # set by start() for --eval-every: a Ray process of its own
        self._learner_alive = True
        self._learner_stopped = False
        self.restored_from: str | None = None
        self.startup: dict[str, float] = {}

    def connect(self) -> None:
        """Starts an embedded Ray, or joins the cluster at `--ray-address`; SetupError if the
        cluster does not answer or could never place the run (run/ray_cluster.py)."""
        config = self._plan.config
        if config.run.ray_address:
            check_reachable(config.run.ray_address)
        if config.run.learner_process == "driver":  # its TensorFlow import overlaps Ray's start
            from impala_rep.run.driver_learner import DriverLearner

            self._learner = self._in_driver = DriverLearner(self._plan)
        try:
            self._started_ray = self._ray_owner.start(start_ray, config)
        except ConnectionError as err:  # something answered at the address, but not Ray's GCS
            raise SetupError(
                f"bad ray_address {config.run.ray_address!r}: could not join a Ray "
                f"cluster there ({one_line(err)})"
            ) from None
        check_resources(config, ray.cluster_resources(), embedded=not config.run.ray_address)
        self.startup["ray started"] = stamp()
        address = ray.util.get_node_ip_address()
        if self._started_ray and not is_loopback(address):
            self._wait_imported()  # the message must not go while stderr is discarded
            print(
                f"impala-rep: warning: the embedded Ray runs at {address} and listens on every "
                "interface: ray was imported before train(); set "
                "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 before importing it to keep it on 127.0.0.1",
                file=sys.stderr,
            )

    def start(self) -> None:
        """Starts building the learner (restored, on resume) and returns once Ray has placed
        it; `fleet` can start actors at once. They import TensorFlow and build while the
        learner does, and wait in their first call to it (`latest_weights`) until it is
        built: start-up costs the slower of the two, not their sum."""
        plan, config = self._plan, self._plan.config
        if self._learner is not None:  # in this process
            from impala_rep.run.driver_learner import PulledActorFleet

            self._learner.start()
            self.fleet = PulledActorFleet(plan, self._learner.host)
            self._start_evaluations(self._learner.host.latest_weights)
            return
        from impala_rep.learner.learner_group import create_learner_group

        try:
            self._learner = create_learner_group(
                config,
                plan.observation_shape,
                plan.agent_factory,
                plan.frame_skip,
                loss_fn=plan.loss_fn,
                resume=plan.resume,
            )
        except (RuntimeError, ray.exceptions.RayError) as err:  # e.g. never placed
            raise TrainingFailed(f"the learner could not start: {_describe(err)}") from None
        self.fleet = _RayActorFleet(plan, self._learner)
        chief = self._learner.chief  # the only host that publishes weights
        self._start_evaluations(lambda: chief.latest_weights.remote())

    def _start_evaluations(self, latest_weights) -> None:
        if self._plan.config.run.eval_every is not None:
            from impala_rep.run.ray_evaluator import RayEvaluations

            self.evaluations = RayEvaluations(self._plan, latest_weights)

    def wait_started(self) -> LearnerReport:
        """Waits until the learner is built (and restored); its first report."""
        try:
            self.restored_from = self._learner.wait_started()
            return self._learner.report()
        except (RuntimeError, ray.exceptions.RayError) as err:  # e.g. its constructor raised
            raise TrainingFailed(f"the learner could not start: {_describe(err)}") from None

    def placement(self) -> str | None:
        """On a cluster, where Ray placed the learner hosts and actors; None on one machine.
        TrainingFailed if the learner does not answer or Ray does not start every actor in time."""
        if not self._plan.config.run.ray_address:
            return None
        from impala_rep.learner.learner_group import REPORT_TIMEOUT_S
        from impala_rep.run.ray_cluster import ACTOR_START_TIMEOUT_S

        try:  # the hosts are running (wait_started() waited for them); the actors may not be yet
            with self._learner_call():
                host_nodes = self._learner.node_ids(timeout_s=REPORT_TIMEOUT_S)
        except LearnerLost as err:
            raise TrainingFailed(str(err)) from None
        actor_nodes = self.fleet.node_ids(ACTOR_START_TIMEOUT_S)
        if None in actor_nodes:
            raise TrainingFailed(
                f"Ray did not start {actor_nodes.count(None)} of {len(actor_nodes)} "
                f"actors within {ACTOR_START_TIMEOUT_S:.0f} s: each asks for 1 CPU "
                "and the cluster's CPUs are taken; free some or use fewer actors"
            )
        short = {node: node[:8] for node in host_nodes + actor_nodes}
        per_node = {short[n]: actor_nodes.count(n) for n in dict.fromkeys(actor_nodes)}
        return (
            f"placement: learner host(s) on node(s) {', '.join(short[n] for n in host_nodes)}; "
            f"actors per node {per_node} ({len(set(host_nodes + actor_nodes))} node(s) in use)"
        )

    def report(self) -> LearnerReport:
        with self._learner_call():
            return self._learner.report()

    def stop_learner(self) -> tuple[str, int] | None:
        """Stops training (actors blocked on the full queue are released) and writes the final
        checkpoint; returns it. LearnerLost if the learner is gone or a host did not stop."""
        if not self._learner_alive:
            raise LearnerLost(_LEARNER_DIED)
        with self._learner_call():
            if not self._learner.stop():  # a host left in a collective by a failed peer
                self._learner_alive = False
                raise LearnerLost(_HOST_STUCK)
            self._learner_stopped = True
            return self._learner.save()

    @contextlib.contextmanager
    def _learner_call(self):
        """A call to the learner: its process gone, or no answer in time, is LearnerLost."""
        try:
            yield
        except ray.exceptions.RayActorError:
            self._learner_alive = False
            raise LearnerLost(_LEARNER_DIED) from None
        except ray.exceptions.GetTimeoutError:
            self._learner_alive = False
            raise LearnerLost(_LEARNER_SILENT) from None

    def close(self) -> None:
        """Stops the actors and, on a shared cluster, the learner; shuts an embedded Ray down."""
        try:
            if self.evaluations is not None:
                self.evaluations.close()
            if self.fleet is not None:
                # Loops end once the learner has stopped: wait for them then. Otherwise (a
                # run that failed before) they never will, so they are freed at once.
                self.fleet.stop(timeout_s=30.0 if self._learner_stopped else 0.0)
            if self._learner is not None and not self._started_ray:
                self._learner.kill()  # on a shared cluster nothing of this run may linger
        finally:
            if self._started_ray:
                ray.shutdown()
            self._ray_owner.release()
            self._wait_imported()  # what the caller prints next must not be discarded

    def _wait_imported(self) -> None:
        """Until a learner in the driver has imported TensorFlow (`run/console.py`: stderr
        is discarded while it does)."""
        if self._in_driver is not None:
            self._in_driver.host.wait_imported()

    def abort(self) -> None:
        """A second signal: no time for a clean stop, but no Ray process may outlive us.

        The embedded node's processes (raylet, GCS, their agents, the workers) are this
        process's descendants: they are killed once it has exited. `ray.shutdown()` is the
        fallback only (no /proc): run from a signal handler while the driver's threads are
        in Ray calls, it can stop the raylet before the driver's core worker lets go of it,
        and the core worker then ends the process itself with code 1 instead of 130."""
        from impala_rep.run.shutdown import kill_descendants_after_exit

        if self._started_ray and not kill_descendants_after_exit():
            ray.shutdown()


class _RayActorFleet:
    """Actor processes as Ray actors, each running `run_actor_loop` (`actors/ray_actor.py`)."""

    def __init__(self, plan: RunPlan, learner):
        self._plan, self._learner = plan, learner
        self._actors: dict[int, Any] = {}
        self._runs: dict[Any, int] = {}  # pending run() ref -> slot
        self._starting: dict[Any, int] = {}  # pending pid() ref, resolved once constructed -> slot
        self._node_refs: list[Any] = []

    def start(self, slot: int, seed: int) -> None:
        from impala_rep.actors.ray_actor import create_actor

        actor = create_actor(
            config=self._plan.config,
            agent_factory=self._plan.agent_factory,
            learner=self._learner.host_for(slot),
            weights_from=self._learner.weights_source_for(slot),
            seed=seed,
            slot=slot,
            env_registration=self._plan.env_registration,
        )
        if self._plan.config.run.ray_address:  # asked before run() is queued behind it
            self._node_refs.append(actor.node_id.remote())
        self._actors[slot] = actor
        # Ray runs an actor's calls in order, so pid() returns once its constructor has
        # (built the actor, fetched the first weights), before run() starts.
        self._starting[actor.pid.remote()] = slot
        self._runs[actor.run.remote()] = slot

    def node_ids(self, timeout_s: float) -> list[str | None]:
        """Each started actor's node, waiting up to `timeout_s` in all: None for one not
        placed (or not constructed) by then; one that failed to start is left out (the
        supervisor reports and replaces it)."""
        return answers(self._node_refs, timeout_s)

    def started(self) -> list[int]:
        if not self._starting:
            return []
        done, _ = ray.wait(list(self._starting), num_returns=len(self._starting), timeout=0)
        # One that failed to start is reported by wait(): its run() fails as well.
        return [self._starting.pop(ref) for ref in done]

    def wait(self, timeout_s: float) -> list[tuple[int, str | None]]:
        if not self._runs:  # every loop ended: keep the driver's report rhythm
            time.sleep(timeout_s)
            return []
        ready, _ = ray.wait(list(self._runs), num_returns=len(self._runs), timeout=timeout_s)
        ended = []
        for ref in ready:
            slot = self._runs.pop(ref)
            try:
                ray.get(ref)
                ended.append((slot, None))
            except Exception as error:  # noqa: BLE001 - any failure of the actor's loop
                cause = describe_ray_error(error)
                ended.append(
                    (slot, f"failed to start: {cause}" if failed_to_start(error) else cause)
                )
        return ended

    def remove(self, slot: int) -> None:
        ray.kill(self._actors.pop(slot))
        # A hung actor's loop has not ended: its end is not to be reported later.
        self._runs = {ref: s for ref, s in self._runs.items() if s != slot}
        self._starting = {ref: s for ref, s in self._starting.items() if s != slot}

    def stop(self, timeout_s: float) -> None:
        if self._runs:
            ended, _ = ray.wait(list(self._runs), num_returns=len(self._runs), timeout=timeout_s)
            for ref in ended:  # read, so Ray does not log a failed loop as an unhandled error
                try:
                    ray.get(ref)
                except ray.exceptions.RayError:
                    pass
        for actor in self._actors.values():
            ray.kill(actor)
        self._actors.clear()
        self._runs.clear()
        self._starting.clear()


def _describe(error: Exception) -> str:
    return describe_ray_error(error) if isinstance(error, ray.exceptions.RayError) else str(error)


class _RayOwner:
    """Starts Ray from a thread of its own that lives as long as Ray does.

    Called on the main thread, `ray.init` swaps the SIGTERM handler for one that
    raises SystemExit wherever the main thread is, which can leave Ray half-started
    and the driver crashing at exit (seen here: exit 139 after a SIGTERM during the
    start). Called from another thread it leaves the run's handler
    (`run/shutdown.py`) in place, and a signal during the start is handled once Ray
    is up. That thread must outlive Ray: the processes Ray starts die with the thread
    that started them (PR_SET_PDEATHSIG fires when that thread ends), so it waits
    until `release()`, after `ray.shutdown()`.
    """

    def __init__(self):
        self._released = threading.Event()

    def start(self, function, *args):
        """`function(*args)` on the owner thread; its result, or its exception re-raised."""
        outcome: list = []
        finished = threading.Event()

        def own() -> None:
            try:
                outcome.append((True, function(*args)))
            except BaseException as error:  # re-raised on the main thread
                outcome.append((False, error))
            finished.set()
            self._released.wait()

        threading.Thread(target=own, name="impala-rep-ray-owner", daemon=True).start()
        while not finished.wait(0.1):  # short waits: the main thread's signal handlers run
            pass
        ok, value = outcome[0]
        if not ok:
            raise value
        return value

    def release(self) -> None:
        self._released.set()


@contextlib.contextmanager
def _environment(values: dict[str, str]):
    """`values` in os.environ while the block runs (the processes it starts inherit them),
    as it was afterwards."""
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def start_ray(config, *, num_cpus: int | None = None) -> bool:
    """Connects to `config.run.ray_address` or starts an embedded Ray; True if we started it.
    `num_cpus`: the embedded Ray's CPU slots, if more than the run's processes need (a
    population of runs, `impala-rep tune`)."""
    if ray.is_initialized():
        return False
    console = ray_console_options(config.run.verbose)
    if config.run.ray_address:
        ray.init(address=config.run.ray_address, **console)
        return False
    # Embedded Ray for a single machine: on loopback (train() asked for Ray's local-only
    # mode, run/ray_setup.py), no dashboard, enough CPU slots for every learner host and
    # every actor even on a 2-core machine (they share the cores; the OS schedules them).
    # Workers inherit the driver's TensorFlow log level (quiet by default) and keep Ray's
    # crash handler (the driver does without it: run/ray_setup.py) through the environment
    # the node starts with, not a runtime env: for a job with a runtime env Ray starts new
    # workers instead of handing out those it prestarted, which put most of a second before
    # the learner's first line (docs/notebook.md, "Start-up").
    worker_env = {
        "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"),
        **WORKER_ENV,
    }
    with _environment(worker_env):
        ray.init(
            address="local",  # a new instance, even if RAY_ADDRESS names a running one
            num_cpus=max(os.cpu_count() or 1, processes_asking_for_cpus(config), num_cpus or 0),
            include_dashboard=False,
            **console,
        )
    return True
