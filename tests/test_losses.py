"""Tests for impala_rep.losses: values and gradients against hand formulas."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from impala_rep import losses, vtrace

# T=2, B=2, NUM_ACTIONS=3; float64 so the comparisons can be tight.
LOGITS = np.array(
    [
        [[1.0, 2.0, 0.5], [0.0, 0.0, 0.0]],
        [[-1.0, 3.0, 2.0], [10.0, -10.0, 0.0]],
    ],
    np.float64,
)
ACTIONS = np.array([[1, 0], [2, 0]], np.int32)


def log_softmax_by_hand(z):
    """log p_j = z_j - log sum_k exp(z_k), written out element by element."""
    out = np.zeros_like(z)
    for idx in np.ndindex(z.shape[:-1]):
        row = z[idx]
        m = max(row)
        log_norm = m + np.log(sum(np.exp(x - m) for x in row))
        out[idx] = [x - log_norm for x in row]
    return out


def onehot(actions, num_actions):
    return np.eye(num_actions)[actions]


def test_policy_gradient_loss_value_and_gradient():
    advantages = np.array([[0.5, -2.0], [1.5, 0.25]])
    log_p = log_softmax_by_hand(LOGITS)
    # -sum log pi(a|x) * adv, spelled out over the four steps.
    expected = -(
        log_p[0, 0, 1] * 0.5
        + log_p[0, 1, 0] * -2.0
        + log_p[1, 0, 2] * 1.5
        + log_p[1, 1, 0] * 0.25
    )
    logits = tf.constant(LOGITS)
    adv = tf.constant(advantages)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([logits, adv])
        loss = losses.policy_gradient_loss(logits=logits, actions=ACTIONS, advantages=adv)
    assert loss.shape == ()
    np.testing.assert_allclose(loss.numpy(), expected, rtol=1e-12)

    expected_grad = -(onehot(ACTIONS, 3) - np.exp(log_p)) * advantages[..., None]
    np.testing.assert_allclose(tape.gradient(loss, logits).numpy(), expected_grad, atol=1e-12)
    assert tape.gradient(loss, adv) is None


def test_baseline_loss_value_and_gradient():
    values_np = np.array([[1.0, -1.0], [0.5, 2.0]])
    targets_np = np.array([[2.0, -1.5], [0.5, -1.0]])
    # 0.5 * (1^2 + 0.5^2 + 0^2 + 3^2) = 5.125
    values = tf.constant(values_np)
    targets = tf.constant(targets_np)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([values, targets])
        loss = losses.baseline_loss(values=values, targets=targets)
    np.testing.assert_allclose(loss.numpy(), 5.125, rtol=1e-12)
    np.testing.assert_allclose(
        tape.gradient(loss, values).numpy(), -(targets_np - values_np), atol=1e-12
    )
    assert tape.gradient(loss, targets) is None


def test_entropy_loss_value_and_gradient():
    log_p = log_softmax_by_hand(LOGITS)
    p = np.exp(log_p)
    entropy = -(p * log_p).sum(axis=-1)  # [T, B]
    # Uniform over 3 actions has entropy log 3.
    np.testing.assert_allclose(entropy[0, 1], np.log(3.0), rtol=1e-12)

    logits = tf.constant(LOGITS)
    with tf.GradientTape() as tape:
        tape.watch(logits)
        loss = losses.entropy_loss(logits=logits)
    np.testing.assert_allclose(loss.numpy(), -entropy.sum(), rtol=1e-12)

    # d(-H)/dz_j = p_j (log p_j + H)
    expected_grad = p * (log_p + entropy[..., None])
    np.testing.assert_allclose(tape.gradient(loss, logits).numpy(), expected_grad, atol=1e-12)


def test_entropy_loss_is_finite_for_extreme_logits():
    logits = np.array([[[1000.0, -1000.0, 0.0]]], np.float32)
    logits_t = tf.constant(logits)
    with tf.GradientTape() as tape:
        tape.watch(logits_t)
        loss = losses.entropy_loss(logits=logits_t)
    assert np.isfinite(loss.numpy())
    assert np.all(np.isfinite(tape.gradient(loss, logits_t).numpy()))


@pytest.mark.parametrize(
    "fn,kwargs,name",
    [
        (losses.policy_gradient_loss,
         dict(logits=np.zeros((2, 2)), actions=ACTIONS, advantages=np.zeros((2, 2))), "logits"),
        (losses.policy_gradient_loss,
         dict(logits=LOGITS, actions=ACTIONS, advantages=np.zeros((3, 2))), "advantages"),
        (losses.baseline_loss, dict(values=np.zeros((2, 2)), targets=np.zeros((2,))), "targets"),
        (losses.entropy_loss, dict(logits=np.zeros((2, 2))), "logits"),
    ],
)
def test_bad_shapes_raise(fn, kwargs, name):
    with pytest.raises(ValueError, match=rf"^{name} must have shape \["):
        fn(**kwargs)


def _impala_inputs(rng, T=6, B=4, A=5):
    terminated = rng.random((T, B)) < 0.2
    return dict(
        target_logits=rng.normal(size=(T, B, A)) * 2.0,
        behaviour_logits=rng.normal(size=(T, B, A)) * 2.0,
        actions=rng.integers(0, A, size=(T, B)),
        values=rng.normal(size=(T, B)),
        bootstrap_value=rng.normal(size=(B,)),
        rewards=rng.normal(size=(T, B)),
        discounts=0.99 * (1.0 - terminated),
    )


# Sums over [T, B] (summed over replicas by the learner), and means over [T, B] (averaged).
SUM_KEYS = {"loss", "pg_loss", "baseline_loss", "entropy_loss"}
MEAN_KEYS = {"entropy", "vtrace_rho_clipped_fraction", "rho_mean", "advantage_mean", "value_mean"}


@pytest.mark.parametrize("clip_rho_threshold", [1.0, 1.5, None])
def test_impala_loss_combines_terms(clip_rho_threshold):
    rng = np.random.default_rng(21)
    inputs = _impala_inputs(rng)
    baseline_cost, entropy_cost = 0.5, 0.01
    kwargs = dict(clip_rho_threshold=clip_rho_threshold, clip_pg_rho_threshold=1.0, lambda_=0.9)

    loss, sums, means = losses.impala_loss(
        **inputs, baseline_cost=baseline_cost, entropy_cost=entropy_cost, **kwargs
    )

    vt = vtrace.from_logits(
        behaviour_policy_logits=inputs["behaviour_logits"],
        target_policy_logits=inputs["target_logits"],
        actions=inputs["actions"],
        discounts=inputs["discounts"],
        rewards=inputs["rewards"],
        values=inputs["values"],
        bootstrap_value=inputs["bootstrap_value"],
        **kwargs,
    )
    pg = losses.policy_gradient_loss(
        logits=inputs["target_logits"], actions=inputs["actions"], advantages=vt.pg_advantages
    )
    baseline = losses.baseline_loss(values=inputs["values"], targets=vt.vs)
    entropy = losses.entropy_loss(logits=inputs["target_logits"])
    expected = pg + baseline_cost * baseline + entropy_cost * entropy

    assert loss.shape == ()
    np.testing.assert_allclose(loss.numpy(), expected.numpy(), rtol=1e-12)
    assert set(sums) == SUM_KEYS and set(means) == MEAN_KEYS
    metrics = {**sums, **means}
    for key, value in metrics.items():
        assert value.shape == (), key
        assert np.isfinite(value.numpy()), key
    np.testing.assert_allclose(metrics["loss"].numpy(), loss.numpy())
    np.testing.assert_allclose(metrics["pg_loss"].numpy(), pg.numpy())
    np.testing.assert_allclose(metrics["baseline_loss"].numpy(), baseline.numpy())
    np.testing.assert_allclose(metrics["entropy_loss"].numpy(), entropy.numpy())
    np.testing.assert_allclose(
        metrics["entropy"].numpy(), -entropy.numpy() / inputs["actions"].size, rtol=1e-12
    )
    np.testing.assert_allclose(metrics["value_mean"].numpy(), inputs["values"].mean())

    # Count clipped steps in numpy from the logits themselves.
    log_p_target = log_softmax_by_hand(inputs["target_logits"])
    log_p_behaviour = log_softmax_by_hand(inputs["behaviour_logits"])
    a = inputs["actions"][..., None]
    rhos = np.exp(
        np.take_along_axis(log_p_target, a, -1) - np.take_along_axis(log_p_behaviour, a, -1)
    )[..., 0]
    np.testing.assert_allclose(metrics["rho_mean"].numpy(), rhos.mean(), rtol=1e-10)
    if clip_rho_threshold is None:
        expected_fraction = 0.0
    else:
        num_clipped = int((rhos > clip_rho_threshold).sum())
        assert 0 < num_clipped < rhos.size  # the case exercises both sides
        expected_fraction = num_clipped / rhos.size
    np.testing.assert_allclose(metrics["vtrace_rho_clipped_fraction"].numpy(), expected_fraction)


def test_impala_loss_gradients_reach_target_logits_and_values_only():
    rng = np.random.default_rng(8)
    inputs = {k: tf.constant(v) for k, v in _impala_inputs(rng).items()}
    watched = ["target_logits", "behaviour_logits", "values", "bootstrap_value", "rewards"]
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([inputs[k] for k in watched])
        loss, _, _ = losses.impala_loss(**inputs, baseline_cost=0.5, entropy_cost=0.01)
    for key in ("target_logits", "values"):
        grad = tape.gradient(loss, inputs[key])
        assert grad is not None and np.any(grad.numpy()), key
    for key in ("behaviour_logits", "bootstrap_value", "rewards"):
        assert tape.gradient(loss, inputs[key]) is None, key
