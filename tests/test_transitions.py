"""impala_rep.transitions.vtrace_inputs against a step-by-step numpy reference."""

import numpy as np
import pytest
import tensorflow as tf

from impala_rep.transitions import Transitions, vtrace_inputs

T, B = 7, 5


def reference(rewards, terminated, truncated, values, discount, reward_clipping):
    """One transition at a time, written out: clip the reward, add the discounted value of
    the final observation where a time limit cut the episode (not where it terminated),
    zero the discount at any end."""
    out_rewards = np.zeros(rewards.shape, np.float64)
    out_discounts = np.zeros(rewards.shape, np.float64)
    for t in range(rewards.shape[0]):
        for b in range(rewards.shape[1]):
            r = float(rewards[t, b])
            if reward_clipping == "abs_one":
                r = 1.0 if r > 1.0 else (-1.0 if r < -1.0 else r)
            if truncated[t, b] and not terminated[t, b]:
                r += discount * float(values[t, b])
            out_rewards[t, b] = r
            episode_ended = bool(terminated[t, b]) or bool(truncated[t, b])
            out_discounts[t, b] = 0.0 if episode_ended else discount
    return out_rewards, out_discounts


def random_transitions(seed, dtype=np.float32):
    rng = np.random.default_rng(seed)
    rewards = (3 * rng.normal(size=(T, B))).astype(dtype)
    terminated = rng.random((T, B)) < 0.35
    truncated = rng.random((T, B)) < 0.35
    # Every case the discount distinguishes occurs: neither, each alone, both.
    assert {(a, b) for a, b in zip(terminated.ravel(), truncated.ravel())} == {
        (False, False),
        (True, False),
        (False, True),
        (True, True),
    }
    assert np.any(np.abs(rewards) > 1) and np.any(np.abs(rewards) < 1)
    # Values everywhere (beyond [-1, 1], never clipped), though read only where cut.
    values = (10 * rng.normal(size=(T, B))).astype(dtype)
    return rewards, terminated, truncated, values


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "tf.function"])
@pytest.mark.parametrize("reward_clipping", ["abs_one", "none"])
def test_matches_the_step_by_step_reference(compiled, reward_clipping):
    rewards, terminated, truncated, values = random_transitions(3)
    fn = tf.function(vtrace_inputs) if compiled else vtrace_inputs
    out = fn(
        rewards=tf.constant(rewards),
        terminated=tf.constant(terminated),
        truncated=tf.constant(truncated),
        truncation_values=tf.constant(values),
        discount=0.97,
        reward_clipping=reward_clipping,
    )
    assert isinstance(out, Transitions)
    want_rewards, want_discounts = reference(
        rewards, terminated, truncated, values, 0.97, reward_clipping
    )
    assert out.rewards.dtype == out.discounts.dtype == tf.float32
    assert out.rewards.shape == out.discounts.shape == (T, B)
    np.testing.assert_allclose(out.rewards.numpy(), want_rewards, rtol=1e-6)
    np.testing.assert_allclose(out.discounts.numpy(), want_discounts, rtol=1e-6)
    # Nothing flows across any episode end; a cut one bootstraps through its reward.
    assert np.all(out.discounts.numpy()[truncated | terminated] == 0)
    cut = truncated & ~terminated  # the bootstrapped ones (the reference adds their values)
    assert cut.any() and not np.allclose(want_rewards[cut], np.clip(rewards[cut], -1, 1))
    if reward_clipping == "none":
        np.testing.assert_array_equal(out.rewards.numpy()[~cut], rewards[~cut])


def test_float64_stays_float64_and_numpy_input_works():
    rewards, terminated, truncated, values = random_transitions(4, np.float64)
    discount = 0.7  # not exact in float32: the discount must be converted straight to float64
    out = vtrace_inputs(
        rewards=rewards,
        terminated=terminated,
        truncated=truncated,
        truncation_values=values,
        discount=discount,
        reward_clipping="abs_one",
    )
    assert out.rewards.dtype == out.discounts.dtype == tf.float64
    want_rewards, want_discounts = reference(
        rewards, terminated, truncated, values, discount, "abs_one"
    )
    np.testing.assert_allclose(out.rewards.numpy(), want_rewards, rtol=1e-15)
    np.testing.assert_array_equal(out.discounts.numpy(), want_discounts)


@pytest.mark.parametrize(
    "name, shape, match",
    [
        ("rewards", (T,), r"rewards must have shape \[T, B\]; got \(7,\)"),
        ("rewards", (T, B, 1), r"rewards must have shape \[T, B\]"),
        (
            "terminated",
            (T + 1, B),
            r"terminated must have shape \[T, B\]; got \(8, 5\) \(T=7 from rewards\)",
        ),
        (
            "truncated",
            (T, B + 1),
            r"truncated must have shape \[T, B\]; got \(7, 6\) \(B=5 from rewards\)",
        ),
        ("truncation_values", (T, 1), r"truncation_values must have shape \[T, B\]; got \(7, 1\)"),
    ],
)
def test_bad_shapes_raise(name, shape, match):
    args = dict(
        rewards=np.zeros((T, B), np.float32),
        terminated=np.zeros((T, B), bool),
        truncated=np.zeros((T, B), bool),
        truncation_values=np.zeros((T, B), np.float32),
    )
    args[name] = np.zeros(shape, args[name].dtype)
    with pytest.raises(ValueError, match=match):
        vtrace_inputs(**args, discount=0.99, reward_clipping="abs_one")
    # Under tf.function the static shapes are checked while tracing.
    with pytest.raises(ValueError, match=match):
        tf.function(vtrace_inputs)(
            **{k: tf.constant(v) for k, v in args.items()}, discount=0.99, reward_clipping="abs_one"
        )


def test_unknown_reward_clipping_raises():
    with pytest.raises(
        ValueError, match=r"bad reward_clipping 'clip': must be 'abs_one' or 'none'"
    ):
        vtrace_inputs(
            rewards=np.zeros((T, B)),
            terminated=np.zeros((T, B), bool),
            truncated=np.zeros((T, B), bool),
            truncation_values=np.zeros((T, B)),
            discount=0.99,
            reward_clipping="clip",
        )


def test_arguments_are_keyword_only():
    with pytest.raises(TypeError):
        vtrace_inputs(
            np.zeros((T, B)),
            np.zeros((T, B), bool),
            np.zeros((T, B), bool),
            np.zeros((T, B)),
            0.99,
            "none",
        )
