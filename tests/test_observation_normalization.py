"""Running observation normalisation (impala_rep/observation_normalization.py): the statistics
against numpy over uneven batches, the actors' numpy twin against the compiled agent, the
learner's step against the loss on hand-normalised observations, and what is refused.

Two replicas against one, and the statistics after several learner steps against numpy, are
in tests/test_loss_fn.py; a run trained, resumed and evaluated with it, in
tests/test_action_spaces.py."""

import functools
import pathlib

import numpy as np
import pytest
import tensorflow as tf
from random_unrolls import random_unroll

from impala_rep import Learner, LossConfig, MLPAgent, Replicator, make_agent, wrap_extensions
from impala_rep.agent import AgentInputs
from impala_rep.agent_factory import acting_agent
from impala_rep.distributions import DiagGaussian
from impala_rep.extensions import ObservationNormalization, extensions_for
from impala_rep.observation_normalization import (
    HostNormalizingAgent,
    NormalizingAgent,
    normalized,
    normalizing_loss_fn,
    updated_statistics,
)

OBS = 3


def test_statistics_are_the_mean_and_variance_of_every_observation_folded_in():
    rng = np.random.default_rng(0)
    statistics = np.stack([np.zeros(OBS), np.zeros(OBS), np.ones(OBS)]).astype(np.float32)
    seen = []
    for size, scale, shift in [(7, 1.0, 0.0), (50, 30.0, 100.0), (1, 0.1, -5.0), (400, 2.0, 3.0)]:
        batch = (rng.normal(size=(size, OBS)) * scale + shift).astype(np.float32)
        seen.append(batch)
        statistics = updated_statistics(
            statistics=statistics,
            batch_mean=batch.mean(0),
            batch_variance=batch.var(0),
            batch_count=size,
        ).numpy()
        every = np.concatenate(seen)
        np.testing.assert_allclose(statistics[0], len(every))
        np.testing.assert_allclose(statistics[1], every.mean(0), rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(statistics[2], every.var(0), rtol=1e-4)


def test_normalised_observations_are_standardised_then_clipped():
    statistics = np.array([[10.0] * 2, [1.0, -2.0], [4.0, 0.0]], np.float32)
    x = np.array([[3.0, -2.0], [101.0, -1.0]], np.float32)
    out = normalized(x, statistics, clip=5.0)
    # (3 - 1) / 2 = 1; a dimension that never varied keeps its offset from the mean, unscaled
    # but for the epsilon, which here is enough to reach the clip.
    np.testing.assert_allclose(out, [[1.0, 0.0], [5.0, 5.0]])


def _inputs(observation):
    n = len(observation)
    return AgentInputs(
        observation, np.zeros((n, 2), np.float32), np.zeros(n, np.float32), np.zeros(n, bool)
    )


@pytest.mark.parametrize("distribution", [None, DiagGaussian([-1.0], [1.0])])
def test_the_actors_twin_acts_as_the_compiled_agent(distribution):
    num_actions = 3 if distribution is None else 2
    builder = make_agent(
        observation_shape=(OBS,),
        num_actions=num_actions,
        hidden_sizes=(8,),
        action_distribution=distribution,
    )
    wrapped, _ = wrap_extensions(
        [ObservationNormalization(clip=3.0)], agent_factory=builder, loss=None
    )
    agent, twin = wrapped(), acting_agent(wrapped)
    assert twin.is_acting_twin and twin.num_actions == num_actions
    agent.build((OBS,))
    rng = np.random.default_rng(2)
    weights = [rng.normal(size=w.shape).astype(np.float32) for w in agent.get_weights()]
    weights[-1] = np.array([[50.0] * OBS, [5.0, -1.0, 0.0], [9.0, 0.01, 1.0]], np.float32)
    agent.set_weights(weights)
    assert twin.weight_shapes((OBS,)) == [w.shape for w in weights]
    observation = (rng.normal(size=(32, OBS)) * [3.0, 0.1, 1.0] + [5.0, -1.0, 0.0]).astype(
        np.float32
    )
    compiled, _ = tf.function(agent.step)(_inputs(observation), ())
    host = twin.host_step(weights, _inputs(observation))
    np.testing.assert_allclose(host.policy_logits, compiled.policy_logits, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(host.baseline, compiled.baseline, rtol=1e-4, atol=1e-4)


class _IdentityTwin:
    """A policy twin that returns the observations it is given: what the normalising twin fed it."""

    num_actions = 2

    def weight_shapes(self, observation_shape):
        return []

    def host_step(self, weights, inputs):
        assert weights == []
        return inputs.observation


def test_a_nest_of_vectors_keeps_statistics_per_part_in_the_agent_and_its_twin():
    """A `Dict` of vectors given to a user's agent: each part standardised by its own
    statistics (against numpy over every observation folded in), published after the policy's
    weights in key order, and the actors' twin normalising as the compiled agent does."""
    import importlib.util

    example = pathlib.Path(__file__).parents[1] / "examples" / "dict_observation_agent.py"
    spec = importlib.util.spec_from_file_location("dict_observation_agent", example)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    make_nest_agent = module.make_agent

    shape = {"b": (2,), "a": (3,)}  # built from an unsorted dict: the order is the keys'
    agent = NormalizingAgent(make_nest_agent(observation_shape=shape, num_actions=2), clip=3.0)
    agent.build(shape)
    rng = np.random.default_rng(3)
    seen = {"a": [], "b": []}
    for size, scale, shift in [(5, 1.0, 0.0), (40, 20.0, 50.0), (300, 2.0, -3.0)]:
        batch = {
            key: (rng.normal(size=(size, 2, width)) * scale + shift).astype(np.float32)
            for key, width in (("a", 3), ("b", 2))
        }
        agent.update_statistics(batch)
        for key in seen:
            seen[key].append(batch[key].reshape(-1, batch[key].shape[-1]))
    weights = agent.get_weights()
    for key, statistics in zip(("a", "b"), weights[-2:], strict=True):
        every = np.concatenate(seen[key])
        np.testing.assert_allclose(statistics[0], len(every))
        np.testing.assert_allclose(statistics[1], every.mean(0), rtol=1e-4, atol=1e-3)
        np.testing.assert_allclose(statistics[2], every.var(0), rtol=1e-3)
    assert float(agent.observation_count) == len(np.concatenate(seen["a"]))

    observation = {
        "a": (rng.normal(size=(16, 3)) * 30.0 + 40.0).astype(np.float32),
        "b": rng.normal(size=(16, 2)).astype(np.float32),
    }
    compiled = agent.normalize(observation)
    for key, statistics in zip(("a", "b"), weights[-2:], strict=True):
        np.testing.assert_allclose(
            compiled[key], normalized(observation[key], statistics, clip=3.0), rtol=1e-5, atol=1e-5
        )
    twin = HostNormalizingAgent(_IdentityTwin(), clip=3.0)
    assert twin.weight_shapes(shape) == [(3, 3), (3, 2)]
    host = twin.host_step(weights[-2:], _inputs(observation))
    for key in ("a", "b"):
        np.testing.assert_allclose(host[key], compiled[key], rtol=1e-5, atol=1e-5)

    # The weights round-trip into a new agent, each part's statistics to its own variable.
    other = NormalizingAgent(make_nest_agent(observation_shape=shape, num_actions=2), clip=3.0)
    other.build(shape)
    other.set_weights(weights)
    for mine, theirs in zip(other.get_weights(), weights, strict=True):
        np.testing.assert_array_equal(mine, theirs)


def test_a_nest_with_an_image_is_refused():
    with pytest.raises(ValueError, match=r"needs vector observations \(or a nest of vectors\)"):
        NormalizingAgent(MLPAgent(num_actions=2), clip=10.0).build(
            {"image": (5, 5, 3), "state": (4,)}
        )


def _learner(agent, loss_fn, extensions):
    return Learner(
        agent=agent,
        replicator=Replicator("cpu"),
        observation_shape=(OBS,),
        total_steps=4,
        make_optimizer=lambda: tf.keras.optimizers.SGD(0.01),
        loss_fn=loss_fn,
        extensions=extensions,
    )


def test_a_learner_step_trains_the_policy_on_normalised_observations():
    """The step's loss is the IMPALA loss of the policy alone on observations normalised by the
    statistics before the step (the identity at first, then the first batch's)."""
    extensions = extensions_for(LossConfig(normalize_observations=True, normalize_rewards=False))
    agent = NormalizingAgent(MLPAgent(num_actions=2, hidden_sizes=(8,)), clip=10.0)
    learner = _learner(agent, normalizing_loss_fn, extensions)
    batches = [random_unroll(T=4, B=3, obs_size=OBS, num_actions=2, seed=s) for s in range(2)]
    batches = [b._replace(observations=b.observations * 4.0 + 7.0) for b in batches]
    plain = MLPAgent(num_actions=2, hidden_sizes=(8,))
    reference = _learner(plain, None, ())
    for i, batch in enumerate(batches):
        reference.agent.set_weights(learner.get_weights()[1][:-1])
        statistics = learner.get_weights()[1][-1]
        by_hand = batch._replace(
            observations=normalized(batch.observations, statistics, clip=10.0).astype(np.float32)
        )
        metrics = learner.step(batch)
        expected = reference.step(by_hand)
        assert metrics["observation_count"] == i * 4 * 3
        assert metrics["loss"] == pytest.approx(expected["loss"], rel=1e-5)
        np.testing.assert_allclose(
            learner.get_weights()[1][:-1][0], reference.get_weights()[1][0], rtol=1e-5, atol=1e-6
        )


def test_a_learner_refuses_a_loss_without_it():
    extensions = extensions_for(LossConfig(normalize_observations=True))
    batch = random_unroll(T=2, B=2, obs_size=OBS, num_actions=2)
    for agent in (MLPAgent(num_actions=2), NormalizingAgent(MLPAgent(num_actions=2), clip=10.0)):
        with pytest.raises(ValueError, match="does not update the statistics"):
            _learner(agent, None, extensions).step(batch)


def test_image_observations_are_refused():
    class Images:
        observation_shape = (10, 10, 4)

    with pytest.raises(
        ValueError,
        match=r"needs vector observations \(or a nest of vectors\), got shape \(10, 10, 4\)",
    ):
        extensions_for(LossConfig(normalize_observations=True), Images())


def test_the_wrapped_builders_pickle():
    import pickle

    builder = functools.partial(MLPAgent, num_actions=2)
    wrapped, loss = wrap_extensions([ObservationNormalization()], agent_factory=builder, loss=None)
    assert type(pickle.loads(pickle.dumps(wrapped))()).__name__ == "NormalizingAgent"
    assert pickle.loads(pickle.dumps(loss)).func.__name__ == "_normalizing_loss"
