"""Keeps `num_actors` actors feeding the learner, replacing any that fail.

An actor fails when its process dies (killed, out of memory), its loop
raises (an env exception), or it hangs: once started (built, first weights in
hand), it sends no unroll for `timeout_s` (the learner reports each actor's
silence, and waiting on a full queue is not silence); or its start-up takes
longer than `max(timeout_s, startup_limit_s)` (default `STARTUP_LIMIT_S`).
Start-up has its own limit because its cost (a process, the envs, TensorFlow's
import for agents that need it) grows with the machine's load, not with what
the actor does: a short `timeout_s`, chosen to notice a hung env quickly, would
otherwise replace replacements that are merely slow to start. The supervisor
has the actor's remains removed, starts a replacement with a fresh seed in the
same slot and reports the event with its cause, so the driver can log and count
it. Failures that keep coming (an env that crashes on every start) would
otherwise loop forever: more than `max_failures` within `window_s` seconds
raises `ActorCrashLoop` instead.

How actors run is the launcher's business: the supervisor drives an
`ActorFleet` (Ray processes in `run/launch_ray.py`, threads in
`run/launch_local.py`), so both launchers share this policy.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import Protocol

import numpy as np

__all__ = [
    "ActorSupervisor",
    "ActorFleet",
    "ActorFailure",
    "ActorCrashLoop",
    "actor_seed",
    "STARTUP_LIMIT_S",
]

# Seconds an actor may take to start when `timeout_s` is shorter: far above a start-up
# on a loaded machine with few cores (tens of seconds), short enough that an env whose
# constructor hangs is still noticed.
STARTUP_LIMIT_S = 300.0


class ActorCrashLoop(RuntimeError):
    """Actors failed too often to keep going; the message names the last cause."""


@dataclasses.dataclass(frozen=True)
class ActorFailure:
    slot: int  # which of the num_actors slots
    cause: str  # one line
    restarts: int  # replacements started so far in this run, this one included


class ActorFleet(Protocol):
    """Where the actors run: starts one per slot and says which loops have ended."""

    def start(self, slot: int, seed: int) -> None:
        """Starts an actor in `slot` that feeds the learner until it says stop."""

    def started(self) -> list[int]:
        """The slots whose actor finished starting (built, first weights in hand) since the
        last call; each start is returned once. One whose start failed may be among them:
        `wait` reports that failure all the same."""

    def wait(self, timeout_s: float) -> list[tuple[int, str | None]]:
        """Waits up to `timeout_s` for loops to end: `(slot, None)` for one that ended
        because the learner said stop, `(slot, cause)` for one that failed (cause: one
        line; "failed to start: ..." if it never ran). Each ended loop is returned once."""

    def remove(self, slot: int) -> None:
        """Frees what is left of the actor in `slot` (a loop that raised may leave its
        process alive)."""

    def stop(self, timeout_s: float) -> None:
        """Waits up to `timeout_s` for the loops to end (the learner has stopped), then
        frees every actor that is left."""


def actor_seed(*, seed: int, slot: int, generation: int, start_step: int) -> int:
    """A distinct seed per slot, per replacement and per resumed run (so a resumed or
    replaced actor does not replay the episodes its predecessor already played)."""
    return int(np.random.SeedSequence([seed, slot, generation, start_step]).generate_state(1)[0])


class ActorSupervisor:
    """Starts the actors, watches their loops, replaces failed ones.

    Args:
      fleet: where the actors run (`ActorFleet`).
      num_actors: slots to keep filled.
      seed, start_step: mixed into every actor's seed (`actor_seed`).
      max_failures, window_s: the crash-loop limit.
      timeout_s: silence after which a started actor counts as hung (`replace_silent`).
      startup_limit_s: an actor still starting after `max(timeout_s, startup_limit_s)`
        counts as hung.
      clock: seconds on a monotonic clock; injected so that tests step time instead of
        sleeping through the limits.
    """

    def __init__(
        self,
        *,
        fleet: ActorFleet,
        num_actors: int,
        seed: int,
        start_step: int = 0,
        max_failures: int = 10,
        window_s: float = 600.0,
        timeout_s: float = float("inf"),
        startup_limit_s: float = STARTUP_LIMIT_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._fleet, self._clock = fleet, clock
        self._seed, self._start_step = seed, start_step
        self._max_failures, self._window_s = max_failures, window_s
        self._timeout_s = timeout_s
        self._startup_limit_s = max(timeout_s, startup_limit_s)
        self._generation = [0] * num_actors
        self._started_at = [0.0] * num_actors  # when the slot's silence clock started
        self._starting: set[int] = set()  # slots whose actor has not finished starting
        self._failure_times: collections.deque = collections.deque()
        self.restarts = 0
        self.finished: set[int] = set()  # slots whose loop ended because the learner said stop
        for slot in range(num_actors):
            self._start(slot)

    def _start(self, slot: int) -> None:
        seed = actor_seed(
            seed=self._seed,
            slot=slot,
            generation=self._generation[slot],
            start_step=self._start_step,
        )
        self._started_at[slot] = self._clock()
        self._starting.add(slot)
        self._fleet.start(slot, seed)

    def learner_ready(self) -> None:
        """The learner is built: actors started before could not send anything until now,
        so their silence counts from here."""
        now = self._clock()
        self._started_at = [max(started, now) for started in self._started_at]

    def poll(self, timeout_s: float) -> list[ActorFailure]:
        """Waits up to `timeout_s` for actor loops to end; replaces the failed ones.

        Returns:
          The failures seen (each already replaced).

        Raises:
          ActorCrashLoop: more than `max_failures` failures within `window_s`.
        """
        failures = []
        for slot, cause in self._fleet.wait(timeout_s):
            if cause is None:
                self.finished.add(slot)
                continue
            failures.append(self._replace(slot, cause))
        return failures

    def replace_silent(self, silence_s: Mapping[int, float]) -> list[ActorFailure]:
        """Replaces the actors that sent nothing for longer than `timeout_s` since they
        started, and those still starting after the start-up limit.

        Args:
          silence_s: seconds since each slot's actor last sent an unroll, as the learner
            reports it (`LearnerReport.actor_silence_s`); a slot is silent at most since
            its actor finished starting, so an old entry does not count against a
            replacement.

        Raises:
          ActorCrashLoop: as `poll`.
        """
        now, failures = self._clock(), []
        for slot in self._fleet.started():
            if slot in self._starting:
                self._starting.discard(slot)
                self._started_at[slot] = max(self._started_at[slot], now)
        for slot, started in enumerate(self._started_at):
            if slot in self.finished:
                continue
            if slot in self._starting:
                if now - started > self._startup_limit_s:
                    failures.append(
                        self._replace(
                            slot,
                            f"did not start within {self._startup_limit_s:.0f} s: hung, replaced",
                        )
                    )
                continue
            silent = min(silence_s.get(slot, float("inf")), now - started)
            if silent > self._timeout_s:
                failures.append(
                    self._replace(
                        slot,
                        f"sent no unroll for {silent:.0f} s (limit {self._timeout_s:.0f} s): "
                        "hung, replaced",
                    )
                )
        return failures

    def _replace(self, slot: int, cause: str) -> ActorFailure:
        self._fleet.remove(slot)
        now = self._clock()
        self._failure_times.append(now)
        while self._failure_times and now - self._failure_times[0] > self._window_s:
            self._failure_times.popleft()
        if len(self._failure_times) > self._max_failures:
            raise ActorCrashLoop(
                f"{len(self._failure_times)} actor failures within {self._window_s:.0f} s "
                f"(limit {self._max_failures}); the last, in actor {slot}: {cause}"
            )
        self._generation[slot] += 1
        self.restarts += 1
        self._start(slot)
        return ActorFailure(slot=slot, cause=cause, restarts=self.restarts)
