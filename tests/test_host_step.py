"""Actors act with an agent's numpy `host_step` where it has one (`actors/actor.py`): it must
be its compiled `step`, and the actor's sampling from it the agent's categorical policy."""

import numpy as np
import pytest
import tensorflow as tf

from impala_rep.actors.actor import Actor
from impala_rep.agent import AgentInputs, MLPAgent
from impala_rep.envs import make_vector_env
from impala_rep.rnd import RNDAgent


@pytest.mark.parametrize(
    "hidden_sizes, normalization",
    [((64, 64), None), ((7,), ((0.5, -1.0, 0.0), (2.0, 0.25, 1.0))), ((16, 8, 4), None)],
)
def test_host_step_is_the_compiled_step(hidden_sizes, normalization):
    rng = np.random.default_rng(0)
    agent = MLPAgent(
        num_actions=5, hidden_sizes=hidden_sizes, observation_normalization=normalization
    )
    agent.build([3])
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
