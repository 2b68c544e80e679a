"""Ctrl-C and SIGTERM for a training run: the first asks for a clean stop, the second exits at once.

A clean stop (checkpoint, actors stopped, logs flushed) needs the driver's loop
to notice, so the first signal only records itself; the loop checks
`StopSignals.received` on every report (at most `report_every_s` later). A
second signal means the user will not wait: `on_second` runs (it has the
embedded Ray's processes killed as the command exits, so none outlives it) and the process
exits at once with the conventional code 128 + signal number (130 for SIGINT,
143 for SIGTERM).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import TextIO

__all__ = ["StopSignals", "exit_code", "exit_on_signals", "kill_descendants_after_exit"]

_HANDLED = (signal.SIGINT, signal.SIGTERM)
_REAPERS: list[subprocess.Popen] = []  # see kill_descendants_after_exit


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


def kill_descendants_after_exit() -> bool:
    """Has every process descended from this one now killed (SIGKILL) once this one has
    exited, by a small process that outlives it; False where /proc lists no processes
    (not Linux), with nothing done.

    For an exit without a clean stop: the caller exits next. The reaper waits on a pipe
    only this process holds the writing end of, so it acts when this process is gone
    (a zombie too), however it ended, and never before."""
    try:
        parents = {int(p.name): _parent(p) for p in os.scandir("/proc") if p.name.isdigit()}
    except OSError:
        return False
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    found, stack = [], [os.getpid()]
    while stack:
        for child in children.get(stack.pop(), ()):
            found.append(child)
            stack.append(child)
    if found:
        # Kept: its pipe's writing end must stay open until this process exits, not close
        # when the Popen object would be collected.
        _REAPERS.append(
            subprocess.Popen(
                ["/bin/sh", "-c", 'cat >/dev/null; kill -9 "$@" 2>/dev/null', "reaper"]
                + [str(pid) for pid in found],
                stdin=subprocess.PIPE,  # its writing end stays open here until this process exits
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # not in the terminal's process group: a Ctrl-C spares it
            )
        )
    return True


def _parent(entry: os.DirEntry) -> int:
    """The parent pid in /proc/PID/stat (-1 for a process gone meanwhile)."""
    try:
        with open(os.path.join(entry.path, "stat")) as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1
