"""The learner in the driver's process, the actors in Ray processes (`--learner-process driver`).

A run on one machine with one learner host needs no learner process. In the driver the
learner starts importing TensorFlow before Ray is up, so the two longest stages of the
start-up overlap; a learner that is a Ray actor cannot begin before Ray has
(docs/notebook.md, "The learner in the driver").

The driver cannot serve calls from Ray actors, so they do not push their unrolls to it: for
each actor a driver thread pulls them (`produce`, `actors/ray_actor.py`), queues them with
the learner (blocking while its queue is full: the back-pressure, and the learner counts that
actor as waiting, not silent) and asks for the next, handing over the learner's newest
weights when they are newer than the ones that actor was sent. Two calls are in flight
per actor, so an actor computes its next unroll while the driver queues the last one, as it
does when it pushes (`run_actor_loop`): its weights are just as fresh.
"""

from __future__ import annotations

import collections
import threading
from typing import Any

import ray

from impala_rep.learner.ray_learner import LearnerHost
from impala_rep.observation_nest import shape_of
from impala_rep.run.console import import_quietly
from impala_rep.run.errors import one_line
from impala_rep.run.prepare import RunPlan
from impala_rep.run.ray_cluster import answers
from impala_rep.run.ray_errors import describe_ray_error, failed_to_start
from impala_rep.run.slot_threads import SlotThreads

__all__ = ["DriverLearner", "PulledActorFleet"]

_IN_FLIGHT = 2  # calls per actor: one unroll being computed while the last one is queued
_STOP_TIMEOUT_S = 300.0


class DriverLearner:
    """The learner in this process, answering as `LearnerGroup` does for the Ray launcher."""

    def __init__(self, plan: RunPlan):
        """Starts importing TensorFlow at once: made before Ray starts, so the two overlap."""
        self._plan = plan
        verbose = plan.config.run.verbose
        self.host = LearnerHost(plan.config.learner, importing=lambda: import_quietly(verbose))
        self._build: threading.Thread | None = None
        self._restored_from: str | None = None
        self._error: BaseException | None = None

    def start(self) -> None:
        """Builds the learner (restored, on resume) in a thread; actors may start at once."""
        plan = self._plan

        def build() -> None:
            try:
                self._restored_from = self.host.start(
                    config=plan.config,
                    observation_shape=shape_of(plan.observation_shape),
                    agent_factory=plan.agent_factory,
                    frame_skip=plan.frame_skip,
                    loss_fn=plan.loss_fn,
                    resume=plan.resume,
                )
            except BaseException as error:  # noqa: BLE001 - wait_started reports it
                self._error = error

        self._build = threading.Thread(target=build, name="learner-build", daemon=True)
        self._build.start()

    def wait_started(self) -> str | None:
        """Waits until the learner is built; the checkpoint it restored from (None: a new
        run). RuntimeError saying why if it could not be built."""
        self._build.join()
        if self._error is not None:
            raise RuntimeError(one_line(self._error))
        return self._restored_from

    def node_ids(self, timeout_s: float) -> list[str]:  # noqa: ARG002 - LearnerGroup's signature
        return [ray.get_runtime_context().get_node_id()]

    def report(self):
        return self.host.report()

    def stop(self) -> bool:
        return self.host.stop(_STOP_TIMEOUT_S)

    def save(self) -> tuple[str, int] | None:
        return self.host.save()

    def kill(self) -> None:
        """Ends training without waiting (a run on a shared Ray ends with the driver anyway)."""
        if self._build is not None and not self._build.is_alive() and self._error is None:
            self.host.stop(0.0)


class PulledActorFleet:
    """Actor processes as Ray actors that a driver thread per slot pulls unrolls from: the
    `ActorFleet` of a learner in the driver."""

    def __init__(self, plan: RunPlan, learner: LearnerHost):
        self._plan, self._learner = plan, learner
        self._actors: dict[int, Any] = {}
        self._slots = SlotThreads()

    def start(self, slot: int, seed: int) -> None:
        from impala_rep.actors.ray_actor import create_actor

        actor = create_actor(
            config=self._plan.config,
            agent_factory=self._plan.agent_factory,
            seed=seed,
            slot=slot,
            env_registration=self._plan.env_registration,
        )
        self._actors[slot] = actor
        self._slots.launch(slot, lambda slot: self._pull(slot, actor))

    def _pull(self, slot: int, actor) -> None:
        try:
            ray.get(actor.pid.remote())  # returns once the constructor has
        except ray.exceptions.RayError as error:
            cause = describe_ray_error(error)
            self._slots.end(slot, f"failed to start: {cause}" if failed_to_start(error) else cause)
            return
        self._slots.mark_started(slot)
        try:
            version, published = self._learner.latest_weights()  # waits for the build
        except RuntimeError:  # the build failed: the driver reports that, not this slot
            return
        pending = collections.deque([actor.produce.remote((version, published))])
        pending.extend(actor.produce.remote() for _ in range(_IN_FLIGHT - 1))
        sent = version
        try:
            while True:
                unroll, stats = ray.get(pending.popleft())
                stop, version, published = self._learner.enqueue(unroll, stats, sender=slot)
                if stop:
                    self._slots.end(slot, None)
                    return
                newer = (version, published) if version > sent else None
                sent = max(sent, version)
                pending.append(actor.produce.remote(newer))
        except ray.exceptions.RayError as error:  # the actor's env raised, or its process died
            self._slots.end(slot, describe_ray_error(error))

    def started(self) -> list[int]:
        return self._slots.started()

    def wait(self, timeout_s: float) -> list[tuple[int, str | None]]:
        return self._slots.wait(timeout_s)

    def node_ids(self, timeout_s: float) -> list[str | None]:
        """Each actor's node (None: not placed within `timeout_s`; one that failed to start
        is left out)."""
        return answers([actor.node_id.remote() for actor in self._actors.values()], timeout_s)

    def remove(self, slot: int) -> None:
        self._slots.forget(slot)  # its thread ends with the process, silently
        ray.kill(self._actors.pop(slot))

    def stop(self, timeout_s: float) -> None:
        self._slots.join(timeout_s)
        for actor in self._actors.values():
            ray.kill(actor)
        self._actors.clear()
