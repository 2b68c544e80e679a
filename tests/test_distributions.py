"""Action distributions against slow references: log-probabilities element by element in
plain Python, entropies and KLs by enumerating every joint action (categoricals) or by
Monte Carlo (Gaussians); the actors' numpy side against the learner's TensorFlow side."""

import itertools
import math

import gymnasium as gym
import numpy as np
import pytest
import tensorflow as tf

from impala_rep.distributions import (
    Categorical,
    DiagGaussian,
    MultiCategorical,
    for_action_space,
)

T, B = 3, 4


def _softmax(row):
    top = max(row)
    exps = [math.exp(x - top) for x in row]
    return [e / sum(exps) for e in exps]


def _joint(distribution, params_row):
    """Every joint action of a (multi-)categorical and its probability, in Python."""
    if isinstance(distribution, Categorical):
        return [((a,), p) for a, p in enumerate(_softmax(params_row))]
    blocks, start = [], 0
    for n in distribution.nvec:
        blocks.append(_softmax(params_row[start : start + n]))
        start += n
    return [
        (actions, math.prod(block[a] for block, a in zip(blocks, actions)))
        for actions in itertools.product(*(range(n) for n in distribution.nvec))
    ]


CATEGORICALS = [Categorical(5), MultiCategorical([3, 2, 4])]


def _random_params(distribution, rng, scale=2.0):
    return (scale * rng.normal(size=(T, B, distribution.num_params))).astype(np.float32)


def _random_actions(distribution, rng):
    if isinstance(distribution, Categorical):
        return rng.integers(0, distribution.num_actions, (T, B)).astype(np.int32)
    return np.stack([rng.integers(0, n, (T, B)) for n in distribution.nvec], -1).astype(np.int32)


@pytest.mark.parametrize("distribution", CATEGORICALS, ids=repr)
def test_categorical_log_prob_entropy_and_kl_match_enumeration(distribution):
    rng = np.random.default_rng(0)
    p, q = _random_params(distribution, rng), _random_params(distribution, rng)
    actions = _random_actions(distribution, rng)
    log_prob = distribution.log_prob(p, actions).numpy()
    entropy = distribution.entropy(p).numpy()
    kl = distribution.kl(p, q).numpy()
    assert log_prob.shape == entropy.shape == kl.shape == (T, B)
    for t, b in itertools.product(range(T), range(B)):
        joint_p = dict(_joint(distribution, [float(x) for x in p[t, b]]))
        joint_q = dict(_joint(distribution, [float(x) for x in q[t, b]]))
        taken = tuple(np.atleast_1d(actions[t, b]).tolist())
        assert log_prob[t, b] == pytest.approx(math.log(joint_p[taken]), rel=1e-5, abs=1e-5)
        expected_entropy = -sum(pr * math.log(pr) for pr in joint_p.values())
        assert entropy[t, b] == pytest.approx(expected_entropy, rel=1e-5, abs=1e-5)
        expected_kl = sum(pr * math.log(pr / joint_q[a]) for a, pr in joint_p.items())
        assert kl[t, b] == pytest.approx(expected_kl, rel=1e-4, abs=1e-5)


def test_gaussian_log_prob_matches_the_density_dimension_by_dimension():
    rng = np.random.default_rng(1)
    distribution = DiagGaussian([-1.0, -2.0, 0.0], [1.0, 2.0, 5.0])
    params = _random_params(distribution, rng, scale=0.7)
    actions = rng.normal(size=(T, B, 3)).astype(np.float32)
    log_prob = distribution.log_prob(params, actions).numpy()
    assert log_prob.shape == (T, B)
    for t, b in itertools.product(range(T), range(B)):
        expected = 0.0
        for d in range(3):
            mean, sigma = float(params[t, b, d]), math.exp(float(params[t, b, 3 + d]))
            density = math.exp(-0.5 * ((float(actions[t, b, d]) - mean) / sigma) ** 2) / (
                sigma * math.sqrt(2 * math.pi)
            )
            expected += math.log(density)
        assert log_prob[t, b] == pytest.approx(expected, rel=1e-5, abs=1e-5)


def test_gaussian_entropy_and_kl_match_monte_carlo_estimates():
    rng = np.random.default_rng(2)
    distribution = DiagGaussian([-1.0, -1.0], [1.0, 1.0])
    p = np.array([0.3, -0.5, -0.2, 0.4], np.float32)  # means, then log-stds
    q = np.array([-0.1, 0.2, 0.1, -0.3], np.float32)
    samples = distribution.sample(np.tile(p, (200_000, 1)), rng)
    log_p = distribution.log_prob_numpy(np.tile(p, (len(samples), 1)), samples)
    log_q = distribution.log_prob_numpy(np.tile(q, (len(samples), 1)), samples)
    # Estimates within 4 standard errors (the draws' own spread).
    for exact, draws in (
        (float(distribution.entropy(p[None]).numpy()[0]), -log_p),
        (float(distribution.kl(p[None], q[None]).numpy()[0]), log_p - log_q),
    ):
        assert abs(exact - draws.mean()) < 4 * draws.std() / math.sqrt(len(draws))


ALL = [*CATEGORICALS, DiagGaussian([-2.0, 0.0], [2.0, 1.0])]


@pytest.mark.parametrize("distribution", ALL, ids=repr)
def test_the_actors_numpy_side_agrees_with_the_learners(distribution):
    rng = np.random.default_rng(3)
    params = _random_params(distribution, rng)[0]  # [E, num_params]
    actions = distribution.sample(params, rng)
    assert actions.shape == (B, *distribution.action_shape)
    assert actions.dtype == distribution.action_dtype
    np.testing.assert_allclose(
        distribution.log_prob_numpy(params, actions),
        distribution.log_prob(params, actions).numpy(),
        rtol=1e-5,
        atol=1e-5,
    )
    np.testing.assert_array_equal(distribution.mode(params), distribution.mode_tf(params).numpy())
    drawn = distribution.sample_tf(params, tf.constant([1, 2])).numpy()
    assert drawn.shape == actions.shape and drawn.dtype == distribution.action_dtype


@pytest.mark.parametrize("distribution", ALL, ids=repr)
def test_samples_follow_the_distribution_on_both_sides(distribution):
    """The empirical log-likelihood of many draws is the distribution's negative entropy,
    for numpy's sampler and TensorFlow's alike (a sampler that ignores the parameters, or
    draws from another distribution, lands far from it)."""
    rng = np.random.default_rng(4)
    params = np.tile(_random_params(distribution, rng, scale=1.0)[0, :1], (50_000, 1))
    expected = -float(distribution.entropy(params[:1]).numpy()[0])
    for actions in (
        distribution.sample(params, rng),
        distribution.sample_tf(params, tf.constant([5, 6])).numpy(),
    ):
        log_p = distribution.log_prob_numpy(params, actions)
        assert abs(log_p.mean() - expected) < 4 * log_p.std() / math.sqrt(len(log_p)) + 1e-6


def test_modes_are_the_most_probable_actions():
    logits = np.array([[0.1, 2.0, -1.0, 0.5, 1.9, 0.0]], np.float32)
    assert MultiCategorical([2, 4]).mode(logits).tolist() == [[1, 2]]
    assert Categorical(6).mode(logits).tolist() == [1]
    gaussian = DiagGaussian([-1, -1, -1], [1, 1, 1])
    np.testing.assert_array_equal(gaussian.mode(logits), logits[:, :3])


def test_a_gaussian_action_reaches_the_env_clipped_to_the_bounds():
    gaussian = DiagGaussian([-1.0, 0.0], [1.0, 2.0])
    clipped = gaussian.to_env(np.array([[-3.0, 0.5], [0.2, 7.0]], np.float32))
    np.testing.assert_array_equal(clipped, np.float32([[-1.0, 0.5], [0.2, 2.0]]))


def test_gradients_flow_to_every_parameter():
    rng = np.random.default_rng(5)
    for distribution in ALL:
        params = tf.Variable(_random_params(distribution, rng))
        actions = _random_actions(distribution, rng) if distribution in CATEGORICALS else None
        if actions is None:
            actions = rng.normal(size=(T, B, distribution.dim)).astype(np.float32)
        with tf.GradientTape() as tape:
            total = tf.reduce_sum(distribution.log_prob(params, actions)) + tf.reduce_sum(
                distribution.entropy(params)
            )
        grad = tape.gradient(total, params).numpy()
        assert np.all(np.isfinite(grad)) and np.all(np.abs(grad).sum(axis=(0, 1)) > 0)


@pytest.mark.parametrize(
    ("space", "expected"),
    [
        (gym.spaces.Discrete(4), "Categorical(4)"),
        (gym.spaces.MultiDiscrete([3, 5]), "MultiCategorical([3, 5])"),
        (gym.spaces.Box(-2.0, 2.0, (2,)), "DiagGaussian(low=[-2.0, -2.0], high=[2.0, 2.0])"),
    ],
)
def test_each_supported_space_gets_its_distribution(space, expected):
    assert repr(for_action_space(space)) == expected


@pytest.mark.parametrize(
    ("space", "named"),
    [
        (gym.spaces.Box(-np.inf, np.inf, (2,)), "infinite bound"),
        (gym.spaces.Box(-1.0, 1.0, (2, 2)), "shape (2, 2)"),
        (gym.spaces.Discrete(3, start=1), "starts at 1"),
        (gym.spaces.MultiBinary(3), "MultiBinary"),
        (gym.spaces.Text(5), "Text"),
    ],
)
def test_other_spaces_are_refused_naming_the_space_and_what_is_allowed(space, named):
    with pytest.raises(ValueError, match="allowed: Discrete, MultiDiscrete") as err:
        for_action_space(space)
    assert named in str(err.value)


@pytest.mark.parametrize(
    "make",
    [
        lambda: Categorical(0),
        lambda: Categorical(2.0),
        lambda: MultiCategorical([]),
        lambda: MultiCategorical([2, True]),
        lambda: DiagGaussian([1.0], [1.0]),
        lambda: DiagGaussian([0.0, 0.0], [1.0]),
    ],
)
def test_bad_constructor_arguments_are_refused(make):
    with pytest.raises(ValueError):
        make()


def test_parameters_of_the_wrong_width_are_refused():
    with pytest.raises(ValueError, match="4 entries"):
        DiagGaussian([-1, -1], [1, 1]).log_prob(np.zeros((2, 3), np.float32), np.zeros((2, 2)))
