"""One driver thread per actor slot, and what it reports: the bookkeeping of the thread fleets.

The local launcher runs each actor's loop in a thread (`run/launch_local.py`); a learner in the
driver pulls each Ray actor's unrolls from a thread (`run/driver_learner.py`). Either way the
supervisor asks the same of the slots (`run/supervisor.py`'s `ActorFleet`): which started, which
loops ended and why. A slot's thread speaks for it only while it is the slot's current thread,
so a hung one that was replaced and ends later says nothing.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable

__all__ = ["SlotThreads"]


class SlotThreads:
    """The threads of the slots, the starts and ends they report, and waiting for them."""

    def __init__(self):
        self._threads: dict[int, threading.Thread] = {}
        self._ended: queue.Queue = queue.Queue()
        self._started: queue.Queue = queue.Queue()

    def launch(self, slot: int, target: Callable[[int], None]) -> None:
        """Runs `target(slot)` in a new daemon thread, the slot's current one."""
        thread = threading.Thread(target=target, args=(slot,), name=f"actor-{slot}", daemon=True)
        self._threads[slot] = thread
        thread.start()

    def mark_started(self, slot: int) -> None:
        """Called by the slot's thread once its actor is built."""
        self._started.put((slot, threading.current_thread()))

    def end(self, slot: int, cause: str | None) -> None:
        """Called by the slot's thread as its loop ends: cause None when the learner said stop."""
        if self._threads.get(slot) is threading.current_thread():
            self._ended.put((slot, cause))

    def started(self) -> list[int]:
        slots = []
        while not self._started.empty():
            slot, thread = self._started.get()
            if self._threads.get(slot) is thread:  # not a replaced thread's start
                slots.append(slot)
        return slots

    def wait(self, timeout_s: float) -> list[tuple[int, str | None]]:
        """Ended loops, waiting up to `timeout_s` while some still run (as `ray.wait` does)."""
        ended, deadline = [], time.monotonic() + timeout_s
        running = sum(thread.is_alive() for thread in self._threads.values())
        while True:
            try:
                ended.append(self._ended.get(timeout=max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                return ended
            if len(ended) >= running and self._ended.empty():
                return ended

    def forget(self, slot: int) -> threading.Thread:
        """The slot's thread, which no longer speaks for it."""
        return self._threads.pop(slot)

    def join(self, timeout_s: float) -> None:
        """Waits up to `timeout_s` in all for every thread to end; forgets them."""
        deadline = time.monotonic() + timeout_s
        for thread in self._threads.values():
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        self._threads.clear()
