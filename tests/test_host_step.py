"""Actors act with an agent's numpy `host_step` where it has one (`actors/actor.py`): it must
be its compiled `step`, and the actor's sampling from it the agent's policy; a Gaussian
policy's log-stds, the last weight, start where the config says."""

import numpy as np
import pytest
import tensorflow as tf

from impala_rep.actors.actor import Actor
from impala_rep.agent import AgentInputs, MLPAgent
from impala_rep.envs import make_vector_env
from impala_rep.host_mlp import MLPHostAgent
from impala_rep.rnd import RNDAgent


@pytest.mark.parametrize(
    "hidden_sizes, normalization, separate, value_sizes",
    [
        ((64, 64), None, False, None),
        ((7,), ((0.5, -1.0, 0.0), (2.0, 0.25, 1.0)), False, None),
        ((16, 8, 4), None, False, None),
        ((16, 8), ((0.5, -1.0, 0.0), (2.0, 0.25, 1.0)), True, None),
        ((16, 8), None, True, (32, 24, 12)),  # a value network of other sizes
    ],
)
def test_host_step_is_the_compiled_step(hidden_sizes, normalization, separate, value_sizes):
    rng = np.random.default_rng(0)
    agent = MLPAgent(
        num_actions=5,
        hidden_sizes=hidden_sizes,
        observation_normalization=normalization,
        separate_value_network=separate,
        value_hidden_sizes=value_sizes,
    )
    agent.build([3])
    twin = MLPHostAgent(
        num_actions=5,
        hidden_sizes=hidden_sizes,
        separate_value_network=separate,
        value_hidden_sizes=value_sizes,
    )
    assert [w.shape for w in agent.get_weights()] == twin.weight_shapes([3])
    weights = [rng.normal(size=w.shape).astype(np.float32) for w in agent.get_weights()]
    agent.set_weights(weights)
    observation = rng.normal(size=(32, 3)).astype(np.float32)
    inputs = AgentInputs(
        observation, np.zeros(32, np.int32), np.zeros(32, np.float32), np.zeros(32, bool)
    )
    compiled, _ = tf.function(agent.step)(inputs, ())
    host = agent.host_step(weights, inputs)
    np.testing.assert_allclose(host.policy_logits, compiled.policy_logits, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(host.baseline, compiled.baseline, rtol=1e-4, atol=1e-4)
    assert host.policy_logits.shape == (32, 5) and host.baseline.shape == (32,)


def test_rnd_agent_acts_with_its_policys_host_step():
    policy = MLPAgent(num_actions=2)
    assert RNDAgent(policy).host_step == policy.host_step


def bias_only_actor(bias, *, greedy=False, num_envs=64, seed=0):
    env = make_vector_env("CartPole-v1", num_envs=num_envs, seed=seed)
    agent = MLPAgent(num_actions=2, hidden_sizes=(4,))
    actor = Actor(env=env, agent=agent, unroll_length=50, seed=seed, greedy=greedy)
    weights = [np.zeros_like(w) for w in agent.get_weights()]
    weights[-3] = np.asarray(bias, np.float32)  # the policy head's bias
    actor.set_weights(weights, version=2)
    return actor


def test_actions_are_sampled_from_the_softmax_of_the_logits():
    actor = bias_only_actor([0.0, np.log(3.0)])  # P(action 1) = 3/4
    unroll, _ = actor.unroll()
    np.testing.assert_allclose(
        unroll.behaviour_logits, np.broadcast_to([0.0, np.log(3.0)], (50, 64, 2)), rtol=1e-6
    )
    share = unroll.actions.mean()  # 3,200 draws: standard error ~0.008
    assert 0.72 < share < 0.78, share
    again, _ = bias_only_actor([0.0, np.log(3.0)]).unroll()  # same seed: same draws
    np.testing.assert_array_equal(again.actions, unroll.actions)
    other, _ = bias_only_actor([0.0, np.log(3.0)], seed=1).unroll()
    assert (other.actions != unroll.actions).any()


def test_greedy_actors_take_the_most_probable_action():
    unroll, _ = bias_only_actor([0.3, 0.2], greedy=True).unroll()
    np.testing.assert_array_equal(unroll.actions, 0)


def test_weights_that_do_not_fit_the_agent_are_refused():
    actor = bias_only_actor([0.0, 0.0])
    with pytest.raises(ValueError, match="expected 6 weight arrays, got 5"):
        actor.set_weights([np.zeros(1)] * 5, version=3)
    with pytest.raises(ValueError, match=r"weight of shape \(5, 4\) where the agent has \(4, 4\)"):
        actor.set_weights([np.zeros((5, 4))] + [np.zeros(1)] * 5, version=3)
    assert actor.policy_version == 2


def test_a_gaussian_mlps_host_step_is_its_compiled_step_and_its_twins_layout():
    from impala_rep.distributions import DiagGaussian
    from impala_rep.host_mlp import MLPHostAgent

    rng = np.random.default_rng(1)
    gaussian = DiagGaussian([-2.0, -1.0], [2.0, 1.0])
    agent = MLPAgent(num_actions=4, hidden_sizes=(8,), action_distribution=gaussian)
    agent.build([3])
    weights = [rng.normal(size=w.shape).astype(np.float32) for w in agent.get_weights()]
    assert weights[-1].shape == (2,)  # the log-stds, one per dimension, last
    agent.set_weights(weights)
    twin = MLPHostAgent(num_actions=4, hidden_sizes=(8,), action_distribution=gaussian)
    assert twin.weight_shapes([3]) == [w.shape for w in weights]
    observation = rng.normal(size=(16, 3)).astype(np.float32)
    inputs = AgentInputs(
        observation, np.zeros((16, 2), np.float32), np.zeros(16, np.float32), np.zeros(16, bool)
    )
    compiled, _ = tf.function(agent.step)(inputs, ())
    host = twin.host_step(weights, inputs)
    np.testing.assert_allclose(host.policy_logits, compiled.policy_logits, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(host.baseline, compiled.baseline, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(host.policy_logits[:, 2:], np.broadcast_to(weights[-1], (16, 2)))


def test_an_mlp_refuses_a_distribution_of_other_size():
    from impala_rep.distributions import DiagGaussian

    with pytest.raises(ValueError, match="num_actions must be the distribution's 2 parameters"):
        MLPAgent(num_actions=3, action_distribution=DiagGaussian([-1.0], [1.0]))


def test_gaussian_actions_are_sampled_around_the_mean_and_clipped_for_the_env_only():
    from impala_rep.distributions import DiagGaussian

    env = make_vector_env("Pendulum-v1", num_envs=64, seed=0)
    gaussian = DiagGaussian([-2.0], [2.0])
    agent = MLPAgent(num_actions=2, hidden_sizes=(4,), action_distribution=gaussian)
    actor = Actor(env=env, agent=agent, unroll_length=50, seed=0)
    weights = [np.zeros_like(w) for w in agent.get_weights()]
    weights[-4] = np.asarray([1.5], np.float32)  # the mean head's bias (then the baseline's two)
    weights[-1] = np.asarray([np.log(0.5)], np.float32)  # std 0.5
    actor.set_weights(weights, version=1)
    unroll, _ = actor.unroll()
    assert unroll.actions.dtype == np.float32 and unroll.actions.shape == (50, 64, 1)
    assert unroll.prev_actions.shape == (51, 64, 1)
    np.testing.assert_array_equal(unroll.prev_actions[1:], unroll.actions)  # no episode ends
    np.testing.assert_allclose(
        unroll.behaviour_logits, np.broadcast_to([1.5, np.log(0.5)], (50, 64, 2)), rtol=1e-6
    )
    # 3,200 draws of N(1.5, 0.5): the recorded (unclipped) actions keep their spread.
    assert abs(unroll.actions.mean() - 1.5) < 0.05 and abs(unroll.actions.std() - 0.5) < 0.05
    assert (unroll.actions > 2.0).mean() > 0.1  # beyond the bound: the env got 2.0 for them
    greedy = Actor(
        env=make_vector_env("Pendulum-v1", num_envs=4, seed=0),
        agent=agent,
        unroll_length=3,
        seed=0,
        greedy=True,
    )
    greedy.set_weights(weights, version=1)
    np.testing.assert_array_equal(greedy.unroll()[0].actions, np.full((3, 4, 1), 1.5, np.float32))


def test_multi_discrete_actions_are_one_categorical_sample_per_entry():
    from impala_rep.distributions import MultiCategorical

    env = make_vector_env("action_spaces_env:MultiDiscreteCartPole-v0", num_envs=64, seed=0)
    agent = MLPAgent(num_actions=5, hidden_sizes=(4,), action_distribution=MultiCategorical([2, 3]))
    actor = Actor(env=env, agent=agent, unroll_length=20, seed=0)
    weights = [np.zeros_like(w) for w in agent.get_weights()]
    weights[-3] = np.log(np.asarray([1, 3, 1, 1, 2], np.float32))  # P = (1/4, 3/4), (1/4, 1/4, 1/2)
    actor.set_weights(weights, version=1)
    unroll, _ = actor.unroll()
    assert unroll.actions.dtype == np.int32 and unroll.actions.shape == (20, 64, 2)
    first, second = unroll.actions[..., 0], unroll.actions[..., 1]  # 1,280 draws each
    assert abs(first.mean() - 0.75) < 0.05
    assert abs((second == 2).mean() - 0.5) < 0.05 and abs((second == 0).mean() - 0.25) < 0.05


@pytest.mark.parametrize("use_lstm", [False, True])
def test_the_log_stds_start_where_the_config_says(use_lstm):
    """`--initial-log-std` reaches the built-in agents (MLP and its LSTM form) through the run's
    agent factory: their last weight, the log standard deviations, starts there relative to
    the action's half range (Pendulum's [-2, 2]: log 2 added)."""
    from impala_rep.config import TrainConfig
    from impala_rep.envs import describe_env
    from impala_rep.run.agents import builtin_agent_factory

    env_spec = describe_env("Pendulum-v1")
    config = TrainConfig.from_keys({"initial_log_std": -1.5, "use_lstm": use_lstm})
    agent = builtin_agent_factory(config, env_spec)()
    agent.build(env_spec.observation_shape)
    np.testing.assert_allclose(agent.get_weights()[-1], [-1.5 + np.log(2.0)], rtol=1e-6)
    default = builtin_agent_factory(TrainConfig(), env_spec)()  # auto, unresolved: 0
    default.build(env_spec.observation_shape)
    np.testing.assert_allclose(default.get_weights()[-1], [np.log(2.0)], rtol=1e-6)


def test_a_separate_value_network_leaves_the_policy_to_its_own_torso():
    """With `--separate-value-network` the value head reads a torso of its own: changing the
    value torso's weights moves the baseline and not the policy; the acting twin lists the
    same weight shapes as the agent."""
    from impala_rep.agent_factory import acting_agent, make_agent

    builder = make_agent(
        observation_shape=[3], num_actions=2, hidden_sizes=(8, 4), separate_value_network=True
    )
    agent = builder()
    agent.build([3])
    weights = agent.get_weights()
    assert [w.shape for w in weights] == acting_agent(builder).weight_shapes([3])
    assert len(weights) == 2 * 2 * 2 + 4  # two torsos of two layers, two heads
    rng = np.random.default_rng(1)
    weights = [rng.normal(size=w.shape).astype(np.float32) for w in weights]
    inputs = AgentInputs(
        rng.normal(size=(6, 3)).astype(np.float32),
        np.zeros(6, np.int32),
        np.zeros(6, np.float32),
        np.zeros(6, bool),
    )
    before = agent.host_step(weights, inputs)
    weights[4] = weights[4] + 1.0  # the value torso's first kernel
    after = agent.host_step(weights, inputs)
    np.testing.assert_array_equal(after.policy_logits, before.policy_logits)
    assert np.abs(after.baseline - before.baseline).max() > 0.1


def test_the_value_networks_own_sizes_reach_the_run_agent_and_its_twin():
    """`--value-hidden-sizes` through the run's agent factory: the learner's agent and the
    actors' twin both have a value network of those sizes beside the policy's."""
    from impala_rep.agent_factory import acting_agent
    from impala_rep.config import TrainConfig
    from impala_rep.envs import describe_env
    from impala_rep.run.agents import builtin_agent_factory

    env_spec = describe_env("Pendulum-v1")  # observations [3], one action dimension
    config = TrainConfig.from_keys(
        {"hidden_sizes": (8,), "separate_value_network": True, "value_hidden_sizes": (16, 4)}
    )
    builder = builtin_agent_factory(config, env_spec)
    agent = builder()
    agent.build(env_spec.observation_shape)
    shapes = [w.shape for w in agent.get_weights()]
    assert shapes == [(3, 8), (8,), (3, 16), (16,), (16, 4), (4,), (8, 1), (1,), (4, 1), (1,), (1,)]
    assert shapes == acting_agent(builder).weight_shapes(env_spec.observation_shape)
