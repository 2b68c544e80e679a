"""A training run's process tree, read from /proc: each process's role, RSS and CPU time.

Roles come from the process titles Ray sets (`ray::LearnerHost...`, `ray::_ActorProcess...`)
and the `impala-rep train` command line; everything else in the tree is Ray's own
(raylet, GCS, dashboard, log monitor, idle workers, agents).
"""

from __future__ import annotations

import os
import pathlib

ROLES = ("driver", "learner", "actor", "ray")
_TICKS = os.sysconf("SC_CLK_TCK")


def _children() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    return children


def process_tree(root: int) -> list[int]:
    children, tree, todo = _children(), [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, []))
    return tree


def role(pid: int) -> str:
    """learner, actor, driver or ray (Ray's own processes), from the process title."""
    try:
        cmdline = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return "gone"
    if not cmdline.strip():  # exited, not yet reaped (a zombie has no command line)
        return "gone"
    if cmdline.startswith("ray::LearnerHost"):
        return "learner"
    if cmdline.startswith("ray::_ActorProcess"):
        return "actor"
    if "impala_rep" in cmdline and " train" in cmdline:
        return "driver"
    return "ray"


def rss_mib(pid: int) -> float:
    try:
        for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds the process has used so far (None: it is gone)."""
    try:
        fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime (fields 14, 15)
