"""One learner host's place in its group: its index, the group's size and their agreement.

A single learner is a group of one (`HostGroup()`). The hosts of a larger group
(`learner/learner_group.py` places them under Ray; `learner/build.py` builds each one's
service) run one `MultiWorkerMirroredStrategy` in lock-step: every step is a collective, so
they decide together, through `sync` (a `HostSync`), whether to step and whether to
checkpoint (`agree`), and a host leaves only through that agreement (`leave`).

A checkpoint holds the group's totals. Every host consumes the same frames per step, so the
group's frames are `hosts` times one host's; episodes differ by host and are summed through
`sync`. A resumed host starts from an equal share of both (the chief takes the episodes that
do not divide), so every host reaches the run's end at the same step, and a run can resume
onto another number of hosts.
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["HostGroup"]


@dataclasses.dataclass(frozen=True)
class HostGroup:
    """Host `host` (0: the chief) of `hosts`, in lock-step through `sync` when there are several.

    `sync`: an object whose `agree(ready=, checkpoint=) -> (go, save)` returns whether EVERY
    host is ready to step and whether ANY wants a checkpoint now, and whose `total(count)` sums
    a count over the hosts (`HostSync`; collectives, so each blocks until all hosts call it).
    Required with several hosts; None for a group of one.
    """

    host: int = 0
    hosts: int = 1
    sync: Any = None

    def __post_init__(self):
        if self.hosts < 1 or not 0 <= self.host < self.hosts:
            raise ValueError(f"host {self.host} of {self.hosts}: need 0 <= host < hosts")
        if self.hosts > 1 and self.sync is None:
            raise ValueError(f"a group of {self.hosts} hosts needs a sync")

    @property
    def lockstep(self) -> bool:
        """Whether this host steps in agreement with others (a sync is set)."""
        return self.sync is not None

    def share(self, frames: int, episodes: int) -> tuple[int, int]:
        """This host's share of the group's `frames` and `episodes` (a checkpoint's)."""
        chief_extra = episodes % self.hosts if self.host == 0 else 0
        return frames // self.hosts, episodes // self.hosts + chief_extra

    def totals(self, frames: int, episodes: int) -> tuple[int, int]:
        """The group's frames and episodes from this host's (a collective in lock-step: every
        host calls it at the same step)."""
        if self.sync is not None:
            episodes = self.sync.total(episodes)
        return self.hosts * frames, episodes

    def agree(self, *, ready: bool, checkpoint: bool) -> tuple[bool, bool]:
        """(every host is ready to step, some host wants a checkpoint now): a collective."""
        return self.sync.agree(ready=ready, checkpoint=checkpoint)

    def leave(self) -> None:
        """Takes part in the agreement as not ready, so that no peer is left waiting in it."""
        self.sync.agree(ready=False, checkpoint=False)
