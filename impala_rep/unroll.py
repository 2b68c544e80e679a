"""The unroll: what an actor records and the learner trains on.

Time-major, following the package convention (see `impala_rep`). One actor
steps `E` environments together and emits one `Unroll` with batch `E`; the
learner concatenates unrolls along the batch axis (axis 1 of `[T, B]` fields,
axis 0 of `[B]` fields).

| field | shape | dtype | meaning |
|---|---|---|---|
| observations | [T+1, B, *obs] | env's | obs[0..T]; obs[T] only bootstraps |
| prev_actions | [T+1, B] | int32 | agent input: action just before obs[t] (0 at episode start) |
| prev_rewards | [T+1, B] | float32 | agent input: reward on reaching obs[t] (0 at episode start) |
| first | [T+1, B] | bool | obs[t] starts an episode |
| actions | [T, B] | int32 | action taken at obs[t] |
| rewards | [T, B] | float32 | raw reward of transition t -> t+1 |
| terminated | [T, B] | bool | the episode ended in a terminal state at t -> t+1 |
| truncated | [T, B] | bool | the episode was cut (time limit) at t -> t+1 |
| truncation_values | [T, B] | float32 | the cut episode's bootstrap value, or 0 (see below) |
| behaviour_logits | [T, B, A] | float32 | the actor's policy logits at obs[t] |
| initial_state | nest of [B, ...] | | the agent's recurrent state before obs[0] (`()` if none) |
| policy_version | [B] | int64 | learner step whose weights produced this unroll |

When an episode ends at t -> t+1 the environment is reset in the same step, so
obs[t+1] is the new episode's first observation and first[t+1] is True. The
final observation of an episode cut by a time limit is therefore not in the
unroll; its value, which the cut episode's return bootstraps from, is: where
truncated (and not terminated) at t -> t+1, `truncation_values[t]` is the acting
agent's value of the cut episode's final observation, its bootstrap; it is 0
elsewhere (see `impala_rep.transitions`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

__all__ = ["Unroll", "concat_unrolls", "slice_columns", "EpisodeStats", "TIME_MAJOR_DTYPES"]


class Unroll(NamedTuple):
    observations: np.ndarray
    prev_actions: np.ndarray
    prev_rewards: np.ndarray
    first: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    truncation_values: np.ndarray
    behaviour_logits: np.ndarray
    initial_state: Any
    policy_version: np.ndarray

    @property
    def num_columns(self) -> int:
        """B: the unrolls (env columns) side by side."""
        return int(self.actions.shape[1])

    @property
    def num_frames(self) -> int:
        """Environment steps recorded: T * B."""
        return int(self.actions.shape[0] * self.actions.shape[1])


class EpisodeStats(NamedTuple):
    """Returns and lengths of the episodes an actor finished (1-D, any length), and
    optionally the moments of its envs' running discounted returns over the unroll.

    `return_moments`: `(count, mean, variance)` of `G_t = r_t + discount * G_{t-1}`
    (reset after an episode's last step) over the unroll's `T x E` steps, which the
    learner's reward scaling averages (`LossConfig.normalize_rewards`); None when
    the actor keeps none.
    """

    returns: np.ndarray
    lengths: np.ndarray
    return_moments: tuple[float, float, float] | None = None


# The time-major fields and their dtypes (None: the environment's observation
# dtype), as in the table above. Their batch is axis 1; `policy_version` and every
# leaf of `initial_state` keep it on axis 0.
TIME_MAJOR_DTYPES = {
    "observations": None,
    "prev_actions": np.int32,
    "prev_rewards": np.float32,
    "first": np.bool_,
    "actions": np.int32,
    "rewards": np.float32,
    "terminated": np.bool_,
    "truncated": np.bool_,
    "truncation_values": np.float32,
    "behaviour_logits": np.float32,
}


def _map_batch_axis(fn, unrolls: list[Unroll]) -> Unroll:
    """Builds an Unroll field by field from `fn(arrays, batch_axis)` over `unrolls`."""
    import tensorflow as tf  # only for nest handling of the recurrent state

    fields = {name: fn([getattr(u, name) for u in unrolls], 1) for name in TIME_MAJOR_DTYPES}
    fields["policy_version"] = fn([u.policy_version for u in unrolls], 0)
    fields["initial_state"] = tf.nest.map_structure(
        lambda *leaves: fn(list(leaves), 0), *[u.initial_state for u in unrolls]
    )
    return Unroll(**fields)


def concat_unrolls(unrolls: list[Unroll]) -> Unroll:
    """Concatenates unrolls along the batch axis."""
    return _map_batch_axis(lambda arrays, axis: np.concatenate(arrays, axis=axis), unrolls)


def slice_columns(unroll: Unroll, start: int, stop: int) -> Unroll:
    """Batch columns `start:stop` of `unroll` (views, not copies)."""
    return _map_batch_axis(
        lambda arrays, axis: np.asarray(arrays[0])[(slice(None),) * axis + (slice(start, stop),)],
        [unroll],
    )
