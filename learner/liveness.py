"""How long each actor of a learner host has been silent, so a hung actor shows.

Every `enqueue` of an unroll is a sign of life from its sender (the actor's slot). An actor
blocked in `enqueue` on a full queue is not silent: it waits on the learner (back-pressure),
so its silence is 0 until its unroll is queued. The driver's supervisor reads the silences
(`LearnerReport.actor_silence_s`) to tell a hung actor from a waiting one.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from collections.abc import Callable, Iterator

__all__ = ["ActorLiveness"]


class ActorLiveness:
    """Seconds since each actor slot last sent, on `clock` (injected so that tests step time).

    Thread-safe: actors' calls record, the driver's reports read."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._lock = threading.Lock()
        self._last_heard: dict[int, float] = {}  # actor slot -> when it last sent
        self._waiting: collections.Counter[int] = collections.Counter()  # slot -> sends in progress

    @contextlib.contextmanager
    def sending(self, sender: int | None) -> Iterator[None]:
        """Around one send of `sender` (None: an unnamed sender, not tracked): heard when it
        starts and when it ends, and not silent while it lasts."""
        self._heard(sender, +1)
        try:
            yield
        finally:
            self._heard(sender, -1)

    def silence_s(self) -> dict[int, float]:
        """Slot -> seconds since it last sent; 0 while one of its sends is in progress. Slots
        never heard from are absent."""
        with self._lock:
            now = self._clock()
            return {
                slot: 0.0 if self._waiting[slot] else now - heard
                for slot, heard in self._last_heard.items()
            }

    def _heard(self, sender: int | None, waiting: int) -> None:
        if sender is not None:
            with self._lock:
                self._last_heard[sender] = self._clock()
                self._waiting[sender] += waiting
