"""The policy's action distribution, one per kind of action space.

V-trace and every loss term need only a few things of the policy: the log-probability
of the actions taken, its entropy, and the KL divergence between two policies. Each
distribution here gives them from the policy head's output, its *parameters*: a
`[..., num_params]` float tensor, the same for the learner's target policy and for the
behaviour policy the actors record (`Unroll.behaviour_logits`). The learner's side is
TensorFlow over time-major `[T, B, ...]` tensors; the actors' side (sampling, the most
probable action, and the same log-probability) is numpy over `[E, ...]` arrays, so an
actor that acts in numpy never imports TensorFlow.

| action space | distribution | parameters | an action |
|---|---|---|---|
| `Discrete(n)` | `Categorical(n)` | `[n]` logits | `[]` int32 |
| `MultiDiscrete(nvec)` | `MultiCategorical(nvec)` | `[sum(nvec)]` logits | `[len(nvec)]` int32 |
| `Box(low, high, (D,))` | `DiagGaussian(low, high)` | `[2D]` means, log-stds | `[D]` float32 |

A `MultiCategorical` is independent categoricals, its logits one block per entry of `nvec`.

A Gaussian's samples are recorded as drawn, unbounded, and clipped to the space's
bounds only on their way to the environment (`to_env`), as Stable-Baselines3's and
CleanRL's PPO do: the log-probabilities V-trace needs are then those of the recorded
actions, with no correction for the clip.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from impala_rep.config.validation import is_int

__all__ = [
    "ActionDistribution",
    "action_distribution",
    "Categorical",
    "MultiCategorical",
    "DiagGaussian",
    "for_action_space",
    "or_categorical",
    "policy_head_sizes",
]

_LOG_2PI = math.log(2.0 * math.pi)


class ActionDistribution(Protocol):
    """What the learner and the actors need of a policy's distribution over actions.

    `params` are `[..., num_params]` (any leading axes), `actions` `[..., *action_shape]`
    with the same leading axes; results have the leading axes only.
    """

    num_params: int
    action_shape: tuple[int, ...]
    action_dtype: np.dtype
    # How an agent makes the `num_params`: `head_params` from the state (a layer's
    # outputs), then `free_params` learned but the same in every state (a Gaussian's
    # log-stds, as SB3's and CleanRL's PPO have them), starting at 0.
    head_params: int
    free_params: int

    def log_prob(self, params: Any, actions: Any) -> Any:
        """TensorFlow: log pi(a) of `actions` (a sum over an action's parts)."""

    def entropy(self, params: Any) -> Any:
        """TensorFlow: the entropy of each distribution."""

    def kl(self, p_params: Any, q_params: Any) -> Any:
        """TensorFlow: KL(p || q), per distribution."""

    def sample_tf(self, params: Any, seed: Any) -> Any:
        """TensorFlow: one action per row of `[E, num_params]`, from a stateless `seed`."""

    def mode_tf(self, params: Any) -> Any:
        """TensorFlow: the most probable action per row."""

    def sample(self, params: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """numpy: one action per row of `[E, num_params]`."""

    def mode(self, params: np.ndarray) -> np.ndarray:
        """numpy: the most probable action per row."""

    def log_prob_numpy(self, params: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """numpy: `log_prob`, for the actors and for tests."""

    def features_tf(self, actions: Any) -> Any:
        """`[N, *action_shape]` actions as `[N, F]` float32 inputs of a network (the
        previous action, which a recurrent core is fed)."""

    def features_numpy(self, actions: np.ndarray) -> np.ndarray:
        """numpy: `features_tf`, for the actors' numpy policies."""

    def to_env(self, actions: np.ndarray) -> np.ndarray:
        """The actions as the environment takes them (a Gaussian's clipped to its bounds)."""


class _ComparedByRepr:
    """Equal when their reprs are: a distribution's repr names its kind and every setting."""

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and repr(other) == repr(self)

    def __hash__(self) -> int:
        return hash(repr(self))


def _tf():
    import tensorflow as tf  # the learner's side only: actors acting in numpy never load it

    return tf


def _log_softmax_numpy(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def _checked_width(params: Any, num_params: int, name: str) -> None:
    width = params.shape[-1]
    if width is not None and width != num_params:
        raise ValueError(f"{name} parameters must have {num_params} entries last, got {width}")


class Categorical(_ComparedByRepr):
    """A softmax policy over `num_actions` actions (`Discrete`)."""

    def __init__(self, num_actions: int):
        if not is_int(num_actions) or num_actions < 1:
            raise ValueError(f"num_actions must be an integer >= 1, got {num_actions!r}")
        self.num_actions = int(num_actions)
        self.num_params = self.head_params = self.num_actions
        self.free_params = 0
        self.action_shape: tuple[int, ...] = ()
        self.action_dtype = np.dtype(np.int32)

    def __repr__(self) -> str:
        return f"Categorical({self.num_actions})"

    def features_tf(self, actions: Any) -> Any:
        """`[N]` actions as float32 inputs of a network (the previous action): one-hot."""
        tf = _tf()
        return tf.one_hot(tf.cast(actions, tf.int32), self.num_actions, dtype=tf.float32)

    def features_numpy(self, actions: np.ndarray) -> np.ndarray:
        return np.eye(self.num_actions, dtype=np.float32)[np.asarray(actions, np.int64)]

    def log_prob(self, params: Any, actions: Any) -> Any:
        tf = _tf()
        params = tf.convert_to_tensor(params)
        _checked_width(params, self.num_params, "Categorical")
        # Cross-entropy against the taken action is exactly -log pi(a).
        return -tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=tf.cast(actions, tf.int32), logits=params
        )

    def entropy(self, params: Any) -> Any:
        tf = _tf()
        # From log_softmax: large logits give no 0 * log 0.
        log_p = tf.nn.log_softmax(params, axis=-1)
        return -tf.reduce_sum(tf.exp(log_p) * log_p, axis=-1)

    def kl(self, p_params: Any, q_params: Any) -> Any:
        tf = _tf()
        log_p = tf.nn.log_softmax(p_params, axis=-1)
        log_q = tf.nn.log_softmax(q_params, axis=-1)
        return tf.reduce_sum(tf.exp(log_p) * (log_p - log_q), axis=-1)

    def sample_tf(self, params: Any, seed: Any) -> Any:
        tf = _tf()
        return tf.random.stateless_categorical(params, 1, seed=seed, dtype=tf.int32)[:, 0]

    def mode_tf(self, params: Any) -> Any:
        tf = _tf()
        return tf.argmax(params, axis=-1, output_type=tf.int32)

    def sample(self, params: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        # Gumbel-max: one categorical sample per row, reproducible per seed.
        noisy = params + rng.gumbel(size=params.shape)
        return noisy.argmax(-1).astype(np.int32)

    def mode(self, params: np.ndarray) -> np.ndarray:
        return np.asarray(params).argmax(-1).astype(np.int32)

    def log_prob_numpy(self, params: np.ndarray, actions: np.ndarray) -> np.ndarray:
        log_p = _log_softmax_numpy(np.asarray(params, np.float64))
        return np.take_along_axis(log_p, np.asarray(actions)[..., None], axis=-1)[..., 0]

    def to_env(self, actions: np.ndarray) -> np.ndarray:
        return actions


class MultiCategorical(_ComparedByRepr):
    """Independent softmax policies, one per entry of `nvec` (`MultiDiscrete`): an
    action's log-probability, entropy and KL are the sums of its parts'."""

    def __init__(self, nvec: Sequence[int]):
        nvec = tuple(nvec)
        if not nvec or any(not is_int(n) or n < 1 for n in nvec):
            raise ValueError(f"nvec must be a non-empty sequence of integers >= 1, got {nvec!r}")
        self.nvec = tuple(int(n) for n in nvec)
        self._parts = [Categorical(n) for n in nvec]
        self._bounds = np.cumsum((0, *nvec))
        self.num_params = self.head_params = int(sum(nvec))
        self.free_params = 0
        self.action_shape = (len(nvec),)
        self.action_dtype = np.dtype(np.int32)

    def __repr__(self) -> str:
        return f"MultiCategorical({list(self.nvec)})"

    def features_tf(self, actions: Any) -> Any:
        """`[N, K]` actions as float32 inputs of a network: each entry one-hot, joined."""
        tf = _tf()
        actions = tf.cast(actions, tf.int32)
        return tf.concat(
            [part.features_tf(actions[:, i]) for i, part in enumerate(self._parts)], axis=-1
        )

    def features_numpy(self, actions: np.ndarray) -> np.ndarray:
        actions = np.asarray(actions)
        return np.concatenate(
            [part.features_numpy(actions[:, i]) for i, part in enumerate(self._parts)], axis=-1
        )

    def _split(self, params: Any) -> list[Any]:
        _checked_width(params, self.num_params, "MultiCategorical")
        return [params[..., a:b] for a, b in zip(self._bounds[:-1], self._bounds[1:])]

    def log_prob(self, params: Any, actions: Any) -> Any:
        tf = _tf()
        params = tf.convert_to_tensor(params)
        return tf.add_n(
            [
                part.log_prob(logits, actions[..., i])
                for i, (part, logits) in enumerate(zip(self._parts, self._split(params)))
            ]
        )

    def entropy(self, params: Any) -> Any:
        tf = _tf()
        params = tf.convert_to_tensor(params)
        return tf.add_n([p.entropy(x) for p, x in zip(self._parts, self._split(params))])

    def kl(self, p_params: Any, q_params: Any) -> Any:
        tf = _tf()
        p_params, q_params = tf.convert_to_tensor(p_params), tf.convert_to_tensor(q_params)
        return tf.add_n(
            [
                part.kl(p, q)
                for part, p, q in zip(self._parts, self._split(p_params), self._split(q_params))
            ]
        )

    def sample_tf(self, params: Any, seed: Any) -> Any:
        tf = _tf()
        params = tf.convert_to_tensor(params)
        seeds = tf.random.experimental.stateless_split(seed, len(self._parts))
        parts = zip(self._parts, self._split(params), tf.unstack(seeds))
        return tf.stack([p.sample_tf(x, s) for p, x, s in parts], axis=-1)

    def mode_tf(self, params: Any) -> Any:
        tf = _tf()
        params = tf.convert_to_tensor(params)
        return tf.stack([p.mode_tf(x) for p, x in zip(self._parts, self._split(params))], -1)

    def sample(self, params: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        parts = zip(self._parts, self._split(np.asarray(params)))
        return np.stack([p.sample(x, rng) for p, x in parts], axis=-1)

    def mode(self, params: np.ndarray) -> np.ndarray:
        parts = zip(self._parts, self._split(np.asarray(params)))
        return np.stack([p.mode(x) for p, x in parts], axis=-1)

    def log_prob_numpy(self, params: np.ndarray, actions: np.ndarray) -> np.ndarray:
        parts = zip(self._parts, self._split(np.asarray(params)))
        return sum(p.log_prob_numpy(x, actions[..., i]) for i, (p, x) in enumerate(parts))

    def to_env(self, actions: np.ndarray) -> np.ndarray:
        return actions


class DiagGaussian(_ComparedByRepr):
    """A Gaussian with a diagonal covariance over a `Box` of `D` dimensions.

    Parameters are `[..., 2D]`: the means, then the log standard deviations (whether an
    agent makes them depend on the state is the agent's choice). Samples are unbounded;
    `to_env` clips them to `[low, high]`.
    """

    def __init__(self, low: Sequence[float], high: Sequence[float]):
        low = np.asarray(low, np.float32).reshape(-1)
        high = np.asarray(high, np.float32).reshape(-1)
        if low.shape != high.shape or not low.size:
            raise ValueError(f"low and high must be the same non-empty shape, got {low} {high}")
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
            raise ValueError(
                f"a Gaussian policy needs finite action bounds, got low={low.tolist()} "
                f"high={high.tolist()}"
            )
        if np.any(low >= high):
            raise ValueError(f"action bounds need low < high, got low={low} high={high}")
        self.low, self.high = low, high
        self.dim = int(low.size)
        self.num_params = 2 * self.dim
        self.head_params = self.free_params = self.dim  # means from the state; log-stds free
        self.action_shape = (self.dim,)
        self.action_dtype = np.dtype(np.float32)

    def __repr__(self) -> str:
        return f"DiagGaussian(low={self.low.tolist()}, high={self.high.tolist()})"

    def initial_free_params(self, initial_log_std: float) -> np.ndarray:
        """`[dim]` starting log standard deviations: `initial_log_std` relative to each
        dimension's half range, `initial_log_std + log((high - low) / 2)`, so one setting
        starts every task's noise at the same fraction of its actions' range (std 0.37 of the
        half range at -1: 0.37 on MuJoCo's [-1, 1], 0.74 on Pendulum's [-2, 2])."""
        half_range = (self.high.astype(np.float64) - self.low) / 2
        return (initial_log_std + np.log(half_range)).astype(np.float32)

    def _split(self, params: Any) -> tuple[Any, Any]:
        _checked_width(params, self.num_params, "DiagGaussian")
        return params[..., : self.dim], params[..., self.dim :]

    def features_tf(self, actions: Any) -> Any:
        """`[N, D]` actions as float32 inputs of a network (the previous action)."""
        tf = _tf()
        return tf.cast(actions, tf.float32)

    def features_numpy(self, actions: np.ndarray) -> np.ndarray:
        return np.asarray(actions, np.float32)

    def log_prob(self, params: Any, actions: Any) -> Any:
        tf = _tf()
        params = tf.convert_to_tensor(params)
        mean, log_std = self._split(params)
        z = (tf.cast(actions, params.dtype) - mean) * tf.exp(-log_std)
        return tf.reduce_sum(-0.5 * tf.square(z) - log_std - 0.5 * _LOG_2PI, axis=-1)

    def entropy(self, params: Any) -> Any:
        tf = _tf()
        _, log_std = self._split(tf.convert_to_tensor(params))
        return tf.reduce_sum(log_std + 0.5 * (_LOG_2PI + 1.0), axis=-1)

    def kl(self, p_params: Any, q_params: Any) -> Any:
        tf = _tf()
        p_mean, p_log_std = self._split(tf.convert_to_tensor(p_params))
        q_mean, q_log_std = self._split(tf.convert_to_tensor(q_params))
        ratio = tf.exp(2.0 * (p_log_std - q_log_std))  # sigma_p^2 / sigma_q^2
        gap = tf.square((p_mean - q_mean) * tf.exp(-q_log_std))
        return tf.reduce_sum(q_log_std - p_log_std + 0.5 * (ratio + gap - 1.0), axis=-1)

    def sample_tf(self, params: Any, seed: Any) -> Any:
        tf = _tf()
        params = tf.convert_to_tensor(params)
        mean, log_std = self._split(params)
        noise = tf.random.stateless_normal(tf.shape(mean), seed=seed, dtype=params.dtype)
        return mean + tf.exp(log_std) * noise

    def mode_tf(self, params: Any) -> Any:
        tf = _tf()
        return self._split(tf.convert_to_tensor(params))[0]

    def sample(self, params: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        mean, log_std = self._split(np.asarray(params, np.float32))
        # Drawn in float32, as the actions are recorded: no float64 pass and copy per step.
        noise = rng.standard_normal(mean.shape, dtype=np.float32)
        return mean + np.exp(log_std) * noise

    def mode(self, params: np.ndarray) -> np.ndarray:
        return np.asarray(self._split(np.asarray(params))[0], np.float32)

    def log_prob_numpy(self, params: np.ndarray, actions: np.ndarray) -> np.ndarray:
        mean, log_std = self._split(np.asarray(params, np.float64))
        z = (np.asarray(actions, np.float64) - mean) * np.exp(-log_std)
        return np.sum(-0.5 * z**2 - log_std - 0.5 * _LOG_2PI, axis=-1)

    def to_env(self, actions: np.ndarray) -> np.ndarray:
        return np.clip(actions, self.low, self.high)


def action_distribution(agent: Any) -> ActionDistribution:
    """The distribution `agent` acts with: its `action_distribution` attribute, else (an
    agent that names none) a `Categorical` over its `num_actions` logits."""
    named = getattr(agent, "action_distribution", None)
    return named if named is not None else Categorical(agent.num_actions)


def policy_head_sizes(action_distribution: Any, num_actions: int) -> tuple[int, int]:
    """(outputs of the policy head, state-independent parameters) for an agent with
    `num_actions` policy parameters acting with `action_distribution` (None: a softmax)."""
    if action_distribution is None:
        return num_actions, 0
    if action_distribution.num_params != num_actions:
        raise ValueError(
            f"num_actions must be the distribution's {action_distribution.num_params} "
            f"parameters ({action_distribution!r}), got {num_actions}"
        )
    return action_distribution.head_params, action_distribution.free_params


def or_categorical(distribution: ActionDistribution | None, params: Any) -> ActionDistribution:
    """`distribution`, or where it is None a `Categorical` over `params`' last axis: what the
    loss terms assume of a caller that names none (the softmax policy they began with)."""
    if distribution is not None:
        return distribution
    width = params.shape[-1]
    if width is None:
        raise ValueError("policy parameters of unknown width need a distribution named")
    return Categorical(int(width))


def for_action_space(space: Any) -> ActionDistribution:
    """The distribution of a policy over gymnasium action space `space`.

    Raises:
      ValueError: naming the space and what is allowed, for any other space (a `Box` of
        more than one dimension, or with an infinite bound, among them).
    """
    from gymnasium import spaces

    allowed = "allowed: Discrete, MultiDiscrete, or a one-dimensional Box with finite bounds"
    if isinstance(space, spaces.Discrete):
        if space.start != 0:
            raise ValueError(f"action space {space} starts at {space.start}; {allowed} from 0")
        return Categorical(int(space.n))
    if isinstance(space, spaces.MultiDiscrete):
        if space.nvec.ndim != 1 or np.any(space.start != 0):
            raise ValueError(f"action space {space} is not one-dimensional from 0; {allowed}")
        return MultiCategorical([int(n) for n in space.nvec])
    if isinstance(space, spaces.Box):
        if len(space.shape) != 1:
            raise ValueError(f"action space {space} has shape {space.shape}; {allowed}")
        if not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
            raise ValueError(f"action space {space} has an infinite bound; {allowed}")
        return DiagGaussian(space.low, space.high)
    raise ValueError(f"action space {space} cannot be trained; {allowed}")
