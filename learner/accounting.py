"""A learner host's accounting: frames, episodes, recent returns, busy time and policy lag.

`Accounting` is what `LearnerService` knows of the work done; `report_fields` gives the
`LearnerReport` fields it accounts for, `progress` what a checkpoint saves of it. Thread-safe:
the training thread records its steps while the driver reads reports.

Frames are agent steps (T * columns). `frames_produced == frames_consumed + frames_queued` in
every report: produced frames are those the queue accepted (`QueueCounts.frames_put`),
consumed frames are those trained on, and queued frames are the difference. A staged batch, or
one taken and never trained on (non-finite, or not agreed on by a group), was not trained on,
so it counts as queued. A resumed host starts both produced and consumed at its share of the
checkpoint's consumed frames (`frames`): unrolls that were queued when the previous run stopped
were never trained on and are produced again.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from impala_rep.learner.unroll_queue import QueueCounts
from impala_rep.unroll import EpisodeStats

__all__ = ["Accounting", "RETURN_WINDOW", "episode_returns"]

RETURN_WINDOW = 100  # episodes in the reported mean return, as is usual for CartPole/Atari


def episode_returns(stats: Sequence[EpisodeStats | None]) -> list[float]:
    """The returns of the episodes finished in a batch's unrolls (their stats, None: none)."""
    return [float(r) for s in stats if s is not None for r in np.asarray(s.returns)]


class Accounting:
    """What one learner host has trained on, and the busy time and policy lag of its steps.

    Args:
      clock: seconds on a monotonic clock (busy time); injected so that tests step time.
      frames: frames consumed before this host started (its share of a resumed checkpoint's).
      episodes: episodes finished before it started (its share of the checkpoint's).
      recent_returns: the returns of the last episodes before it started, oldest first; the
        newest `RETURN_WINDOW` are kept.
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        frames: int = 0,
        episodes: int = 0,
        recent_returns: Iterable[float] = (),
    ):
        self._clock = clock
        self._lock = threading.Lock()
        self._base_frames = frames  # consumed before this host started (resume)
        self._frames_trained = 0  # by this host (taken, not staged nor skipped)
        self._episodes = episodes
        self._new_returns: list[float] = []  # since the last report
        self._recent_returns: collections.deque[float] = collections.deque(
            recent_returns, maxlen=RETURN_WINDOW
        )
        self._metrics: dict[str, float] = {}
        self._policy_lag: tuple[float, float] | None = None  # (mean, max) of the last step
        self._busy_s = 0.0
        self._step_started: float | None = None  # set while a step runs

    @property
    def frames_consumed(self) -> int:
        """Frames trained on, in the whole run (a staged batch is not)."""
        with self._lock:
            return self._base_frames + self._frames_trained

    def step_started(self) -> None:
        """A step begins: busy time counts from now."""
        with self._lock:
            self._step_started = self._clock()

    def step_ended(
        self,
        *,
        frames: int,
        stats: Sequence[EpisodeStats | None],
        metrics: dict[str, float],
        policy_lag: tuple[float, float],
    ) -> None:
        """The step begun last trained on a batch of `frames` with episode `stats`; `metrics`
        are its loss metrics, `policy_lag` its (mean, max)."""
        returns = episode_returns(stats)
        with self._lock:
            if self._step_started is not None:
                self._busy_s += self._clock() - self._step_started
            self._step_started = None
            self._frames_trained += frames
            self._metrics = metrics
            self._policy_lag = policy_lag
            self._new_returns.extend(returns)
            self._recent_returns.extend(returns)
            self._episodes += len(returns)

    def training_ended(self) -> None:
        """No step runs any more: one that began and never ended (a non-finite loss, an
        error) adds no busy time and no frames."""
        with self._lock:
            self._step_started = None

    def progress(self) -> tuple[int, int, tuple[float, ...]]:
        """What a checkpoint saves: (frames consumed, episodes, recent returns), this host's."""
        with self._lock:
            return (
                self._base_frames + self._frames_trained,
                self._episodes,
                tuple(self._recent_returns),
            )

    def report_fields(self, queue_counts: Callable[[], QueueCounts]) -> dict[str, Any]:
        """The `LearnerReport` fields accounted for here, with the returns of the episodes
        finished since the last call.

        `queue_counts`: reads the unroll queue's counters; called after this host's own are
        read, so that every frame trained on is one the queue counted as put.
        """
        with self._lock:
            new_returns, self._new_returns = self._new_returns, []
            recent = list(self._recent_returns)
            episodes = self._episodes
            metrics = dict(self._metrics)
            policy_lag = self._policy_lag
            # Count a step in progress up to now, so each report gets the busy time
            # that fell inside it (a long step, e.g. the first one with tracing,
            # would otherwise land whole in one report and exceed 100%).
            busy_s = self._busy_s
            if self._step_started is not None:
                busy_s += self._clock() - self._step_started
            trained = self._frames_trained
        counts = queue_counts()
        return dict(
            # Consumed: trained on. A staged batch counts as queued, so
            # produced == consumed + queued holds in every report.
            frames_produced=self._base_frames + counts.frames_put,
            frames_consumed=self._base_frames + trained,
            frames_queued=counts.frames_put - trained,
            queue_size=counts.size,
            learner_busy_s=busy_s,
            new_episode_returns=tuple(new_returns),
            episodes=episodes,
            episode_return_mean=float(np.mean(recent)) if recent else None,
            window_episodes=len(recent),
            metrics=metrics,
            policy_lag_mean=None if policy_lag is None else policy_lag[0],
            policy_lag_max=None if policy_lag is None else policy_lag[1],
        )
