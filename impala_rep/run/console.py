"""What reaches the console: the run's own lines, and TensorFlow's, CUDA's and Ray's only with
--verbose.

A CPU-only run would otherwise print, in every process, TensorFlow's start-up
notes (oneDNN, "Could not find cuda drivers"), CUDA's `failed call to cuInit`
error line, Ray's token-authentication warning and its log-deduplication notes:
lines that look like failures when there is none. Quieted at the entry point,
never at package import (a library user's process is theirs):

- TensorFlow's C++ log level 3 (`TF_CPP_MIN_LOG_LEVEL`, unless the user set it),
  inherited by Ray's workers; a real failure still arrives as a Python exception.
- TensorFlow's first import with the process's stderr (fd 2) sent to /dev/null:
  its start-up notes are written before its logging is configured, so no log
  level reaches them. Only in a process that uses TensorFlow: a driver whose
  actors and learner run under Ray imports none (it writes TensorBoard events
  with TensorBoard's own writer), which saves its start-up the seconds of CPU that
  importing TensorFlow costs. A learner in the driver imports it in a thread while
  Ray starts (`import_quietly`): for those seconds anything else written to fd 2
  is lost too, so the launcher waits for the import before the run's own messages
  can follow (Ray's errors arrive as exceptions).
- Ray: worker output stays in Ray's own log files (`log_to_driver=False`,
  /tmp/ray/session_latest/logs/ on each node) and the driver logs only errors.
  Workers' failures reach the console as the run's own lines (an actor's cause,
  the learner's traceback).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from typing import Any

__all__ = ["import_quietly", "quiet_native_logs", "ray_console_options"]


def quiet_native_logs(verbose: bool, *, import_tensorflow: bool = True) -> None:
    """Quiets TensorFlow's C++ logs in this process and those it starts, then, if this
    process will use TensorFlow (`import_tensorflow`), imports it with its start-up notes
    discarded. Nothing, with `verbose`."""
    if verbose:
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if import_tensorflow:
        with _stderr_discarded():
            import tensorflow  # noqa: F401  (imported here so its notes are discarded)


def import_quietly(verbose: bool) -> contextlib.AbstractContextManager:
    """Around TensorFlow's first import in a thread of the driver: its start-up notes
    discarded, unless `verbose`."""
    return contextlib.nullcontext() if verbose else _stderr_discarded()


def ray_console_options(verbose: bool) -> dict[str, Any]:
    """`ray.init` keywords: workers' output on the console and Ray's warnings only with
    `verbose`."""
    return {
        "log_to_driver": verbose,
        "logging_level": logging.WARNING if verbose else logging.ERROR,
    }


@contextlib.contextmanager
def _stderr_discarded() -> Iterator[None]:
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
