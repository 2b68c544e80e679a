"""An unroll's transitions as V-trace sees them: clipped rewards and discounts.

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


def vtrace_inputs(*, rewards: Any, terminated: Any, truncated: Any, discount: float,
                  reward_clipping: str) -> Transitions:
    """Clips the rewards and turns episode ends into discounts.

    `rewards` are clipped to [-1, 1] with `reward_clipping="abs_one"` (the IMPALA
    paper's Atari setting), left alone with `"none"`.
    `discounts[t] = discount * (1 - (terminated[t] or truncated[t]))`.

    A truncated transition (a time limit cut the episode) is treated exactly like a
    terminated one: discount 0, so its return is bootstrapped from NOTHING, as if
    the episode's value beyond the cut were 0. That is a known bias. The right
    bootstrap, `discount * V(final observation)`, needs the final observation of
    the cut episode, which the `Unroll` does not carry: `obs[t+1]` is already the
    next episode's first observation (impala_rep/unroll.py). Fixing it needs the
    actors to record that observation and V-trace to bootstrap from it.

    Args:
      rewards: `[T, B]` raw rewards; float dtypes are kept, others become float32.
      terminated: `[T, B]` bool, the episode reached a terminal state at t -> t+1.
      truncated: `[T, B]` bool, the episode was cut at t -> t+1.
      discount: gamma.
      reward_clipping: one of `impala_rep.config.REWARD_CLIPPING`.

    Returns:
      `Transitions(rewards, discounts)`, both `[T, B]` in the rewards' dtype.

    Raises:
      ValueError: a shape is not `[T, B]` (the same T and B for all three), or an
        unknown `reward_clipping`.
    """
    if reward_clipping not in REWARD_CLIPPING:
        raise ValueError(f"bad reward_clipping {reward_clipping!r}: must be "
                         + " or ".join(repr(c) for c in REWARD_CLIPPING))
    with tf.name_scope("vtrace_inputs"):
        rewards = float_tensor(rewards)
        terminated = tf.convert_to_tensor(terminated, dtype=tf.bool)
        truncated = tf.convert_to_tensor(truncated, dtype=tf.bool)
        dims: dict = {}
        assert_shape("rewards", rewards, ("T", "B"), dims=dims)
        assert_shape("terminated", terminated, ("T", "B"), dims=dims)
        assert_shape("truncated", truncated, ("T", "B"), dims=dims)

        if reward_clipping == "abs_one":
            rewards = tf.clip_by_value(rewards, -1.0, 1.0)
        ended = tf.logical_or(terminated, truncated)
        discounts = cast_to(discount, rewards.dtype) * (1.0 - tf.cast(ended, rewards.dtype))
        return Transitions(rewards=rewards, discounts=discounts)
