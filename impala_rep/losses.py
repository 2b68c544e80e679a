"""IMPALA loss terms for a softmax policy and a state-value baseline.

As in the IMPALA paper and deepmind/scalable_agent's ``experiment.py``, each
loss is SUMMED over time and batch (not averaged), so the learning rate and
the ``baseline_cost`` / ``entropy_cost`` coefficients carry the same meaning
as in those references.

Shapes are time-major and follow the package's time-indexing convention (see
the ``impala_rep`` package docstring and :mod:`impala_rep.vtrace`): ``T`` is
the unroll length, ``B`` the batch size, ``NUM_ACTIONS`` the number of
discrete actions; ``logits[t]`` and ``values[t]`` come from observation ``t``,
``actions[t]`` was taken there, and ``bootstrap_value = V(x_T)`` is ``[B]``.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from impala_rep import vtrace
from impala_rep.conversion import cast_to, float_tensor
from impala_rep.shapes import assert_shape

__all__ = [
    "policy_gradient_loss",
    "baseline_loss",
    "entropy_loss",
    "impala_loss",
]


def policy_gradient_loss(*, logits: Any, actions: Any, advantages: Any) -> tf.Tensor:
    """``-sum_{t,b} log pi(a_t|x_t) * advantages_t`` (advantages gradient-stopped).

    Args:
      logits: ``[T, B, NUM_ACTIONS]`` target-policy logits.
      actions: ``[T, B]`` integer actions taken at observation ``t``.
      advantages: ``[T, B]`` e.g. V-trace ``pg_advantages``; treated as a
        constant weight.

    Returns:
      Scalar loss, in the dtype of ``logits``.
    """
    with tf.name_scope("policy_gradient_loss"):
        logits = float_tensor(logits)
        actions = tf.convert_to_tensor(actions, dtype_hint=tf.int32)
        advantages = cast_to(advantages, logits.dtype)
        dims: dict = {}
        assert_shape("logits", logits, ("T", "B", "NUM_ACTIONS"), dims=dims)
        assert_shape("actions", actions, ("T", "B"), dims=dims)
        assert_shape("advantages", advantages, ("T", "B"), dims=dims)

        # Cross-entropy against the taken action is exactly -log pi(a_t|x_t).
        neg_log_probs = tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=actions, logits=logits
        )
        return tf.reduce_sum(neg_log_probs * tf.stop_gradient(advantages))


def baseline_loss(*, values: Any, targets: Any) -> tf.Tensor:
    """``0.5 * sum_{t,b} (targets - values)^2`` (targets gradient-stopped).

    Args:
      values: ``[T, B]`` baseline predictions ``V(x_t)``.
      targets: ``[T, B]`` regression targets, e.g. V-trace ``vs``.

    Returns:
      Scalar loss, in the dtype of ``values``.
    """
    with tf.name_scope("baseline_loss"):
        values = float_tensor(values)
        targets = cast_to(targets, values.dtype)
        dims: dict = {}
        assert_shape("values", values, ("T", "B"), dims=dims)
        assert_shape("targets", targets, ("T", "B"), dims=dims)
        return 0.5 * tf.reduce_sum(tf.square(tf.stop_gradient(targets) - values))


def entropy_loss(*, logits: Any) -> tf.Tensor:
    """Negative policy entropy ``-sum_{t,b} H(pi(.|x_t))``.

    Minimising this maximises the entropy.  Computed from ``log_softmax`` so
    that large logits do not produce ``0 * log 0`` NaNs.

    Args:
      logits: ``[T, B, NUM_ACTIONS]`` policy logits.

    Returns:
      Scalar loss, in the dtype of ``logits``.
    """
    with tf.name_scope("entropy_loss"):
        logits = float_tensor(logits)
        assert_shape("logits", logits, ("T", "B", "NUM_ACTIONS"))
        log_policy = tf.nn.log_softmax(logits, axis=-1)
        policy = tf.exp(log_policy)
        # sum_a p log p = -H, summed over all steps.
        return tf.reduce_sum(policy * log_policy)


def impala_loss(
    *,
    target_logits: Any,
    behaviour_logits: Any,
    actions: Any,
    values: Any,
    bootstrap_value: Any,
    rewards: Any,
    discounts: Any,
    baseline_cost: float,
    entropy_cost: float,
    clip_rho_threshold: float | None = 1.0,
    clip_pg_rho_threshold: float | None = 1.0,
    lambda_: float = 1.0,
) -> tuple[tf.Tensor, dict[str, tf.Tensor], dict[str, tf.Tensor]]:
    """Total IMPALA loss ``pg + baseline_cost * baseline + entropy_cost * entropy``.

    V-trace targets and advantages come from :func:`impala_rep.vtrace.from_logits`;
    the policy-gradient and entropy terms use ``target_logits``, the baseline
    term regresses ``values`` onto ``vs``.  Time indexing follows the package
    convention.  The logits are cast to the dtype of ``values``.

    Args:
      target_logits: ``[T, B, NUM_ACTIONS]`` learner policy logits.
      behaviour_logits: ``[T, B, NUM_ACTIONS]`` actor policy logits.
      actions: ``[T, B]`` integer actions.
      values: ``[T, B]`` ``V(x_t)`` from the learner.
      bootstrap_value: ``[B]`` ``V(x_T)``.
      rewards: ``[T, B]`` reward of transition ``t -> t+1``.
      discounts: ``[T, B]`` ``gamma * (1 - (terminated or truncated))``
        (``impala_rep.transitions.vtrace_inputs``).
      baseline_cost: weight of the baseline loss.
      entropy_cost: weight of the entropy loss.
      clip_rho_threshold: see :func:`impala_rep.vtrace.from_importance_weights`.
      clip_pg_rho_threshold: see :func:`impala_rep.vtrace.from_importance_weights`.
      lambda_: see :func:`impala_rep.vtrace.from_importance_weights`.

    Returns:
      ``(loss, sums, means)``, the fields of :class:`impala_rep.loss_fn.LossOutput`:
      the scalar total loss and two dicts of gradient-stopped scalar metrics.
      ``sums`` are sums over ``[T, B]``, so summing them over equal shards of a
      batch gives the whole batch's: ``loss``, ``pg_loss``, ``baseline_loss``,
      ``entropy_loss``. ``means`` are means over ``[T, B]``, so their mean over
      equal shards is the whole batch's: ``entropy`` (per step),
      ``vtrace_rho_clipped_fraction`` (fraction of steps with
      ``rho > clip_rho_threshold``; 0 when that is ``None``), ``rho_mean``,
      ``advantage_mean`` and ``value_mean``.
    """
    with tf.name_scope("impala_loss"):
        values = float_tensor(values)
        dtype = values.dtype
        target_logits = tf.cast(float_tensor(target_logits), dtype)
        behaviour_logits = tf.cast(float_tensor(behaviour_logits), dtype)

        vt = vtrace.from_logits(
            behaviour_policy_logits=behaviour_logits,
            target_policy_logits=target_logits,
            actions=actions,
            discounts=discounts,
            rewards=rewards,
            values=values,
            bootstrap_value=bootstrap_value,
            clip_rho_threshold=clip_rho_threshold,
            clip_pg_rho_threshold=clip_pg_rho_threshold,
            lambda_=lambda_,
        )
        pg = policy_gradient_loss(
            logits=target_logits, actions=actions, advantages=vt.pg_advantages
        )
        baseline = baseline_loss(values=values, targets=vt.vs)
        entropy = entropy_loss(logits=target_logits)
        total = (
            pg
            + cast_to(baseline_cost, dtype) * baseline
            + cast_to(entropy_cost, dtype) * entropy
        )

        num_steps = tf.cast(tf.size(vt.log_rhos), dtype)
        rhos = tf.exp(vt.log_rhos)
        if clip_rho_threshold is None:
            clipped_fraction = tf.zeros([], dtype)
        else:
            clipped_fraction = tf.reduce_mean(
                tf.cast(rhos > cast_to(clip_rho_threshold, dtype), dtype)
            )
        sums = {"loss": total, "pg_loss": pg, "baseline_loss": baseline, "entropy_loss": entropy}
        means = {
            # entropy_loss is -sum H over T*B steps.
            "entropy": -entropy / num_steps,
            "vtrace_rho_clipped_fraction": clipped_fraction,
            "rho_mean": tf.reduce_mean(rhos),
            "advantage_mean": tf.reduce_mean(vt.pg_advantages),
            "value_mean": tf.reduce_mean(values),
        }
        # Metrics are for reporting only; never a path for gradients.
        sums, means = ({k: tf.stop_gradient(v) for k, v in d.items()} for d in (sums, means))
        return total, sums, means
