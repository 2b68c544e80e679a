"""IMPALA loss terms for a policy over any action space and a state-value baseline.

As in the IMPALA paper and deepmind/scalable_agent's ``experiment.py``, each
loss is SUMMED over time and batch (not averaged), so the learning rate and
the ``baseline_cost`` / ``entropy_cost`` coefficients carry the same meaning
as in those references.

Shapes are time-major and follow the package's time-indexing convention (see
the ``impala_rep`` package docstring and :mod:`impala_rep.vtrace`): ``T`` is
the unroll length, ``B`` the batch size, ``P`` the policy's parameters per step;
``logits[t]`` and ``values[t]`` come from observation ``t``, ``actions[t]`` was
taken there, and ``bootstrap_value = V(x_T)`` is ``[B]``.

The policy's terms take its parameters (``logits``) and an
``impala_rep.distributions.ActionDistribution`` that reads them: log-probabilities,
entropy and KL come from it, so one loss serves softmax, multi-categorical and Gaussian
policies alike. Without one they assume a softmax over the last axis, whose parameters
are ``NUM_ACTIONS`` logits and whose actions are ``[T, B]`` integers.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from impala_rep import vtrace
from impala_rep.conversion import cast_to, float_tensor
from impala_rep.distributions import ActionDistribution, or_categorical
from impala_rep.shapes import assert_shape

# The metrics `impala_loss` reports (metrics.jsonl, TensorBoard), and what each means.
METRICS = {
    "loss": "the total loss, summed over the batch's steps",
    "pg_loss": "the policy term (IMPALA's policy gradient or the clipped surrogate)",
    "baseline_loss": "the value term, before its weight (--baseline-cost)",
    "entropy_loss": "minus the policy's entropy summed over the batch, before its weight",
    "entropy": "the policy's mean entropy per step",
    "vtrace_rho_clipped_fraction": "steps whose importance weight rho is over --clip-rho-threshold",
    "rho_mean": "mean importance weight pi/mu of the batch's actions",
    "advantage_mean": "mean V-trace advantage, before any normalisation",
    "value_mean": "mean value the value head predicts",
    "kl": "mean KL(actors' policy || learner's policy) per step: how far the learner has moved",
    "value_explained_variance": "how much of the V-trace targets' variance the value head explains",
    "vtrace_target_mean": "mean V-trace value target",
    "vtrace_target_square_mean": "mean square of the V-trace value targets",
    "surrogate_clipped_fraction": "steps whose ratio pi/mu is outside [1 - eps, 1 + eps] "
    "(with --surrogate-clip)",
}

__all__ = [
    "policy_gradient_loss",
    "clipped_surrogate_loss",
    "baseline_loss",
    "entropy_loss",
    "kl_loss",
    "explained_variance",
    "normalized_advantages",
    "batch_mean",
    "impala_loss",
    "impala_loss_terms",
]


def _policy_inputs(
    distribution: ActionDistribution | None, dims: dict, **params: Any
) -> tuple[ActionDistribution, dict[str, tf.Tensor]]:
    """The distribution (a softmax if None) and each named ``[T, B, P]`` parameter tensor,
    converted (to the first one's float dtype) and shape-checked."""
    converted, dtype = {}, None
    for name, value in params.items():
        value = float_tensor(value) if dtype is None else cast_to(value, dtype)
        dtype = value.dtype
        converted[name] = value
    distribution = or_categorical(distribution, next(iter(converted.values())))
    for name, value in converted.items():
        assert_shape(name, value, ("T", "B", distribution.num_params), dims=dims)
    return distribution, converted


def _actions(actions: Any, distribution: ActionDistribution, dims: dict) -> tf.Tensor:
    # No dtype hint: with tf.int32 as one, a float (Gaussian) action array is truncated.
    actions = tf.convert_to_tensor(actions)
    assert_shape("actions", actions, ("T", "B", *distribution.action_shape), dims=dims)
    return actions


def policy_gradient_loss(
    *,
    logits: Any,
    actions: Any,
    advantages: Any,
    distribution: ActionDistribution | None = None,
) -> tf.Tensor:
    """``-sum_{t,b} log pi(a_t|x_t) * advantages_t`` (advantages gradient-stopped).

    Args:
      logits: ``[T, B, P]`` target-policy parameters.
      actions: ``[T, B, *action_shape]`` actions taken at observation ``t``.
      advantages: ``[T, B]`` e.g. V-trace ``pg_advantages``; treated as a
        constant weight.
      distribution: the policy's distribution; None: a softmax.

    Returns:
      Scalar loss, in the dtype of ``logits``.
    """
    with tf.name_scope("policy_gradient_loss"):
        dims: dict = {}
        distribution, params = _policy_inputs(distribution, dims, logits=logits)
        logits = params["logits"]
        actions = _actions(actions, distribution, dims)
        advantages = cast_to(advantages, logits.dtype)
        assert_shape("advantages", advantages, ("T", "B"), dims=dims)
        log_probs = distribution.log_prob(logits, actions)
        return -tf.reduce_sum(log_probs * tf.stop_gradient(advantages))


def clipped_surrogate_loss(
    *,
    logits: Any,
    behaviour_logits: Any,
    actions: Any,
    advantages: Any,
    clip: float,
    distribution: ActionDistribution | None = None,
) -> tf.Tensor:
    """PPO's clipped surrogate, as APPO uses it on V-trace advantages:
    ``-sum_{t,b} min(r_t A_t, clip(r_t, 1 - clip, 1 + clip) A_t)`` with
    ``r_t = pi(a_t|x_t) / mu(a_t|x_t)`` (``mu``: the behaviour policy, gradient-stopped).

    Where ``r_t`` has left ``[1 - clip, 1 + clip]`` in the direction the advantage
    pushes it, the term's gradient is 0: repeated updates on one batch (sample
    reuse) cannot move the policy far from the one that acted.

    Args:
      logits: ``[T, B, P]`` target-policy parameters.
      behaviour_logits: ``[T, B, P]`` the actors' policy parameters.
      actions: ``[T, B, *action_shape]`` actions.
      advantages: ``[T, B]`` advantages, treated as constants.
      clip: ``epsilon > 0``.
      distribution: the policies' distribution; None: a softmax.

    Returns:
      Scalar loss, in the dtype of ``logits``.
    """
    with tf.name_scope("clipped_surrogate_loss"):
        dims: dict = {}
        distribution, params = _policy_inputs(
            distribution, dims, logits=logits, behaviour_logits=behaviour_logits
        )
        logits, behaviour_logits = params["logits"], params["behaviour_logits"]
        actions = _actions(actions, distribution, dims)
        advantages = tf.stop_gradient(cast_to(advantages, logits.dtype))
        assert_shape("advantages", advantages, ("T", "B"), dims=dims)
        if not clip > 0:
            raise ValueError(f"clip must be > 0, got {clip!r}")
        log_pi = distribution.log_prob(logits, actions)
        log_mu = distribution.log_prob(tf.stop_gradient(behaviour_logits), actions)
        ratio = tf.exp(log_pi - log_mu)
        clipped = tf.clip_by_value(ratio, 1.0 - clip, 1.0 + clip)
        return -tf.reduce_sum(tf.minimum(ratio * advantages, clipped * advantages))


def kl_loss(
    *, behaviour_logits: Any, logits: Any, distribution: ActionDistribution | None = None
) -> tf.Tensor:
    """``sum_{t,b} KL(mu(.|x_t) || pi(.|x_t))``: how far the learner's policy has moved from
    the behaviour policy (gradient-stopped) on the unroll's states.

    Args:
      behaviour_logits: ``[T, B, P]`` the actors' policy parameters ``mu``.
      logits: ``[T, B, P]`` the learner's policy parameters ``pi``.
      distribution: the policies' distribution; None: a softmax.

    Returns:
      Scalar loss, in the dtype of ``logits``.
    """
    with tf.name_scope("kl_loss"):
        distribution, params = _policy_inputs(
            distribution, {}, logits=logits, behaviour_logits=behaviour_logits
        )
        behaviour = tf.stop_gradient(params["behaviour_logits"])
        return tf.reduce_sum(distribution.kl(behaviour, params["logits"]))


def batch_mean(x: Any) -> tf.Tensor:
    """The mean of `x` over the whole batch: every replica's shard when called inside a
    replicated step (shards are equal-sized, so it is the mean of their means), else `x`'s own.

    tf.distribute directly, not impala_rep.learner's all_reduce: the core imports no other
    layer, and outside a strategy (one replica) this is the plain mean."""
    mean = tf.reduce_mean(x)
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return mean
    return context.all_reduce(tf.distribute.ReduceOp.MEAN, mean)


def normalized_advantages(*, advantages: Any, epsilon: float = 1e-8) -> tf.Tensor:
    """``(A - mean) / (std + epsilon)`` over the whole batch, gradient-stopped.

    PPO's advantage normalisation (SB3's ``normalize_advantage``, cleanrl's ``norm_adv``;
    they divide the variance by n - 1, here by n: immaterial at hundreds of steps a batch):
    the policy term's size then no longer depends on the scale of the rewards, so a
    sparse, small-reward task (Pong's clipped ±1) does not leave it below the entropy
    bonus. Inside a replicated step the mean and the variance are those of every
    replica's shard together (two all-reduces), so N replicas compute what one device
    would on the whole batch; elsewhere (one replica) they are this tensor's.

    Args:
      advantages: ``[T, B]`` advantages.
      epsilon: added to the standard deviation (a constant batch gives 0, not NaN).

    Returns:
      ``[T, B]`` in the dtype of ``advantages``.
    """
    with tf.name_scope("normalized_advantages"):
        advantages = tf.stop_gradient(float_tensor(advantages))
        assert_shape("advantages", advantages, ("T", "B"))
        mean = batch_mean(advantages)
        # Two passes (mean, then squared deviations) rather than E[A²] - mean², which
        # loses float32 precision when the mean is large against the spread.
        std = tf.sqrt(batch_mean(tf.square(advantages - mean)))
        return (advantages - mean) / (std + cast_to(epsilon, advantages.dtype))


def _values_and_targets(values: Any, targets: Any) -> tuple[tf.Tensor, tf.Tensor]:
    """Both as tensors of the values' float dtype, checked to be ``[T, B]`` alike."""
    values = float_tensor(values)
    targets = cast_to(targets, values.dtype)
    dims: dict = {}
    assert_shape("values", values, ("T", "B"), dims=dims)
    assert_shape("targets", targets, ("T", "B"), dims=dims)
    return values, targets


def explained_variance(*, values: Any, targets: Any) -> tf.Tensor:
    """``1 - Var(targets - values) / Var(targets)`` over all ``[T, B]`` entries.

    1: the values predict the targets exactly; 0: no better than their mean; below 0:
    worse. 0 when the targets do not vary (nothing to explain).
    """
    with tf.name_scope("explained_variance"):
        values, targets = _values_and_targets(values, targets)
        target_var = tf.math.reduce_variance(targets)
        ratio = tf.math.divide_no_nan(tf.math.reduce_variance(targets - values), target_var)
        return tf.where(target_var > 0, 1.0 - ratio, tf.zeros_like(ratio))


def baseline_loss(*, values: Any, targets: Any) -> tf.Tensor:
    """``0.5 * sum_{t,b} (targets - values)^2`` (targets gradient-stopped).

    Args:
      values: ``[T, B]`` baseline predictions ``V(x_t)``.
      targets: ``[T, B]`` regression targets, e.g. V-trace ``vs``.

    Returns:
      Scalar loss, in the dtype of ``values``.
    """
    with tf.name_scope("baseline_loss"):
        values, targets = _values_and_targets(values, targets)
        return 0.5 * tf.reduce_sum(tf.square(tf.stop_gradient(targets) - values))


def entropy_loss(*, logits: Any, distribution: ActionDistribution | None = None) -> tf.Tensor:
    """Negative policy entropy ``-sum_{t,b} H(pi(.|x_t))``.

    Minimising this maximises the entropy (a softmax's is computed from ``log_softmax``,
    so that large logits do not produce ``0 * log 0`` NaNs).

    Args:
      logits: ``[T, B, P]`` policy parameters.
      distribution: the policy's distribution; None: a softmax.

    Returns:
      Scalar loss, in the dtype of ``logits``.
    """
    with tf.name_scope("entropy_loss"):
        distribution, params = _policy_inputs(distribution, {}, logits=logits)
        return -tf.reduce_sum(distribution.entropy(params["logits"]))


def impala_loss(**kwargs: Any) -> tuple[tf.Tensor, dict[str, tf.Tensor], dict[str, tf.Tensor]]:
    """`(loss, sums, means)`: `impala_loss_terms` (same keyword arguments) without the terms."""
    loss, sums, means, _ = impala_loss_terms(**kwargs)
    return loss, sums, means


def impala_loss_terms(
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
    surrogate_clip: float | None = None,
    kl_cost: float = 0.0,
    normalize_advantages: bool = False,
    distribution: ActionDistribution | None = None,
) -> tuple[tf.Tensor, dict[str, tf.Tensor], dict[str, tf.Tensor], dict[str, tf.Tensor]]:
    """Total IMPALA loss ``pg + baseline_cost * baseline + entropy_cost * entropy
    (+ kl_cost * kl)``.

    V-trace targets and advantages come from :func:`impala_rep.vtrace.from_logits`;
    the policy-gradient and entropy terms use ``target_logits``, the baseline
    term regresses ``values`` onto ``vs``.  Time indexing follows the package
    convention.  The logits are cast to the dtype of ``values``.

    Args:
      target_logits: ``[T, B, P]`` learner policy parameters.
      behaviour_logits: ``[T, B, P]`` actor policy parameters.
      actions: ``[T, B, *action_shape]`` actions (``[T, B]`` integers for a softmax).
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
      surrogate_clip: ``None``: the policy-gradient term is IMPALA's,
        ``log pi * pg_advantages``. A number ``epsilon``: APPO's
        (:func:`clipped_surrogate_loss`) on the advantages
        ``r_t + discount_t v_{t+1} - V(x_t)``, without V-trace's rho, which the
        surrogate's ratio ``pi / mu`` takes the place of.
      kl_cost: weight of :func:`kl_loss`, ``KL(mu || pi)`` (0: not in the loss).
      normalize_advantages: the policy term's advantages (either kind) standardised
        over the batch first (:func:`normalized_advantages`).
      distribution: the policies' ``ActionDistribution``; None: a softmax over the
        logits' last axis.

    Returns:
      ``(loss, sums, means, terms)``, the fields of :class:`impala_rep.loss_fn.LossOutput`:
      the scalar total loss, two dicts of gradient-stopped scalar metrics, and the
      weighted parts whose sum is the loss, with their gradients: ``pg_loss``,
      ``baseline_loss`` (times ``baseline_cost``), ``entropy_loss`` (times
      ``entropy_cost``) and, with ``kl_cost``, ``kl_loss`` (times ``kl_cost``).
      ``sums`` are sums over ``[T, B]``, so summing them over equal shards of a
      batch gives the whole batch's: ``loss``, ``pg_loss``, ``baseline_loss``,
      ``entropy_loss``. ``means`` are means over ``[T, B]``, so their mean over
      equal shards is the whole batch's: ``entropy`` (per step),
      ``vtrace_rho_clipped_fraction`` (fraction of steps with
      ``rho > clip_rho_threshold``; 0 when that is ``None``), ``rho_mean``,
      ``advantage_mean``, ``value_mean``, ``kl`` (``KL(mu || pi)`` per step),
      ``value_explained_variance`` (of ``vs`` by the values; a ratio of variances,
      so over replicas it is the mean of the shards', not the batch's),
      ``vtrace_target_mean`` and ``vtrace_target_square_mean`` (of ``vs``) and, with
      ``surrogate_clip``, ``surrogate_clipped_fraction`` (steps whose ratio is
      outside ``[1 - epsilon, 1 + epsilon]``).
    """
    with tf.name_scope("impala_loss"):
        values = float_tensor(values)
        dtype = values.dtype
        target_logits = tf.cast(float_tensor(target_logits), dtype)
        behaviour_logits = tf.cast(float_tensor(behaviour_logits), dtype)
        distribution = or_categorical(distribution, target_logits)

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
            distribution=distribution,
        )
        if surrogate_clip is None:
            advantages = vt.pg_advantages
        else:
            bootstrap_value = cast_to(bootstrap_value, dtype)
            vs_next = tf.concat([vt.vs[1:], bootstrap_value[tf.newaxis]], axis=0)
            advantages = tf.stop_gradient(
                cast_to(rewards, dtype) + cast_to(discounts, dtype) * vs_next - values
            )
        # advantage_mean reports the advantages before any normalisation (after it, 0).
        policy_advantages = (
            normalized_advantages(advantages=advantages) if normalize_advantages else advantages
        )
        if surrogate_clip is None:
            pg = policy_gradient_loss(
                logits=target_logits,
                actions=actions,
                advantages=policy_advantages,
                distribution=distribution,
            )
        else:
            pg = clipped_surrogate_loss(
                logits=target_logits,
                behaviour_logits=behaviour_logits,
                actions=actions,
                advantages=policy_advantages,
                clip=surrogate_clip,
                distribution=distribution,
            )
        baseline = baseline_loss(values=values, targets=vt.vs)
        entropy = entropy_loss(logits=target_logits, distribution=distribution)
        kl = kl_loss(
            behaviour_logits=behaviour_logits, logits=target_logits, distribution=distribution
        )
        # The weighted parts of the loss, with their gradients (the learner can report
        # each one's gradient norm: which part drives the update).
        terms = {
            "pg_loss": pg,
            "baseline_loss": cast_to(baseline_cost, dtype) * baseline,
            "entropy_loss": cast_to(entropy_cost, dtype) * entropy,
        }
        if kl_cost:
            terms["kl_loss"] = cast_to(kl_cost, dtype) * kl
        total = tf.add_n(list(terms.values()))

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
            "advantage_mean": tf.reduce_mean(advantages),
            "value_mean": tf.reduce_mean(values),
            "kl": kl / num_steps,
            "value_explained_variance": explained_variance(values=values, targets=vt.vs),
            # The targets' first two moments: what PopArt's statistics follow (impala_rep.popart).
            "vtrace_target_mean": tf.reduce_mean(vt.vs),
            "vtrace_target_square_mean": tf.reduce_mean(tf.square(vt.vs)),
        }
        if surrogate_clip is not None:
            means["surrogate_clipped_fraction"] = tf.reduce_mean(
                tf.cast(tf.abs(rhos - 1.0) > cast_to(surrogate_clip, dtype), dtype)
            )
        # Metrics are for reporting only; never a path for gradients.
        sums, means = ({k: tf.stop_gradient(v) for k, v in d.items()} for d in (sums, means))
        return total, sums, means, terms
