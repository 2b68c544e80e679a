"""Actors of the built-in MLP (and of RND over it) act with a TensorFlow-free twin
(`impala_rep.agent_factory.acting_agent`): the twin must be the agent's own step, an actor
with it must play as one with the agent, and its process must not import TensorFlow."""

import pickle
import subprocess
import sys

import numpy as np
import pytest

from impala_rep.actors.actor import Actor
from impala_rep.actors.build import build_actor
from impala_rep.agent import AgentInputs
from impala_rep.agent_factory import acting_agent, make_agent
from impala_rep.config import TrainConfig
from impala_rep.distributions import Categorical, DiagGaussian, MultiCategorical
from impala_rep.envs import make_vector_env
from impala_rep.extensions import actor_return_discount, extensions_for
from impala_rep.run.prepare import prepare


def _random_weights(shapes, seed):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=s).astype(np.float32) for s in shapes]


@pytest.mark.parametrize(
    "hidden_sizes, normalization",
    [((64, 64), None), ((7,), ((0.5, -1.0, 0.0), (2.0, 0.25, 1.0))), ((), None)],
)
def test_the_twin_is_the_agents_step(hidden_sizes, normalization):
    factory = make_agent(
        observation_shape=[3],
        num_actions=5,
        hidden_sizes=hidden_sizes,
        observation_normalization=normalization,
    )
    twin, agent = acting_agent(factory), factory()
    agent.build([3])
    assert twin.num_actions == 5
    assert twin.weight_shapes((3,)) == [w.shape for w in agent.get_weights()]
    weights = _random_weights(twin.weight_shapes((3,)), seed=0)
    observation = np.random.default_rng(1).normal(size=(16, 3)).astype(np.float32)
    inputs = AgentInputs(
        observation, np.zeros(16, np.int32), np.zeros(16, np.float32), np.zeros(16, bool)
    )
    agent.set_weights(weights)
    expected, _ = agent.step(inputs, ())  # the compiled-path step, on the same weights
    got = twin.host_step(weights, inputs)
    np.testing.assert_allclose(got.policy_logits, expected.policy_logits, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got.baseline, expected.baseline, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "distribution",
    [None, MultiCategorical([3, 2]), DiagGaussian(low=[-1.0, -2.0], high=[1.0, 2.0])],
    ids=["categorical", "multi-categorical", "gaussian"],
)
def test_the_lstm_twin_is_the_agents_step_through_episode_starts(distribution):
    # The MLP with an LSTM core (`NetworkAgent`, torso "mlp"): its numpy twin carries the state
    # step to step and resets it where an episode starts, as the agent does.
    actions = distribution or Categorical(4)
    factory = make_agent(
        observation_shape=[3],
        num_actions=actions.num_params,
        hidden_sizes=(8, 6),
        use_lstm=True,
        observation_normalization=((0.5, -1.0, 0.0), (2.0, 0.25, 1.0)),
        action_distribution=distribution,
    )
    twin, agent = acting_agent(factory), factory()
    agent.build([3])
    assert twin.weight_shapes((3,)) == [w.shape for w in agent.get_weights()]
    weights = _random_weights(twin.weight_shapes((3,)), seed=2)
    agent.set_weights(weights)
    rng = np.random.default_rng(3)
    state, twin_state = agent.initial_state(5), twin.initial_state(5)
    for t in range(6):
        # All start at t=0; then env 4 at t=2 and envs 1 and 3 at t=4, their states not 0.
        first = np.full(5, t == 0)
        first[{2: [4], 4: [1, 3]}.get(t, [])] = True
        previous = actions.sample(rng.normal(size=(5, actions.num_params)), rng)
        inputs = AgentInputs(
            rng.normal(size=(5, 3)).astype(np.float32),
            previous.astype(actions.action_dtype),
            rng.normal(scale=2.0, size=5).astype(np.float32),  # clipped to [-1, 1] as fed
            first,
        )
        expected, state = agent.step(inputs, state)
        got, twin_state = twin.host_step(weights, inputs, twin_state)
        np.testing.assert_allclose(got.policy_logits, expected.policy_logits, atol=1e-5)
        np.testing.assert_allclose(got.baseline, expected.baseline, atol=1e-5)
        for mine, theirs in zip(twin_state, state, strict=True):
            np.testing.assert_allclose(mine, theirs, atol=1e-5)


def test_an_actor_with_the_lstm_twin_plays_as_one_with_the_agent():
    plan = _default_plan(use_lstm=True)
    agent = plan.agent_factory()
    # The twin samples with numpy, the agent with TensorFlow: greedy, their modes agree. A
    # 9-step limit cuts episodes, whose last observations are valued from the state.
    twin_actor, agent_actor = (
        _cartpole_actor(plan, a, greedy=True, max_episode_steps=9)
        for a in (acting_agent(plan.agent_factory), agent)
    )
    weights = _random_weights([w.shape for w in agent.get_weights()], seed=4)
    for actor in (twin_actor, agent_actor):
        actor.set_weights(weights, version=1)
    cut = 0
    for _ in range(5):  # 100 steps: episodes end, are cut, and states reset
        (a, _), (b, _) = twin_actor.unroll(), agent_actor.unroll()
        np.testing.assert_array_equal(a.actions, b.actions)
        np.testing.assert_allclose(a.behaviour_logits, b.behaviour_logits, atol=1e-5)
        np.testing.assert_allclose(a.truncation_values, b.truncation_values, atol=1e-5)
        for mine, theirs in zip(a.initial_state, b.initial_state, strict=True):
            np.testing.assert_allclose(mine, theirs, atol=1e-5)
        cut += int((b.truncation_values != 0).sum())
    assert cut > 0


def _cartpole_actor(plan, agent, *, max_episode_steps=None, **kwargs):
    """An actor of `agent` on the plan's CartPole envs, seeded as every test here seeds it."""
    config = plan.config
    return Actor(
        env=make_vector_env("CartPole-v1", num_envs=8, seed=3, max_episode_steps=max_episode_steps),
        agent=agent,
        unroll_length=config.actors.unroll_length,
        seed=3,
        **kwargs,
    )


def _default_plan(**keys):
    return prepare(TrainConfig.from_keys({"env": "CartPole-v1", "envs_per_actor": 8, **keys}))


def test_an_actor_with_the_twin_plays_as_one_with_the_agent():
    plan = _default_plan()  # RND over the MLP, as CartPole's defaults have it
    config = plan.config
    twin_actor = build_actor(
        env=config.env,
        actors=config.actors,
        agent_factory=plan.agent_factory,
        seed=3,
        return_discount=actor_return_discount(extensions_for(config.loss)),
    )
    agent = plan.agent_factory()
    agent_actor = _cartpole_actor(
        plan, agent, return_discount=actor_return_discount(extensions_for(config.loss))
    )
    weights = _random_weights([w.shape for w in agent.get_weights()], seed=4)
    for actor in (twin_actor, agent_actor):
        actor.set_weights(weights, version=7)
    for _ in range(30):  # 600 steps: episodes end, some at the 500-step time limit
        (a, a_stats), (b, b_stats) = twin_actor.unroll(), agent_actor.unroll()
        np.testing.assert_array_equal(a.actions, b.actions)
        np.testing.assert_array_equal(a.observations, b.observations)
        np.testing.assert_allclose(a.behaviour_logits, b.behaviour_logits, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(a.truncation_values, b.truncation_values, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(a_stats.returns, b_stats.returns)
        assert a.policy_version[0] == 7 and a_stats.return_moments == b_stats.return_moments


def test_an_actor_with_the_twin_has_no_weights_until_it_is_given_them():
    plan = _default_plan()
    config = plan.config
    actor = build_actor(
        env=config.env, actors=config.actors, agent_factory=plan.agent_factory, seed=0
    )
    with pytest.raises(RuntimeError, match="no weights to act with yet"):
        actor.unroll()
    with pytest.raises(ValueError, match="expected 8 weight arrays, got 2"):
        actor.set_weights([np.zeros(1)] * 2, version=1)


@pytest.mark.parametrize(
    "factory",
    [
        make_agent(observation_shape=[10, 10, 4], num_actions=3),  # a CNN
        make_agent(observation_shape=[84, 84, 4], num_actions=3, use_lstm=True),  # a CNN's
        _default_plan(popart=True).agent_factory,  # PopArt's head
        lambda: None,  # a user's
    ],
    ids=["cnn", "lstm", "popart", "users"],
)
def test_agents_without_a_twin_are_built(factory):
    assert acting_agent(factory) is None


@pytest.mark.launches
@pytest.mark.parametrize("keys", [{}, {"use_lstm": True}], ids=["mlp", "mlp-lstm"])
def test_the_default_actor_process_imports_no_tensorflow(keys):
    """As under Ray: the driver pickles the run's plan, a fresh process unpickles it, imports
    the Ray actor's module and builds and runs the actor."""
    plan = _default_plan(**keys)
    code = """
import pickle, sys
import numpy as np

plan = pickle.loads(sys.stdin.buffer.read())
import impala_rep.actors.ray_actor
from impala_rep.actors.build import build_actor
from impala_rep.agent_factory import acting_agent

config = plan.config
actor = build_actor(env=config.env, actors=config.actors, agent_factory=plan.agent_factory, seed=0)
shapes = acting_agent(plan.agent_factory).weight_shapes(plan.observation_shape)
actor.set_weights([np.zeros(s, np.float32) for s in shapes], version=1)
unroll, _ = actor.unroll()
assert unroll.actions.shape == (config.actors.unroll_length, config.actors.envs_per_actor)
print(sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "keras")))
"""
    done = subprocess.run(
        [sys.executable, "-c", code], input=pickle.dumps(plan), capture_output=True, timeout=300
    )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().strip() == "[]"
