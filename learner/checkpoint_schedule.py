"""When a learner host writes its checkpoints while training, and the last one it wrote.

A checkpoint is due `every_s` seconds after the last one was written (or after the schedule
started), on an injected monotonic clock. The service's training thread asks between steps,
so that a checkpoint never sees a half-applied update; a multi-host group's hosts agree on it
first, as every host must save at the same step (`learner/service.py`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

__all__ = ["CheckpointSchedule"]


class CheckpointSchedule:
    """Saves to `checkpoint` on time, and remembers the last checkpoint (path, learner step).

    Args:
      checkpoint: a `RunCheckpoint` (or a non-chief host's `ScratchCheckpoint`): `save(counters)`
        returns the path written. None: no checkpoints (never due, nothing saved).
      every_s: seconds between checkpoints written while training.
      clock: seconds on a monotonic clock; injected so that tests step time instead of sleeping.
        The first checkpoint is due `every_s` after the schedule is made.
      last: the checkpoint the learner was restored from (path, learner step), if any.
    """

    def __init__(
        self,
        checkpoint: Any | None,
        *,
        every_s: float,
        clock: Callable[[], float] = time.monotonic,
        last: tuple[str, int] | None = None,
    ):
        self._checkpoint, self._every_s, self._clock = checkpoint, every_s, clock
        self.last = last  # (path, learner step); read by other threads (one assignment)
        self._last_save_time = clock()

    @property
    def enabled(self) -> bool:
        return self._checkpoint is not None

    def due(self) -> bool:
        """Whether `every_s` have passed since the last save (never without a checkpoint)."""
        return self.enabled and self._clock() - self._last_save_time >= self._every_s

    def save(self, counters: Any, *, step: int) -> tuple[str, int]:
        """Writes a checkpoint with the run's `counters` (a `RunCounters`) at learner step `step`;
        the next is due `every_s` from now. Returns (path, step)."""
        if self._checkpoint is None:
            raise RuntimeError("this schedule has no checkpoint to save to")
        path = self._checkpoint.save(counters)
        self.last = (path, step)
        self._last_save_time = self._clock()
        return self.last
