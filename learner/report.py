"""What a learner tells the driver: one typed report, and how the reports of several hosts merge.

`LearnerService.report()` builds it; `LearnerReport.merge` makes one report of a
multi-host learner's (host 0, the chief, first); the run layer's monitor reads
it. Counters are in agent steps (the monitor multiplies by the env's frame skip).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

__all__ = ["LearnerReport"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class LearnerReport:
    """One learner's (or one group's) state at the time of the report.

    `frames_produced == frames_consumed + frames_queued` holds in every report.
    `metrics` are the last step's loss metrics, already reduced over every
    replica of every host (so identical on every host); the policy lag is the
    one per-host measure and has fields of its own.
    """

    learner_steps: int
    frames_produced: int
    frames_consumed: int
    frames_queued: int
    queue_size: int
    learner_busy_s: float
    new_episode_returns: tuple[float, ...]  # finished since the previous report
    episodes: int
    episode_return_mean: float | None  # over the last `window` episodes
    window_episodes: int  # how many episodes that mean is over
    metrics: dict[str, float]
    policy_lag_mean: float | None
    policy_lag_max: float | None
    done: bool
    error: str | None = None  # a traceback, if training failed
    non_finite: str | None = None  # why training stopped on a non-finite loss
    last_checkpoint: tuple[str, int] | None = None  # (path, learner step)
    # Seconds since each actor (by slot) last sent an unroll; 0 while it waits on a
    # full queue. Slots that have not sent since this learner started are absent.
    actor_silence_s: dict[int, float] = dataclasses.field(default_factory=dict)
    # When this learner's start-up stages happened (`impala_rep.startup.STAGES` names them),
    # on the wall clock; the ones not reached yet are absent.
    startup: dict[str, float] = dataclasses.field(default_factory=dict)

    @classmethod
    def merge(cls, reports: Sequence[LearnerReport]) -> LearnerReport:
        """One report from the hosts' reports (the chief's first).

        Frames, queue contents and episodes add up; the step is the one every host
        has completed; busy time is the hosts' mean; the loss metrics, the
        checkpoint and the start-up stages are the chief's; each actor's silence is
        its host's; the return mean weighs each host's by the episodes it covers; the
        run is done, or failed, once any host is.
        """
        if not reports:
            raise ValueError("merge needs at least one report")
        if len(reports) == 1:
            return reports[0]
        chief = reports[0]
        window = sum(r.window_episodes for r in reports if r.episode_return_mean is not None)
        return_mean = (
            (
                sum(
                    r.episode_return_mean * r.window_episodes
                    for r in reports
                    if r.episode_return_mean is not None
                )
                / window
            )
            if window
            else None
        )
        lags = [r for r in reports if r.policy_lag_mean is not None]

        def first(name):
            return next((getattr(r, name) for r in reports if getattr(r, name)), None)

        return cls(
            learner_steps=min(r.learner_steps for r in reports),
            frames_produced=sum(r.frames_produced for r in reports),
            frames_consumed=sum(r.frames_consumed for r in reports),
            frames_queued=sum(r.frames_queued for r in reports),
            queue_size=sum(r.queue_size for r in reports),
            learner_busy_s=sum(r.learner_busy_s for r in reports) / len(reports),
            new_episode_returns=tuple(x for r in reports for x in r.new_episode_returns),
            episodes=sum(r.episodes for r in reports),
            episode_return_mean=return_mean,
            window_episodes=window,
            metrics=dict(chief.metrics),
            policy_lag_mean=(sum(r.policy_lag_mean for r in lags) / len(lags)) if lags else None,
            policy_lag_max=max(r.policy_lag_max for r in lags) if lags else None,
            done=any(r.done for r in reports),
            error=first("error"),
            non_finite=first("non_finite"),
            last_checkpoint=chief.last_checkpoint,
            # Each actor feeds one host: its silence is that host's.
            actor_silence_s={
                slot: silence for r in reports for slot, silence in r.actor_silence_s.items()
            },
            startup=dict(chief.startup),
        )
