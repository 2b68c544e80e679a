"""An unroll's transitions as V-trace sees them: clipped rewards, bootstraps and discounts.

A pure function over time-major `[T, B]` tensors (see `impala_rep` for the time
indexing): `rewards[t]`, `terminated[t]` and `truncated[t]` belong to the
transition `obs[t] -> obs[t+1]`, and so do the `rewards` and `discounts` it
returns. The learner calls it on each replica's shard before the loss; the loss
receives its result as the `rewards` and `discounts` keywords (impala_rep.loss_fn).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import tensorflow as tf

from impala_rep.config import REWARD_CLIPPING
from impala_rep.conversion import cast_to, float_tensor
from impala_rep.shapes import assert_shape

__all__ = ["Transitions", "vtrace_inputs"]


class Transitions(NamedTuple):
    """V-trace's per-transition inputs, both `[T, B]` in the rewards' float dtype."""

    rewards: tf.Tensor
    discounts: tf.Tensor


def vtrace_inputs(
    *,
    rewards: Any,
    terminated: Any,
    truncated: Any,
    truncation_values: Any,
    discount: float,
    reward_clipping: str,
) -> Transitions:
    """Clips the rewards and turns episode ends into discounts and bootstraps.

    `rewards` are clipped to [-1, 1] with `reward_clipping="abs_one"` (the IMPALA
    paper's Atari setting), left alone with `"none"`.
    `discounts[t] = discount * (1 - (terminated[t] or truncated[t]))`: nothing
    flows across an episode end, since `obs[t+1]` already starts the next episode.

    A truncated transition (a time limit cut the episode; not a terminal state)
    bootstraps from the value of the episode's final observation, which the
    unroll carries as `truncation_values` (the acting agent's value of it):
    `rewards[t] += discount * truncation_values[t]` where `truncated[t]` and not
    `terminated[t]` (Pardo et al. 2018, "Time limits in reinforcement learning").
    The value is in the units the value function learns, so it is added after
    clipping. A terminated transition bootstraps from nothing.

    Args:
      rewards: `[T, B]` raw rewards; float dtypes are kept, others become float32.
      terminated: `[T, B]` bool, the episode reached a terminal state at t -> t+1.
      truncated: `[T, B]` bool, the episode was cut at t -> t+1.
      truncation_values: `[T, B]` float, the value of the cut episode's final
        observation where `truncated` (read nowhere else).
      discount: gamma.
      reward_clipping: one of `impala_rep.config.REWARD_CLIPPING`.

    Returns:
      `Transitions(rewards, discounts)`, both `[T, B]` in the rewards' dtype.

    Raises:
      ValueError: a shape is not `[T, B]` (the same T and B for all four), or an
        unknown `reward_clipping`.
    """
    if reward_clipping not in REWARD_CLIPPING:
        raise ValueError(
            f"bad reward_clipping {reward_clipping!r}: must be "
            + " or ".join(repr(c) for c in REWARD_CLIPPING)
        )
    with tf.name_scope("vtrace_inputs"):
        rewards = float_tensor(rewards)
        terminated = tf.convert_to_tensor(terminated, dtype=tf.bool)
        truncated = tf.convert_to_tensor(truncated, dtype=tf.bool)
        truncation_values = cast_to(truncation_values, rewards.dtype)
        dims: dict = {}
        assert_shape("rewards", rewards, ("T", "B"), dims=dims)
        assert_shape("terminated", terminated, ("T", "B"), dims=dims)
        assert_shape("truncated", truncated, ("T", "B"), dims=dims)
        assert_shape("truncation_values", truncation_values, ("T", "B"), dims=dims)

        if reward_clipping == "abs_one":
            rewards = tf.clip_by_value(rewards, -1.0, 1.0)
        gamma = cast_to(discount, rewards.dtype)
        cut = tf.logical_and(truncated, tf.logical_not(terminated))
        # tf.where, not a product: a value read where nothing was cut never enters.
        rewards = rewards + tf.where(cut, gamma * truncation_values, tf.zeros_like(rewards))
        ended = tf.logical_or(terminated, truncated)
        discounts = gamma * (1.0 - tf.cast(ended, rewards.dtype))
        return Transitions(rewards=rewards, discounts=discounts)
