"""Start-up stages: when each step from a run's launch to its first trained frame happened.

Each process stamps its own stages on the wall clock (`time.time()`, shared by the processes
of one machine): the driver when Ray has started, the learner host when its process began,
when TensorFlow was imported, when it was built, when the first unroll came in and when the
first step ended. The driver's monitor writes them to events.jsonl as one `startup` event, in
seconds from the `train` call (`benchmarks/startup.py` reads it), so a slow start can be told
apart by stage.
"""

from __future__ import annotations

import os
import time

__all__ = ["STAGES", "process_started", "stamp"]

# In the order they usually happen (Ray may start the learner's process before `ray.init`
# returns: it starts idle workers ahead); a run has a subset (the local launcher starts no Ray
# and no learner process).
STAGES = (
    "ray started",
    "learner process",
    "tensorflow imported",
    "learner built",
    "first unroll",
    "first trained frame",
)


def stamp() -> float:
    """Now, on the clock the stages are stamped with."""
    return time.time()


def process_started() -> float | None:
    """When this process began, on the `stamp` clock: from /proc (Linux), else None."""
    try:
        with open("/proc/self/stat") as stat:
            # Field 22, counted after the command in parentheses (which may hold spaces).
            started_ticks = int(stat.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as uptime:
            up_s = float(uptime.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return stamp() - up_s + started_ticks / os.sysconf("SC_CLK_TCK")
