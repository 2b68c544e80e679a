"""Reward scaling: rewards divided by the running standard deviation of the discounted return.

As Stable-Baselines3's `VecNormalize` scales rewards (and PPO's "reward scaling",
Engstrom et al. 2020), but split across processes: each actor keeps its envs' running
discounted returns `G_t = r_t + discount * G_{t-1}` (reset after an episode's last
step) and sends their moments with every unroll (`EpisodeStats.return_moments`);
the learner merges them into one running mean and variance (gymnasium's
`RunningMeanStd`, the parallel algorithm) and divides every batch's rewards by
`sqrt(variance + eps)` before its update. The values the agent learns are then in
units of that standard deviation, whatever the task's reward scale.

The scale moves as the policy improves; the agent follows it like any other
non-stationarity of the targets (the scale is averaged over the whole run, so it
moves slowly). Ray-free and TensorFlow-free.

`RewardScale` is the learner-host side (`impala_rep.extensions.BatchTransform`) of the
extension `impala_rep.extensions.RewardScaling`: each host of a multi-host learner sends
the others its batch's moments (`part`), and every host merges every host's in host order
(`merge`), so all of them divide by the same scale.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
from gymnasium.wrappers.utils import RunningMeanStd, update_mean_var_count_from_moments

from impala_rep.unroll import EpisodeStats, Unroll

__all__ = ["RewardScale"]

_EPSILON = 1e-8  # VecNormalize's, inside the square root


class RewardScale:
    """The running moments of the actors' discounted returns, and the scale they give."""

    # Its state's key in a run's checkpoints (`learner.checkpointing.RunCheckpoint`).
    checkpoint_key = "return_moments"
    state_size = 3

    def __init__(self):
        self._moments = RunningMeanStd(shape=())

    def update(self, stats: Iterable[EpisodeStats | None]) -> None:
        """Merges every `stats.return_moments` given (None, or stats without moments, add
        nothing)."""
        self.update_moments(self.combine(stats))

    def update_moments(self, moments) -> None:
        """Merges one `(count, mean, variance)`; a count of 0 adds nothing."""
        count, mean, variance = (float(m) for m in moments)
        if count > 0:
            self._moments.update_from_moments(mean, variance, count)

    def part(self, stats: Iterable[EpisodeStats | None]) -> tuple[float, float, float]:
        """What one batch contributes: its stats' moments together (`combine`)."""
        return self.combine(stats)

    def merge(self, part) -> None:
        """Merges one host's `part` (`update_moments`)."""
        self.update_moments(part)

    def metrics(self) -> dict[str, float]:
        """The scale the last `apply` divided by."""
        return {"reward_scale": self.scale}

    @staticmethod
    def combine(stats: Iterable[EpisodeStats | None]) -> tuple[float, float, float]:
        """The `(count, mean, variance)` of all `stats`' moments together; (0, 0, 0) for none
        (what a host of a multi-host learner sends the others for its batch)."""
        mean, variance, count = 0.0, 0.0, 0.0
        for s in stats:
            if s is not None and s.return_moments is not None and s.return_moments[0] > 0:
                part_count, part_mean, part_variance = s.return_moments
                # The same parallel merge RunningMeanStd makes, from nothing.
                mean, variance, count = update_mean_var_count_from_moments(
                    mean, variance, count, part_mean, part_variance, part_count
                )
        return (float(count), float(mean), float(variance))

    @property
    def scale(self) -> float:
        """What rewards are divided by: 1 before any moments arrived (count ~ 0, variance 1)."""
        return math.sqrt(float(self._moments.var) + _EPSILON)

    def apply(self, batch: Unroll) -> Unroll:
        """`batch` with its rewards divided by the scale (float32, as the learner takes them).

        Only `rewards`: `truncation_values` are the agent's own values, already in
        scaled units, and `prev_rewards` are agent inputs, left as the env gave them."""
        rewards = np.asarray(batch.rewards, np.float64) / self.scale
        return batch._replace(rewards=rewards.astype(np.float32))

    @property
    def state(self) -> tuple[float, float, float]:
        """`(count, mean, variance)`, for a checkpoint."""
        return (float(self._moments.count), float(self._moments.mean), float(self._moments.var))

    def restore(self, state: tuple[float, float, float]) -> None:
        count, mean, variance = state
        self._moments.count = float(count)
        self._moments.mean = np.float64(mean)
        self._moments.var = np.float64(variance)
