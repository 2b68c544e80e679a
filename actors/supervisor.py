"""Keeps `num_actors` Ray actor processes feeding the learner, replacing any that fail.

An actor fails when its process dies (killed, out of memory: Ray raises
`ActorDiedError`) or its loop raises (an env exception: `RayTaskError`). The
supervisor kills what is left of it, starts a replacement with a fresh seed in
the same slot and reports the event with its cause, so the driver can log and
count it. Failures that keep coming (an env that crashes on every start) would
otherwise loop forever: more than `max_failures` within `window_s` seconds
raises `ActorCrashLoop` instead.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from typing import Any, Callable

import numpy as np
import ray

from impala_rep.ray_errors import describe_ray_error, failed_to_start


__all__ = ["ActorSupervisor", "ActorFailure", "ActorCrashLoop", "actor_seed"]


class ActorCrashLoop(RuntimeError):
    """Actors failed too often to keep going; the message names the last cause."""


@dataclasses.dataclass(frozen=True)
class ActorFailure:
    slot: int        # which of the num_actors slots
    cause: str       # one line
    restarts: int    # replacements started so far in this run, this one included


def actor_seed(*, seed: int, slot: int, generation: int, start_step: int) -> int:
    """A distinct seed per slot, per replacement and per resumed run (so a resumed or
    replaced actor does not replay the episodes its predecessor already played)."""
    return int(np.random.SeedSequence([seed, slot, generation, start_step]).generate_state(1)[0])


class ActorSupervisor:
    """Starts the actors, watches their loops, replaces failed ones.

    Args:
      create: `create(slot, seed)` starts one actor process (a Ray actor handle).
      num_actors: slots to keep filled.
      seed, start_step: mixed into every actor's seed (`actor_seed`).
      max_failures, window_s: the crash-loop limit.
    """

    def __init__(self, *, create: Callable[[int, int], Any], num_actors: int, seed: int,
                 start_step: int = 0, max_failures: int = 10, window_s: float = 600.0):
        self._create = create
        self._seed, self._start_step = seed, start_step
        self._max_failures, self._window_s = max_failures, window_s
        self._generation = [0] * num_actors
        self._actors: list[Any] = [None] * num_actors
        self._runs: dict[Any, int] = {}   # pending run() ref -> slot
        self._failure_times: collections.deque = collections.deque()
        self.restarts = 0
        self.finished: set[int] = set()   # slots whose loop ended because the learner said stop
        for slot in range(num_actors):
            self._start(slot)

    def _start(self, slot: int) -> None:
        seed = actor_seed(seed=self._seed, slot=slot, generation=self._generation[slot],
                          start_step=self._start_step)
        actor = self._create(slot, seed)
        self._actors[slot] = actor
        self._runs[actor.run.remote()] = slot

    @property
    def actors(self) -> list[Any]:
        return list(self._actors)

    def poll(self, timeout_s: float) -> list[ActorFailure]:
        """Waits up to `timeout_s` for actor loops to end; replaces the failed ones.

        Returns:
          The failures seen (each already replaced).

        Raises:
          ActorCrashLoop: more than `max_failures` failures within `window_s`.
        """
        if not self._runs:
            time.sleep(timeout_s)
            return []
        ready, _ = ray.wait(list(self._runs), num_returns=len(self._runs), timeout=timeout_s)
        failures = []
        for ref in ready:
            slot = self._runs.pop(ref)
            try:
                ray.get(ref)
                self.finished.add(slot)
                continue
            except Exception as error:  # noqa: BLE001 - any failure of the actor's loop
                cause = describe_ray_error(error)
                if failed_to_start(error):
                    cause = f"failed to start: {cause}"
            ray.kill(self._actors[slot])  # a loop that raised leaves its process alive
            now = time.monotonic()
            self._failure_times.append(now)
            while self._failure_times and now - self._failure_times[0] > self._window_s:
                self._failure_times.popleft()
            if len(self._failure_times) > self._max_failures:
                raise ActorCrashLoop(
                    f"{len(self._failure_times)} actor failures within {self._window_s:.0f} s "
                    f"(limit {self._max_failures}); the last, in actor {slot}: {cause}")
            self._generation[slot] += 1
            self.restarts += 1
            self._start(slot)
            failures.append(ActorFailure(slot=slot, cause=cause, restarts=self.restarts))
        return failures

    def stop(self, timeout_s: float = 30.0) -> None:
        """Waits up to `timeout_s` for the loops to end (the learner has stopped), then
        kills every actor process that is left."""
        if self._runs:
            ray.wait(list(self._runs), num_returns=len(self._runs), timeout=timeout_s)
        for actor in self._actors:
            if actor is not None:
                ray.kill(actor)
        self._runs.clear()
