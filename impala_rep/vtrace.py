"""V-trace off-policy corrected value targets and policy-gradient advantages.

Implements section 4 of Espeholt et al. 2018, "IMPALA: Scalable Distributed
Deep-RL with Importance Weighted Actor-Learner Architectures"
(https://arxiv.org/abs/1802.01561), in the style of
deepmind/scalable_agent's ``vtrace.py``.

All tensors are time-major and follow the package's time-indexing convention
(see the ``impala_rep`` package docstring):

* ``T``: unroll length.  An unroll holds ``T + 1`` observations ``x_0 .. x_T``.
* ``B``: batch size.
* ``P``: the policy's parameters per step (``NUM_ACTIONS`` logits for a softmax;
  ``impala_rep.distributions``).

``logits[t]`` and ``values[t]`` are computed from observation ``t``;
``actions[t]`` was taken at observation ``t``; ``rewards[t]`` and
``discounts[t]`` belong to the transition ``t -> t+1``;
``bootstrap_value = V(x_T)`` has shape ``[B]``.
``discounts[t] = gamma * (1 - (terminated[t] or truncated[t]))``
(``impala_rep.transitions.vtrace_inputs``), so a zero discount marks an episode
that ended or was cut by a time limit inside the unroll, and cuts both the value
bootstrap and the trace.

Everything here is a pure function with no Python loop over ``T`` (the
backward recursion is a ``tf.scan``), so it traces once per input signature
under ``tf.function``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import tensorflow as tf

from impala_rep.conversion import cast_to, float_tensor
from impala_rep.distributions import ActionDistribution, or_categorical
from impala_rep.shapes import assert_shape

__all__ = [
    "VTraceReturns",
    "VTraceFromLogitsReturns",
    "from_importance_weights",
    "from_logits",
]


class VTraceReturns(NamedTuple):
    """Outputs of :func:`from_importance_weights`.

    Both fields are wrapped in ``tf.stop_gradient``: they are regression
    targets / advantage weights, not something to differentiate through.

    Attributes:
      vs: ``[T, B]`` V-trace value targets ``v_s`` for observations
        ``x_0 .. x_{T-1}``.
      pg_advantages: ``[T, B]`` advantages for the policy gradient,
        ``clip(rho_s) * (r_s + discount_s * v_{s+1} - V(x_s))`` with
        ``v_T = bootstrap_value``.
    """

    vs: tf.Tensor
    pg_advantages: tf.Tensor


class VTraceFromLogitsReturns(NamedTuple):
    """Outputs of :func:`from_logits`.

    Attributes:
      vs: ``[T, B]`` V-trace value targets (gradient stopped).
      pg_advantages: ``[T, B]`` policy-gradient advantages (gradient stopped).
      log_rhos: ``[T, B]`` log importance weights
        ``log pi(a_t|x_t) - log mu(a_t|x_t)``.
      behaviour_action_log_probs: ``[T, B]`` ``log mu(a_t|x_t)``.
      target_action_log_probs: ``[T, B]`` ``log pi(a_t|x_t)``; gradients flow
        through this to the target logits.
    """

    vs: tf.Tensor
    pg_advantages: tf.Tensor
    log_rhos: tf.Tensor
    behaviour_action_log_probs: tf.Tensor
    target_action_log_probs: tf.Tensor


def from_importance_weights(
    *,
    log_rhos: Any,
    discounts: Any,
    rewards: Any,
    values: Any,
    bootstrap_value: Any,
    clip_rho_threshold: float | None = 1.0,
    clip_pg_rho_threshold: float | None = 1.0,
    lambda_: float = 1.0,
) -> VTraceReturns:
    """V-trace targets and advantages from log importance weights.

    Computes, for ``s = 0 .. T-1`` (paper eq. 1)::

        v_s = V(x_s) + sum_{t=s}^{T-1} (prod_{i=s}^{t-1} discount_i c_i) delta_t
        delta_t = rho_t (r_t + discount_t V(x_{t+1}) - V(x_t))
        rho_t = min(clip_rho_threshold, exp(log_rhos_t))
        c_i = lambda_ * min(1, exp(log_rhos_i))

    with ``V(x_T) = bootstrap_value``, and the advantages
    ``min(clip_pg_rho_threshold, exp(log_rhos_s)) * (r_s + discount_s v_{s+1} - V(x_s))``
    with ``v_T = bootstrap_value``.  Time indexing follows the package
    convention (module docstring).

    Inputs may be numpy arrays or tensors.  Everything is cast to the float
    dtype of ``values`` (float64 input stays float64).

    Args:
      log_rhos: ``[T, B]`` log importance weights ``log pi(a_t|x_t) - log mu(a_t|x_t)``.
      discounts: ``[T, B]`` ``gamma * (1 - (terminated or truncated))`` of transition
        ``t -> t+1``.
      rewards: ``[T, B]`` reward of transition ``t -> t+1``.
      values: ``[T, B]`` ``V(x_t)`` under the current (target) value function.
      bootstrap_value: ``[B]`` ``V(x_T)``.
      clip_rho_threshold: clip for the ``rho_t`` in ``delta_t`` (``rho-bar``);
        ``None`` disables clipping.
      clip_pg_rho_threshold: clip for the importance weight in the
        policy-gradient advantage; ``None`` disables clipping.
      lambda_: trace-cutting factor multiplied into the ``c_i``.

    Returns:
      :class:`VTraceReturns` with ``[T, B]`` fields ``vs`` and
      ``pg_advantages``, both gradient-stopped.

    Raises:
      ValueError: if an argument has the wrong rank or disagrees on ``T``/``B``.
    """
    with tf.name_scope("vtrace_from_importance_weights"):
        values = float_tensor(values)
        dtype = values.dtype
        log_rhos = cast_to(log_rhos, dtype)
        discounts = cast_to(discounts, dtype)
        rewards = cast_to(rewards, dtype)
        bootstrap_value = cast_to(bootstrap_value, dtype)

        dims: dict = {}
        assert_shape("log_rhos", log_rhos, ("T", "B"), dims=dims)
        assert_shape("discounts", discounts, ("T", "B"), dims=dims)
        assert_shape("rewards", rewards, ("T", "B"), dims=dims)
        assert_shape("values", values, ("T", "B"), dims=dims)
        assert_shape("bootstrap_value", bootstrap_value, ("B",), dims=dims)

        rhos = tf.exp(log_rhos)
        if clip_rho_threshold is not None:
            clipped_rhos = tf.minimum(cast_to(clip_rho_threshold, dtype), rhos)
        else:
            clipped_rhos = rhos

        # lambda_ only enters the trace coefficients c_i (the paper's remark on
        # "V-trace with lambda", as in seed_rl); it does not touch rho_t in
        # delta_t nor the one-step bootstrap of the pg advantages below.
        cs = cast_to(lambda_, dtype) * tf.minimum(tf.ones([], dtype), rhos)

        # values[t] is V(x_t) but delta_t bootstraps from V(x_{t+1}): shift by
        # one step and append V(x_T), which lives outside the [T, B] values.
        values_t_plus_1 = tf.concat([values[1:], bootstrap_value[None]], axis=0)
        deltas = clipped_rhos * (rewards + discounts * values_t_plus_1 - values)

        # v_s - V(x_s) = delta_s + discount_s c_s (v_{s+1} - V(x_{s+1})),
        # with v_T - V(x_T) = 0, evaluated back to front.  tf.scan builds one
        # graph-level loop whatever T is (no Python loop unrolled at trace time).
        def _step(acc, elems):
            discount_c, delta = elems
            return delta + discount_c * acc

        vs_minus_values = tf.scan(
            _step,
            elems=(discounts * cs, deltas),
            initializer=tf.zeros_like(bootstrap_value),
            reverse=True,
        )
        vs = vs_minus_values + values

        # The advantage of the action at x_s bootstraps from the V-trace
        # target of the *next* observation, v_{s+1}; v_T is bootstrap_value.
        vs_t_plus_1 = tf.concat([vs[1:], bootstrap_value[None]], axis=0)
        if clip_pg_rho_threshold is not None:
            clipped_pg_rhos = tf.minimum(cast_to(clip_pg_rho_threshold, dtype), rhos)
        else:
            clipped_pg_rhos = rhos
        pg_advantages = clipped_pg_rhos * (rewards + discounts * vs_t_plus_1 - values)

        return VTraceReturns(
            vs=tf.stop_gradient(vs),
            pg_advantages=tf.stop_gradient(pg_advantages),
        )


def from_logits(
    *,
    behaviour_policy_logits: Any,
    target_policy_logits: Any,
    actions: Any,
    discounts: Any,
    rewards: Any,
    values: Any,
    bootstrap_value: Any,
    clip_rho_threshold: float | None = 1.0,
    clip_pg_rho_threshold: float | None = 1.0,
    lambda_: float = 1.0,
    distribution: ActionDistribution | None = None,
) -> VTraceFromLogitsReturns:
    """V-trace from the behaviour and target policies' parameters (logits for a softmax).

    The log importance weights are
    ``log pi(a_t|x_t) - log mu(a_t|x_t)`` under ``distribution``; everything else is
    :func:`from_importance_weights`.  Time indexing follows the package
    convention (module docstring).

    Gradients flow through ``target_action_log_probs`` (and hence
    ``log_rhos``) to ``target_policy_logits``; ``vs`` and ``pg_advantages``
    are gradient-stopped.

    Args:
      behaviour_policy_logits: ``[T, B, P]`` parameters of the actor's policy ``mu`` at
        acting time (``P`` = ``distribution.num_params``; logits for a softmax).
      target_policy_logits: ``[T, B, P]`` parameters of the learner's policy ``pi``.
      actions: ``[T, B, *distribution.action_shape]`` actions taken at observation ``t``
        (``[T, B]`` integers for a softmax).
      discounts: ``[T, B]`` ``gamma * (1 - (terminated or truncated))`` of transition
        ``t -> t+1``.
      rewards: ``[T, B]`` reward of transition ``t -> t+1``.
      values: ``[T, B]`` ``V(x_t)``.
      bootstrap_value: ``[B]`` ``V(x_T)``.
      clip_rho_threshold: see :func:`from_importance_weights`.
      clip_pg_rho_threshold: see :func:`from_importance_weights`.
      lambda_: see :func:`from_importance_weights`.
      distribution: the policies' `impala_rep.distributions.ActionDistribution`; None: a
        softmax over the parameters' last axis.

    Returns:
      :class:`VTraceFromLogitsReturns`, all fields ``[T, B]``.

    Raises:
      ValueError: if an argument has the wrong rank or disagrees on
        ``T``/``B``/``P``.
    """
    with tf.name_scope("vtrace_from_logits"):
        behaviour_policy_logits = float_tensor(behaviour_policy_logits)
        target_policy_logits = float_tensor(target_policy_logits)
        distribution = or_categorical(distribution, behaviour_policy_logits)
        # No dtype hint: with tf.int32 as one, a float (Gaussian) action array is truncated.
        actions = tf.convert_to_tensor(actions)
        values = float_tensor(values)
        discounts = cast_to(discounts, values.dtype)
        rewards = cast_to(rewards, values.dtype)
        bootstrap_value = cast_to(bootstrap_value, values.dtype)

        # Checked here as well as in from_importance_weights so that the
        # logits' T/B are tied to those of the value inputs.
        dims: dict = {}
        assert_shape(
            "behaviour_policy_logits",
            behaviour_policy_logits,
            ("T", "B", distribution.num_params),
            dims=dims,
        )
        assert_shape(
            "target_policy_logits",
            target_policy_logits,
            ("T", "B", distribution.num_params),
            dims=dims,
        )
        assert_shape("actions", actions, ("T", "B", *distribution.action_shape), dims=dims)
        assert_shape("discounts", discounts, ("T", "B"), dims=dims)
        assert_shape("rewards", rewards, ("T", "B"), dims=dims)
        assert_shape("values", values, ("T", "B"), dims=dims)
        assert_shape("bootstrap_value", bootstrap_value, ("B",), dims=dims)

        behaviour_action_log_probs = distribution.log_prob(behaviour_policy_logits, actions)
        target_action_log_probs = distribution.log_prob(target_policy_logits, actions)
        log_rhos = target_action_log_probs - tf.cast(
            behaviour_action_log_probs, target_action_log_probs.dtype
        )

        returns = from_importance_weights(
            log_rhos=log_rhos,
            discounts=discounts,
            rewards=rewards,
            values=values,
            bootstrap_value=bootstrap_value,
            clip_rho_threshold=clip_rho_threshold,
            clip_pg_rho_threshold=clip_pg_rho_threshold,
            lambda_=lambda_,
        )
        return VTraceFromLogitsReturns(
            vs=returns.vs,
            pg_advantages=returns.pg_advantages,
            log_rhos=log_rhos,
            behaviour_action_log_probs=behaviour_action_log_probs,
            target_action_log_probs=target_action_log_probs,
        )
