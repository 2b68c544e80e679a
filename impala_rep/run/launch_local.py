"""The local launcher (`--launcher local`): learner and actors in this one process, no Ray.

The same Ray-free pieces as under Ray (`build_learner_service`, `build_actor`,
`run_actor_loop`), with the actors as threads that call the service directly.
For debugging with a plain debugger (one process: breakpoints anywhere) and for
fast tests; it shares the cores with the Python GIL, so it is not for speed.
Metrics, checkpoints and exit codes are the Ray launcher's.
"""

from __future__ import annotations

from impala_rep.extensions import actor_return_discount, extensions_for
from impala_rep.learner.report import LearnerReport
from impala_rep.run.errors import TrainingFailed, one_line
from impala_rep.run.periodic_evaluation import Evaluator, ThreadEvaluations
from impala_rep.run.prepare import RunPlan
from impala_rep.run.slot_threads import SlotThreads

__all__ = ["LocalLauncher"]


class LocalLauncher:
    """Builds the learner service in this process and runs the actors as threads: a
    `impala_rep.run.training.Launcher`."""

    def __init__(self, plan: RunPlan):
        self._plan = plan
        self._service = None
        self.fleet = None  # set by start()
        self.evaluations = None  # set by start() for --eval-every: a thread of this process
        self.restored_from: str | None = None
        self.startup: dict[str, float] = {}  # no Ray, no learner process: the service's only

    def connect(self) -> None:
        """Nothing to connect to: everything runs in this process."""

    def start(self) -> None:
        """Builds the learner (restored, on resume) in this process; then `fleet` is ready."""
        from impala_rep.learner.build import build_learner_service

        plan, config = self._plan, self._plan.config
        try:
            self._service = build_learner_service(
                config=config,
                observation_shape=plan.observation_shape,
                agent_factory=plan.agent_factory,
                frame_skip=plan.frame_skip,
                loss_fn=plan.loss_fn,
                resume=plan.resume,
            )
        except Exception as err:  # noqa: BLE001 - the learner's construction, in any way
            raise TrainingFailed(f"the learner could not start: {one_line(err)}") from None
        self.restored_from = self._service.restored_from
        self.fleet = _ThreadActorFleet(plan, self._service)
        if config.run.eval_every is not None:
            self.evaluations = ThreadEvaluations(
                lambda: Evaluator(
                    env=config.env,
                    agent_factory=plan.agent_factory,
                    episodes=config.run.eval_episodes,
                    frame_skip=plan.frame_skip,
                    env_registration=plan.env_registration,
                ),
                latest_weights=self._latest_weights,
            )

    def _latest_weights(self) -> tuple[int, list]:
        version, published = self._service.latest_weights()
        return version, published[0]

    def wait_started(self) -> LearnerReport:
        """The learner's first report (`start` has built it already)."""
        return self._service.report()

    def placement(self) -> None:
        return None

    def report(self) -> LearnerReport:
        return self._service.report()

    def stop_learner(self) -> tuple[str, int] | None:
        self._service.stop()
        return self._service.save()

    def close(self) -> None:
        if self.evaluations is not None:
            self.evaluations.close()
        if self.fleet is not None:  # loops end once the learner stopped
            self.fleet.stop(timeout_s=30.0)
        if self._service is not None:
            self._service.stop()  # idempotent; releases actor threads blocked in enqueue

    def abort(self) -> None:
        """A second signal: the process exits at once, and every thread with it."""


class _ThreadActorFleet:
    """Actors as daemon threads running `run_actor_loop` against the service directly."""

    def __init__(self, plan: RunPlan, service):
        self._plan, self._service = plan, service
        self._slots = SlotThreads()

    def start(self, slot: int, seed: int) -> None:
        self._slots.launch(slot, lambda slot: self._run(slot, seed))

    def _run(self, slot: int, seed: int) -> None:
        from impala_rep.actors.actor_loop import run_actor_loop
        from impala_rep.actors.build import build_actor

        config, service = self._plan.config, self._service
        try:
            actor = build_actor(
                env=config.env,
                actors=config.actors,
                agent_factory=self._plan.agent_factory,
                seed=seed,
                return_discount=actor_return_discount(extensions_for(config.loss)),
                env_registration=self._plan.env_registration,
            )
            version, published = service.latest_weights()
            actor.set_weights(published[0], version)
        except Exception as err:  # noqa: BLE001 - reported as the actor's failure
            self._slots.end(slot, f"failed to start: {one_line(err)}")
            return
        self._slots.mark_started(slot)
        try:
            # Sending is the call itself: enqueue blocks while the queue is full
            # (back-pressure) and its reply carries the newest weights.
            run_actor_loop(
                actor=actor,
                send=lambda unroll, stats: (unroll, stats),
                receive=lambda sent: service.enqueue(*sent, sender=slot),
                fetch_weights=lambda weights: weights,
            )
        except Exception as err:  # noqa: BLE001 - an env or policy error ends this actor only
            self._slots.end(slot, one_line(err))
            return
        self._slots.end(slot, None)

    def started(self) -> list[int]:
        return self._slots.started()

    def wait(self, timeout_s: float) -> list[tuple[int, str | None]]:
        return self._slots.wait(timeout_s)

    def remove(self, slot: int) -> None:
        # A failed loop has returned already. A hung one cannot be stopped from outside
        # (Python threads cannot be killed): it is left behind as a daemon thread.
        self._slots.forget(slot).join(timeout=5.0)

    def stop(self, timeout_s: float) -> None:
        self._slots.join(timeout_s)
