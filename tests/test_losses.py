"""Tests for impala_rep.losses: values and gradients against hand formulas."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from impala_rep import losses, vtrace
from impala_rep.distributions import DiagGaussian

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
        log_p[0, 0, 1] * 0.5 + log_p[0, 1, 0] * -2.0 + log_p[1, 0, 2] * 1.5 + log_p[1, 1, 0] * 0.25
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
        (
            losses.policy_gradient_loss,
            dict(logits=np.zeros((2, 2)), actions=ACTIONS, advantages=np.zeros((2, 2))),
            "logits",
        ),
        (
            losses.policy_gradient_loss,
            dict(logits=LOGITS, actions=ACTIONS, advantages=np.zeros((3, 2))),
            "advantages",
        ),
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
MEAN_KEYS = {
    "entropy",
    "vtrace_rho_clipped_fraction",
    "rho_mean",
    "advantage_mean",
    "value_mean",
    "kl",
    "value_explained_variance",
    "vtrace_target_mean",
    "vtrace_target_square_mean",
}


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
    np.testing.assert_allclose(
        metrics["vtrace_target_mean"].numpy(), vt.vs.numpy().mean(), rtol=1e-12
    )
    np.testing.assert_allclose(
        metrics["vtrace_target_square_mean"].numpy(), np.mean(vt.vs.numpy() ** 2), rtol=1e-12
    )

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


# --- APPO's clipped surrogate, the KL term, explained variance --------------------------


def test_clipped_surrogate_loss_value_and_gradient_by_hand():
    behaviour = LOGITS + np.array(
        [[[0.3, -0.2, 0.0], [1.0, 0.0, 0.0]], [[0.0, 0.0, -0.9], [0.0, 0.0, 0.0]]]
    )
    advantages = np.array([[0.5, -2.0], [1.5, 0.25]])
    clip = 0.2
    log_pi, log_mu = log_softmax_by_hand(LOGITS), log_softmax_by_hand(behaviour)
    expected, expected_grad = 0.0, np.zeros_like(LOGITS)
    for t, b in np.ndindex(2, 2):
        a = ACTIONS[t, b]
        ratio = np.exp(log_pi[t, b, a] - log_mu[t, b, a])
        adv = advantages[t, b]
        unclipped, clipped = ratio * adv, min(max(ratio, 1 - clip), 1 + clip) * adv
        expected -= min(unclipped, clipped)
        if unclipped <= clipped:  # the unclipped term is the min: d(ratio)/d(logits) flows
            expected_grad[t, b] = -adv * ratio * (np.eye(3)[a] - np.exp(log_pi[t, b]))
    logits = tf.constant(LOGITS)
    with tf.GradientTape() as tape:
        tape.watch(logits)
        loss = losses.clipped_surrogate_loss(
            logits=logits,
            behaviour_logits=behaviour,
            actions=ACTIONS,
            advantages=advantages,
            clip=clip,
        )
    np.testing.assert_allclose(loss.numpy(), expected, rtol=1e-12)
    grad = tape.gradient(loss, logits).numpy()
    np.testing.assert_allclose(grad, expected_grad, atol=1e-12)
    # The case has clipped steps (zero gradient) and unclipped ones.
    zero_rows = [np.allclose(grad[t, b], 0) for t, b in np.ndindex(2, 2)]
    assert any(zero_rows) and not all(zero_rows)


def test_clipped_surrogate_equals_policy_gradient_at_the_behaviour_policy():
    """At pi = mu the ratio is 1 and the surrogate's gradient is the policy gradient's."""
    advantages = np.array([[0.5, -2.0], [1.5, 0.25]])
    logits = tf.constant(LOGITS)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(logits)
        surrogate = losses.clipped_surrogate_loss(
            logits=logits, behaviour_logits=LOGITS, actions=ACTIONS, advantages=advantages, clip=0.2
        )
        pg = losses.policy_gradient_loss(logits=logits, actions=ACTIONS, advantages=advantages)
    np.testing.assert_allclose(
        tape.gradient(surrogate, logits).numpy(), tape.gradient(pg, logits).numpy(), atol=1e-12
    )
    np.testing.assert_allclose(surrogate.numpy(), -advantages.sum(), rtol=1e-12)


def test_kl_loss_by_hand():
    behaviour = LOGITS[::-1].copy()
    log_pi, log_mu = log_softmax_by_hand(LOGITS), log_softmax_by_hand(behaviour)
    expected = sum(
        np.exp(log_mu[t, b, a]) * (log_mu[t, b, a] - log_pi[t, b, a])
        for t, b, a in np.ndindex(2, 2, 3)
    )
    loss = losses.kl_loss(behaviour_logits=behaviour, logits=LOGITS)
    np.testing.assert_allclose(loss.numpy(), expected, rtol=1e-12)
    assert losses.kl_loss(behaviour_logits=LOGITS, logits=LOGITS).numpy() == pytest.approx(
        0, abs=1e-12
    )


def test_explained_variance_by_hand():
    targets = np.array([[1.0, 2.0], [3.0, 6.0]])
    values = np.array([[1.5, 2.0], [2.0, 5.0]])
    residual = targets - values
    expected = 1 - np.var(residual) / np.var(targets)
    np.testing.assert_allclose(
        losses.explained_variance(values=values, targets=targets).numpy(), expected, rtol=1e-12
    )
    assert losses.explained_variance(values=targets, targets=targets).numpy() == pytest.approx(1.0)
    flat = np.full((2, 2), 3.0)
    assert losses.explained_variance(values=values, targets=flat).numpy() == 0.0


def test_impala_loss_with_surrogate_and_kl_combines_terms():
    rng = np.random.default_rng(5)
    inputs = _impala_inputs(rng)
    clip, kl_cost = 0.3, 0.7
    loss, sums, means = losses.impala_loss(
        **inputs, baseline_cost=0.5, entropy_cost=0.01, surrogate_clip=clip, kl_cost=kl_cost
    )
    vt = vtrace.from_logits(
        behaviour_policy_logits=inputs["behaviour_logits"],
        target_policy_logits=inputs["target_logits"],
        actions=inputs["actions"],
        discounts=inputs["discounts"],
        rewards=inputs["rewards"],
        values=inputs["values"],
        bootstrap_value=inputs["bootstrap_value"],
    )
    vs = vt.vs.numpy()
    vs_next = np.concatenate([vs[1:], inputs["bootstrap_value"][None]], axis=0)
    # The surrogate's advantages carry no rho: the ratio does the importance weighting.
    advantages = inputs["rewards"] + inputs["discounts"] * vs_next - inputs["values"]
    surrogate = losses.clipped_surrogate_loss(
        logits=inputs["target_logits"],
        behaviour_logits=inputs["behaviour_logits"],
        actions=inputs["actions"],
        advantages=advantages,
        clip=clip,
    )
    kl = losses.kl_loss(behaviour_logits=inputs["behaviour_logits"], logits=inputs["target_logits"])
    expected = (
        surrogate
        + 0.5 * losses.baseline_loss(values=inputs["values"], targets=vs)
        + 0.01 * losses.entropy_loss(logits=inputs["target_logits"])
        + kl_cost * kl
    )
    np.testing.assert_allclose(loss.numpy(), expected.numpy(), rtol=1e-12)
    np.testing.assert_allclose(sums["pg_loss"].numpy(), surrogate.numpy(), rtol=1e-12)
    np.testing.assert_allclose(means["kl"].numpy(), kl.numpy() / advantages.size, rtol=1e-12)
    np.testing.assert_allclose(means["advantage_mean"].numpy(), advantages.mean(), rtol=1e-12)
    rhos = np.exp(vt.log_rhos.numpy())
    fraction = np.mean(np.abs(rhos - 1) > clip)
    assert 0 < fraction < 1
    np.testing.assert_allclose(means["surrogate_clipped_fraction"].numpy(), fraction)
    np.testing.assert_allclose(
        means["value_explained_variance"].numpy(),
        1 - np.var(vs - inputs["values"]) / np.var(vs),
        rtol=1e-10,
    )


def test_normalized_advantages_by_hand():
    rng = np.random.default_rng(7)
    advantages = rng.normal(loc=3.0, scale=0.02, size=(5, 4))
    flat = [float(a) for a in advantages.ravel()]
    mean = sum(flat) / len(flat)
    std = (sum((a - mean) ** 2 for a in flat) / len(flat)) ** 0.5
    expected = (advantages - mean) / (std + 1e-8)
    got = losses.normalized_advantages(advantages=advantages).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-10)
    assert abs(got.mean()) < 1e-10 and got.std() == pytest.approx(1.0, rel=1e-6)
    # A batch with nothing to tell apart gives zeros, not NaN.
    np.testing.assert_array_equal(
        losses.normalized_advantages(advantages=np.full((2, 3), 0.5)).numpy(), np.zeros((2, 3))
    )
    with pytest.raises(ValueError):
        losses.normalized_advantages(advantages=np.zeros(4))


@pytest.mark.parametrize("clip", [None, 0.3])
def test_impala_loss_normalizes_the_policy_terms_advantages_only(clip):
    rng = np.random.default_rng(11)
    inputs = _impala_inputs(rng)
    costs = dict(baseline_cost=0.5, entropy_cost=0.01, surrogate_clip=clip)
    plain = losses.impala_loss_terms(**inputs, **costs)
    normalized = losses.impala_loss_terms(**inputs, **costs, normalize_advantages=True)
    vt = vtrace.from_logits(
        behaviour_policy_logits=inputs["behaviour_logits"],
        target_policy_logits=inputs["target_logits"],
        actions=inputs["actions"],
        discounts=inputs["discounts"],
        rewards=inputs["rewards"],
        values=inputs["values"],
        bootstrap_value=inputs["bootstrap_value"],
    )
    if clip is None:
        advantages = vt.pg_advantages.numpy()
    else:
        vs = vt.vs.numpy()
        vs_next = np.concatenate([vs[1:], inputs["bootstrap_value"][None]], axis=0)
        advantages = inputs["rewards"] + inputs["discounts"] * vs_next - inputs["values"]
    scaled = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    if clip is None:
        pg = losses.policy_gradient_loss(
            logits=inputs["target_logits"], actions=inputs["actions"], advantages=scaled
        )
    else:
        pg = losses.clipped_surrogate_loss(
            logits=inputs["target_logits"],
            behaviour_logits=inputs["behaviour_logits"],
            actions=inputs["actions"],
            advantages=scaled,
            clip=clip,
        )
    np.testing.assert_allclose(normalized[3]["pg_loss"].numpy(), pg.numpy(), rtol=1e-10)
    assert not np.isclose(plain[3]["pg_loss"].numpy(), pg.numpy())
    # The value and entropy terms, and the reported advantage mean, are untouched.
    for name in ("baseline_loss", "entropy_loss"):
        assert normalized[3][name].numpy() == plain[3][name].numpy()
    np.testing.assert_allclose(
        normalized[2]["advantage_mean"].numpy(), advantages.mean(), rtol=1e-10
    )


# A Gaussian policy over a 2-D Box: parameters are the means, then the log-stds.
GAUSSIAN = DiagGaussian([-1.0, -1.0], [1.0, 1.0])


def gaussian_log_prob_by_hand(params, actions):
    """sum_d log N(a_d; mu_d, sigma_d), element by element."""
    out = np.zeros(params.shape[:-1])
    for idx in np.ndindex(out.shape):
        for d in range(2):
            mu, log_sigma = params[idx][d], params[idx][2 + d]
            z = (actions[idx][d] - mu) / np.exp(log_sigma)
            out[idx] += -0.5 * z * z - log_sigma - 0.5 * np.log(2 * np.pi)
    return out


def test_policy_gradient_loss_of_a_gaussian_value_and_gradient():
    rng = np.random.default_rng(7)
    params = rng.normal(size=(2, 3, 4)) * 0.5
    actions = rng.normal(size=(2, 3, 2))
    advantages = rng.normal(size=(2, 3))
    logits = tf.constant(params)
    with tf.GradientTape() as tape:
        tape.watch(logits)
        loss = losses.policy_gradient_loss(
            logits=logits, actions=actions, advantages=advantages, distribution=GAUSSIAN
        )
    expected = -np.sum(gaussian_log_prob_by_hand(params, actions) * advantages)
    np.testing.assert_allclose(loss.numpy(), expected, rtol=1e-12)
    # d log N / d mu = (a - mu) / sigma^2; d log N / d log sigma = z^2 - 1.
    sigma = np.exp(params[..., 2:])
    z = (actions - params[..., :2]) / sigma
    expected_grad = -np.concatenate([z / sigma, z * z - 1.0], -1) * advantages[..., None]
    np.testing.assert_allclose(tape.gradient(loss, logits).numpy(), expected_grad, atol=1e-12)


@pytest.mark.parametrize("surrogate_clip", [None, 0.2])
def test_impala_loss_of_a_gaussian_policy_by_hand(surrogate_clip):
    """Every policy term of a Gaussian policy from its densities, entropies and KLs written
    out, and V-trace from the log-ratios of the hand densities."""
    rng = np.random.default_rng(8)
    T, B = 5, 3
    inputs = dict(
        target_logits=rng.normal(size=(T, B, 4)) * 0.5,
        behaviour_logits=rng.normal(size=(T, B, 4)) * 0.5,
        actions=rng.normal(size=(T, B, 2)),
        values=rng.normal(size=(T, B)),
        bootstrap_value=rng.normal(size=(B,)),
        rewards=rng.normal(size=(T, B)),
        discounts=0.99 * (rng.random((T, B)) > 0.2),
    )
    _, sums, means, _ = losses.impala_loss_terms(
        **inputs,
        baseline_cost=0.5,
        entropy_cost=0.01,
        surrogate_clip=surrogate_clip,
        distribution=GAUSSIAN,
    )
    log_pi = gaussian_log_prob_by_hand(inputs["target_logits"], inputs["actions"])
    log_mu = gaussian_log_prob_by_hand(inputs["behaviour_logits"], inputs["actions"])
    vt = vtrace.from_importance_weights(
        log_rhos=log_pi - log_mu,
        **{k: inputs[k] for k in ("discounts", "rewards", "values", "bootstrap_value")},
    )
    if surrogate_clip is None:
        expected_pg = -np.sum(log_pi * vt.pg_advantages.numpy())
    else:
        vs_next = np.concatenate([vt.vs.numpy()[1:], inputs["bootstrap_value"][None]], 0)
        adv = inputs["rewards"] + inputs["discounts"] * vs_next - inputs["values"]
        ratio = np.exp(log_pi - log_mu)
        clipped = np.clip(ratio, 1 - surrogate_clip, 1 + surrogate_clip)
        expected_pg = -np.sum(np.minimum(ratio * adv, clipped * adv))
    np.testing.assert_allclose(sums["pg_loss"].numpy(), expected_pg, rtol=1e-10)
    log_std_pi = inputs["target_logits"][..., 2:]
    entropy = np.sum(log_std_pi + 0.5 * np.log(2 * np.pi * np.e), -1)
    np.testing.assert_allclose(means["entropy"].numpy(), entropy.mean(), rtol=1e-10)
    mu_p, ls_p = inputs["behaviour_logits"][..., :2], inputs["behaviour_logits"][..., 2:]
    mu_q, ls_q = inputs["target_logits"][..., :2], log_std_pi
    kl = np.sum(
        ls_q - ls_p + (np.exp(2 * ls_p) + (mu_p - mu_q) ** 2) / (2 * np.exp(2 * ls_q)) - 0.5, -1
    )
    np.testing.assert_allclose(means["kl"].numpy(), kl.mean(), rtol=1e-10)


def test_a_gaussian_policy_refuses_integer_shaped_actions():
    with pytest.raises(ValueError, match=r"^actions must have shape \[T, B, 2\]"):
        losses.policy_gradient_loss(
            logits=np.zeros((2, 3, 4)),
            actions=np.zeros((2, 3), np.int32),
            advantages=np.zeros((2, 3)),
            distribution=GAUSSIAN,
        )
