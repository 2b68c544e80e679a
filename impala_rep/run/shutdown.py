"""Ctrl-C and SIGTERM for a training run: the first asks for a clean stop, the second exits at once.

A clean stop (checkpoint, actors stopped, logs flushed) needs the driver's loop
to notice, so the first signal only records itself; the loop checks
`StopSignals.received` on every report (at most `report_every_s` later). A
second signal means the user will not wait: `on_second` runs (it shuts the
embedded Ray down, so no Ray process outlives the command) and the process
exits at once with the conventional code 128 + signal number (130 for SIGINT,
143 for SIGTERM).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import TextIO

__all__ = ["StopSignals", "exit_code", "exit_on_signals"]

_HANDLED = (signal.SIGINT, signal.SIGTERM)


def exit_code(signum: int) -> int:
    """The shell's exit status for a process ended by `signum` (130 SIGINT, 143 SIGTERM)."""
    return 128 + int(signum)


def exit_on_signals() -> None:
    """Until a run installs its `StopSignals`: SIGINT/SIGTERM end the command with 130/143
    and no traceback (nothing has started or been written yet; `finally` blocks still run)."""

    def _exit(signum: int, frame) -> None:
        sys.exit(exit_code(signum))

    for signum in _HANDLED:
        signal.signal(signum, _exit)


class StopSignals:
    """Context manager that turns SIGINT/SIGTERM into a stop request while it is active.

    Handlers can only be installed from the main thread; elsewhere (a library
    user training from a worker thread) this does nothing and `received` stays
    None. The previous handlers are restored on exit.
    """

    def __init__(self, *, out: TextIO, on_second: Callable[[], None] = lambda: None):
        self._out = out
        self._on_second = on_second
        self._previous: dict[int, object] = {}
        self.received: int | None = None

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for signum in _HANDLED:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame) -> None:
        name = signal.Signals(signum).name
        if self.received is None:
            self.received = signum
            print(
                f"\nimpala-rep: {name} received: stopping after the current step, saving a "
                "checkpoint (send it again to exit at once)",
                file=self._out,
                flush=True,
            )
            return
        print(
            f"\nimpala-rep: second {name}: exiting now without a checkpoint",
            file=sys.stderr,
            flush=True,
        )
        try:
            self._on_second()
        finally:
            os._exit(exit_code(self.received))
