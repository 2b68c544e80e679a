"""Tests for impala_rep.vtrace against a slow numpy transcription of the paper."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from impala_rep import vtrace

SHAPES = [(1, 1), (1, 4), (5, 1), (6, 3), (16, 5)]
LAMBDAS = [1.0, 0.7]
CLIPS = [(1.0, 1.0), (2.0, 0.5), (None, None)]


def reference_vtrace(
    *,
    log_rhos,
    discounts,
    rewards,
    values,
    bootstrap_value,
    clip_rho_threshold,
    clip_pg_rho_threshold,
    lambda_,
):
    """Espeholt et al. 2018, eq. 1, as explicit sums and products (float64).

    v_s = V(x_s) + sum_{t=s}^{T-1} (prod_{i=s}^{t-1} discount_i c_i) delta_t
    delta_t = rho_t (r_t + discount_t V(x_{t+1}) - V(x_t)),  V(x_T) = bootstrap
    pg_s = rho^pg_s (r_s + discount_s v_{s+1} - V(x_s)),     v_T = bootstrap
    Deliberately not the backward recursion used by the implementation.
    """
    T, B = log_rhos.shape

    def V(t, b):
        return bootstrap_value[b] if t == T else values[t, b]

    def rho(t, b):
        r = np.exp(log_rhos[t, b])
        return r if clip_rho_threshold is None else min(clip_rho_threshold, r)

    def pg_rho(t, b):
        r = np.exp(log_rhos[t, b])
        return r if clip_pg_rho_threshold is None else min(clip_pg_rho_threshold, r)

    def c(i, b):
        return lambda_ * min(1.0, np.exp(log_rhos[i, b]))

    vs = np.zeros((T, B), np.float64)
    for b in range(B):
        for s in range(T):
            total = V(s, b)
            for t in range(s, T):
                prod = 1.0
                for i in range(s, t):
                    prod *= discounts[i, b] * c(i, b)
                delta_t = rho(t, b) * (rewards[t, b] + discounts[t, b] * V(t + 1, b) - V(t, b))
                total += prod * delta_t
            vs[s, b] = total

    pg = np.zeros((T, B), np.float64)
    for b in range(B):
        for s in range(T):
            v_next = bootstrap_value[b] if s + 1 == T else vs[s + 1, b]
            pg[s, b] = pg_rho(s, b) * (rewards[s, b] + discounts[s, b] * v_next - V(s, b))
    return vs, pg


def make_inputs(rng, T, B, gamma=0.9):
    """Random float64 inputs; episode ends (zero discounts) inside the unroll."""
    # rho = exp(log_rho) spans roughly [0.05, 20], straddling 0.5, 1 and 2.
    log_rhos = rng.uniform(-3.0, 3.0, size=(T, B))
    if T * B >= 2:
        # Guarantee both sides of every threshold even for tiny shapes.
        log_rhos.flat[0] = np.log(4.0)
        log_rhos.flat[-1] = np.log(0.25)
    terminated = rng.random((T, B)) < 0.25
    terminated[T // 2, 0] = True
    if T * B >= 2:
        terminated.flat[-1] = False
    return dict(
        log_rhos=log_rhos,
        discounts=gamma * (1.0 - terminated.astype(np.float64)),
        rewards=rng.normal(size=(T, B)),
        values=rng.normal(size=(T, B)),
        bootstrap_value=rng.normal(size=(B,)),
    )


@pytest.mark.parametrize("T,B", SHAPES)
@pytest.mark.parametrize("lambda_", LAMBDAS)
@pytest.mark.parametrize("clip_rho_threshold,clip_pg_rho_threshold", CLIPS)
@pytest.mark.parametrize("mode", ["eager", "tf_function"])
def test_matches_reference(T, B, lambda_, clip_rho_threshold, clip_pg_rho_threshold, mode):
    rng = np.random.default_rng(1234 + 17 * T + B)
    inputs = make_inputs(rng, T, B)

    assert (inputs["discounts"] == 0).any()
    if T * B >= 2:
        assert (inputs["discounts"] > 0).any()
        rhos = np.exp(inputs["log_rhos"])
        for threshold in (1.0, clip_rho_threshold, clip_pg_rho_threshold):
            if threshold is not None:
                assert (rhos < threshold).any() and (rhos > threshold).any()

    kwargs = dict(
        clip_rho_threshold=clip_rho_threshold,
        clip_pg_rho_threshold=clip_pg_rho_threshold,
        lambda_=lambda_,
    )
    expected_vs, expected_pg = reference_vtrace(**inputs, **kwargs)

    fn = vtrace.from_importance_weights
    if mode == "tf_function":
        fn = tf.function(fn)
    out = fn(**inputs, **kwargs)

    assert out.vs.dtype == tf.float64
    assert out.vs.shape == (T, B) and out.pg_advantages.shape == (T, B)
    np.testing.assert_allclose(out.vs.numpy(), expected_vs, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(out.pg_advantages.numpy(), expected_pg, rtol=1e-10, atol=1e-10)


def test_float32_inputs_stay_float32():
    rng = np.random.default_rng(0)
    inputs = {k: v.astype(np.float32) for k, v in make_inputs(rng, 4, 2).items()}
    out = vtrace.from_importance_weights(**inputs)
    assert out.vs.dtype == tf.float32 and out.pg_advantages.dtype == tf.float32
    expected_vs, expected_pg = reference_vtrace(
        **{k: v.astype(np.float64) for k, v in inputs.items()},
        clip_rho_threshold=1.0,
        clip_pg_rho_threshold=1.0,
        lambda_=1.0,
    )
    np.testing.assert_allclose(out.vs.numpy(), expected_vs, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out.pg_advantages.numpy(), expected_pg, rtol=1e-5, atol=1e-5)


def numpy_log_softmax(logits):
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


@pytest.mark.parametrize("T,B", [(1, 1), (5, 3)])
def test_from_logits_matches_from_importance_weights(T, B):
    rng = np.random.default_rng(7)
    num_actions = 4
    inputs = make_inputs(rng, T, B)
    del inputs["log_rhos"]
    behaviour_logits = rng.normal(size=(T, B, num_actions)) * 2.0
    target_logits = rng.normal(size=(T, B, num_actions)) * 2.0
    actions = rng.integers(0, num_actions, size=(T, B))

    take = lambda lp: np.take_along_axis(lp, actions[..., None], axis=-1)[..., 0]  # noqa: E731
    behaviour_lp = take(numpy_log_softmax(behaviour_logits))
    target_lp = take(numpy_log_softmax(target_logits))
    log_rhos = target_lp - behaviour_lp

    kwargs = dict(clip_rho_threshold=2.0, clip_pg_rho_threshold=0.5, lambda_=0.9)
    out = vtrace.from_logits(
        behaviour_policy_logits=behaviour_logits,
        target_policy_logits=target_logits,
        actions=actions,
        **inputs,
        **kwargs,
    )
    ref = vtrace.from_importance_weights(log_rhos=log_rhos, **inputs, **kwargs)

    np.testing.assert_allclose(out.behaviour_action_log_probs.numpy(), behaviour_lp, rtol=1e-10)
    np.testing.assert_allclose(out.target_action_log_probs.numpy(), target_lp, rtol=1e-10)
    np.testing.assert_allclose(out.log_rhos.numpy(), log_rhos, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(out.vs.numpy(), ref.vs.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(
        out.pg_advantages.numpy(), ref.pg_advantages.numpy(), rtol=1e-10, atol=1e-12
    )


def test_on_policy_vs_are_n_step_returns():
    rng = np.random.default_rng(3)
    T, B = 8, 3
    inputs = make_inputs(rng, T, B)
    inputs["log_rhos"] = np.zeros((T, B))
    rewards, discounts = inputs["rewards"], inputs["discounts"]
    values, bootstrap = inputs["values"], inputs["bootstrap_value"]

    # Discounted returns to the end of the unroll, bootstrapped with V(x_T);
    # a zero discount stops both the bootstrap and later rewards.
    returns = np.zeros((T, B))
    for b in range(B):
        g = bootstrap[b]
        for t in reversed(range(T)):
            g = rewards[t, b] + discounts[t, b] * g
            returns[t, b] = g
    next_returns = np.concatenate([returns[1:], bootstrap[None]], axis=0)
    expected_pg = rewards + discounts * next_returns - values

    out = vtrace.from_importance_weights(**inputs, lambda_=1.0)
    np.testing.assert_allclose(out.vs.numpy(), returns, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(out.pg_advantages.numpy(), expected_pg, rtol=1e-10, atol=1e-12)


def test_no_gradient_through_returns():
    rng = np.random.default_rng(5)
    T, B, A = 4, 2, 3
    inputs = {k: tf.constant(v) for k, v in make_inputs(rng, T, B).items()}
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(list(inputs.values()))
        out = vtrace.from_importance_weights(**inputs)
        total = tf.reduce_sum(out.vs) + tf.reduce_sum(out.pg_advantages)
    for name, tensor in inputs.items():
        grad = tape.gradient(total, tensor)
        assert grad is None or not np.any(grad.numpy()), name

    target_logits = tf.constant(rng.normal(size=(T, B, A)))
    kwargs = {k: v for k, v in inputs.items() if k != "log_rhos"}
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(target_logits)
        out = vtrace.from_logits(
            behaviour_policy_logits=rng.normal(size=(T, B, A)),
            target_policy_logits=target_logits,
            actions=rng.integers(0, A, size=(T, B)),
            **kwargs,
        )
        returns_sum = tf.reduce_sum(out.vs) + tf.reduce_sum(out.pg_advantages)
        log_prob_sum = tf.reduce_sum(out.target_action_log_probs)
    grad = tape.gradient(returns_sum, target_logits)
    assert grad is None or not np.any(grad.numpy())
    # The loss needs d log pi / d logits, so that path must stay open.
    grad = tape.gradient(log_prob_sum, target_logits)
    assert grad is not None and np.any(grad.numpy())


def _good_inputs(T=5, B=3):
    return dict(
        log_rhos=np.zeros((T, B)),
        discounts=np.ones((T, B)),
        rewards=np.zeros((T, B)),
        values=np.zeros((T, B)),
        bootstrap_value=np.zeros((B,)),
    )


@pytest.mark.parametrize(
    "name,bad_shape",
    [
        ("log_rhos", (5,)),
        ("log_rhos", (5, 3, 1)),
        ("discounts", (4, 3)),
        ("rewards", (5, 2)),
        ("values", (5,)),
        ("bootstrap_value", (5, 3)),
        ("bootstrap_value", (4,)),
    ],
)
def test_from_importance_weights_bad_shapes(name, bad_shape):
    inputs = _good_inputs()
    inputs[name] = np.zeros(bad_shape)
    with pytest.raises(ValueError, match=rf"^{name} must have shape \[") as info:
        vtrace.from_importance_weights(**inputs)
    assert str(bad_shape) in str(info.value)


def test_bad_shape_message_format():
    inputs = _good_inputs()
    inputs["log_rhos"] = np.zeros((5,))
    with pytest.raises(ValueError) as info:
        vtrace.from_importance_weights(**inputs)
    assert str(info.value) == "log_rhos must have shape [T, B]; got (5,)"


@pytest.mark.parametrize(
    "name,bad_value",
    [
        ("behaviour_policy_logits", np.zeros((5, 3))),
        ("target_policy_logits", np.zeros((5, 3, 2))),  # NUM_ACTIONS mismatch
        ("actions", np.zeros((5, 3, 4), np.int32)),
        ("actions", np.zeros((4, 3), np.int32)),
    ],
)
def test_from_logits_bad_shapes(name, bad_value):
    inputs = _good_inputs()
    del inputs["log_rhos"]
    inputs.update(
        behaviour_policy_logits=np.zeros((5, 3, 4)),
        target_policy_logits=np.zeros((5, 3, 4)),
        actions=np.zeros((5, 3), np.int32),
    )
    inputs[name] = bad_value
    with pytest.raises(ValueError, match=rf"^{name} must have shape \["):
        vtrace.from_logits(**inputs)


def test_unknown_static_dims_are_skipped_under_tf_function():
    # With a [None, None] input signature the shape check cannot see T or B
    # and must let the trace through rather than fail.
    matrix = tf.TensorSpec([None, None], tf.float32)
    vector = tf.TensorSpec([None], tf.float32)
    fn = tf.function(
        lambda lr, d, r, v, bv: vtrace.from_importance_weights(
            log_rhos=lr, discounts=d, rewards=r, values=v, bootstrap_value=bv
        ),
        input_signature=[matrix, matrix, matrix, matrix, vector],
    )
    inputs = [tf.constant(v, tf.float32) for v in _good_inputs(T=7, B=2).values()]
    out = fn(*inputs)
    assert out.vs.shape == (7, 2)


def test_traces_once_for_same_shapes():
    fn = tf.function(vtrace.from_importance_weights)
    rng = np.random.default_rng(11)
    for _ in range(3):
        inputs = {k: tf.constant(v) for k, v in make_inputs(rng, 6, 4).items()}
        fn(**inputs, clip_rho_threshold=1.0, clip_pg_rho_threshold=1.0, lambda_=0.95)
    assert fn.experimental_get_tracing_count() == 1
