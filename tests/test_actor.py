"""actors/actor.py: exact unroll contents on a scripted env, state resets, and CartPole."""

import gymnasium
import numpy as np
import pytest
import tensorflow as tf
from gymnasium.spaces import Box, Discrete
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from impala_rep.actors.actor import Actor
from impala_rep.agent import AgentInputs, AgentOutput, MLPAgent
from impala_rep.envs import make_vector_env

# The scripted vector env: env i's episodes last EPISODE_LENGTHS[i] steps; the
# last env's episodes are truncated, the others terminate.
EPISODE_LENGTHS = (2, 3, 5)
TRUNCATES = (False, False, True)
T = 4
ACTION = 2  # the scripted agents' (near-certain) action
NUM_ACTIONS = 3


class ScriptedEnv(gymnasium.Env):
    """Observation [episode_step, env_index]; the step from episode_step s has reward s + 1.

    episode_step counts steps since reset, so an episode of length k shows
    observations 0..k-1 and, after its last step, k (never seen by an actor that
    resets correctly). Every action it is stepped with is kept in `actions_received`.
    """

    def __init__(self, *, index: int, episode_length: int, truncates: bool):
        self.observation_space = Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = Discrete(NUM_ACTIONS)
        self._index, self._length, self._truncates = index, episode_length, truncates
        self._step = 0
        self.actions_received = []

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._step = 0
        return self._observation(), {}

    def step(self, action):
        self.actions_received.append(int(action))
        self._step += 1
        ended = self._step == self._length
        return (
            self._observation(),
            float(self._step),
            ended and not self._truncates,
            ended and self._truncates,
            {},
        )

    def _observation(self):
        return np.array([self._step, self._index], np.float32)


def scripted_vector_env(autoreset_mode: AutoresetMode) -> SyncVectorEnv:
    return SyncVectorEnv(
        [
            lambda i=i: ScriptedEnv(
                index=i, episode_length=EPISODE_LENGTHS[i], truncates=TRUNCATES[i]
            )
            for i in range(len(EPISODE_LENGTHS))
        ],
        autoreset_mode=autoreset_mode,
    )


class CountingAgent:
    """An Agent whose state counts steps since its last reset and keeps the last observation.

    It picks ACTION (logit 100 against -100) and writes the count it was fed
    into logit 0 as `-100 - count`, so behaviour_logits show which state the
    actor fed at every step. Its baseline spells out what it was fed:
    `1000 * count + 100 * episode_step + 10 * prev_action + prev_reward`.
    """

    num_actions = NUM_ACTIONS

    def __init__(self):
        self.traces = 0
        self.weights_received = []

    def initial_state(self, batch_size):
        return {"count": tf.zeros([batch_size]), "last_obs": tf.zeros([batch_size, 2])}

    def build(self, observation_shape):
        pass

    def step(self, inputs, state):
        self.traces += 1  # a Python side effect: runs once per tf.function trace
        count = state["count"]
        other = tf.fill(tf.shape(count), -100.0)
        logits = tf.stack([-100.0 - count, other, -other], axis=1)
        new_state = {"count": count + 1.0, "last_obs": tf.cast(inputs.observation, tf.float32)}
        baseline = (
            1000.0 * count
            + 100.0 * tf.cast(inputs.observation[:, 0], tf.float32)
            + 10.0 * tf.cast(inputs.prev_action, tf.float32)
            + inputs.prev_reward
        )
        return AgentOutput(logits, baseline), new_state

    def unroll(self, inputs, state):
        raise NotImplementedError("actors only call step")

    @property
    def trainable_variables(self):
        return []

    def get_weights(self):
        return []

    def set_weights(self, weights):
        self.weights_received.append(list(weights))


def expected_fields(start: int) -> dict:
    """The unroll the scripted env and an always-ACTION agent give from global step `start`."""
    lengths = np.array(EPISODE_LENGTHS)
    truncates = np.array(TRUNCATES)
    # episode step at obs[t] for t = 0..T, [T+1, E]
    step = (start + np.arange(T + 1))[:, None] % lengths
    first = step == 0
    ended = step[:-1] + 1 == lengths
    index = np.broadcast_to(np.arange(len(lengths)), step.shape)
    return dict(
        observations=np.stack([step, index], axis=-1).astype(np.float32),
        prev_actions=np.where(first, 0, ACTION).astype(np.int32),
        prev_rewards=np.where(first, 0, step).astype(np.float32),  # previous step's reward
        first=first,
        actions=np.full([T, len(lengths)], ACTION, np.int32),
        rewards=(step[:-1] + 1).astype(np.float32),
        terminated=ended & ~truncates,
        truncated=ended & truncates,
        # The value of a cut episode's final observation (episode step L = its length),
        # fed as the next call would be: state count L, after ACTION and reward L.
        truncation_values=np.where(
            ended & truncates, 1000 * lengths + 100 * lengths + 10 * ACTION + lengths, 0
        ).astype(np.float32),
    )


def assert_unroll_matches(unroll, expected):
    for name, value in expected.items():
        actual = getattr(unroll, name)
        assert actual.dtype == value.dtype, name
        np.testing.assert_array_equal(actual, value, err_msg=name)


@pytest.mark.parametrize(
    "autoreset_mode", [AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP, AutoresetMode.DISABLED]
)
def test_two_consecutive_unrolls_exactly(autoreset_mode):
    env = scripted_vector_env(autoreset_mode)
    agent = CountingAgent()
    actor = Actor(env=env, agent=agent, unroll_length=T, seed=0)
    assert actor.policy_version == 0
    first_unroll, first_stats = actor.unroll()
    actor.set_weights([], version=7)
    second_unroll, second_stats = actor.unroll()
    e = len(EPISODE_LENGTHS)

    for unroll, start in [(first_unroll, 0), (second_unroll, T)]:
        assert unroll.observations.shape == (T + 1, e, 2)
        assert unroll.behaviour_logits.shape == (T, e, NUM_ACTIONS)
        assert unroll.num_frames == T * e
        assert_unroll_matches(unroll, expected_fields(start))
        # The fed count is the episode step: the state was reset at every first observation.
        episode_step = unroll.observations[:-1, :, 0]
        expected_logits = np.stack(
            [
                -100.0 - episode_step,
                np.full_like(episode_step, -100.0),
                np.full_like(episode_step, 100.0),
            ],
            axis=-1,
        )
        assert unroll.behaviour_logits.dtype == np.float32
        np.testing.assert_array_equal(unroll.behaviour_logits, expected_logits)

    # Spelled out for env 0 (episodes of 2 steps, terminating):
    np.testing.assert_array_equal(first_unroll.observations[:, 0, 0], [0, 1, 0, 1, 0])
    np.testing.assert_array_equal(first_unroll.first[:, 0], [1, 0, 1, 0, 1])
    np.testing.assert_array_equal(first_unroll.prev_actions[:, 0], [0, 2, 0, 2, 0])
    np.testing.assert_array_equal(first_unroll.prev_rewards[:, 0], [0, 1, 0, 1, 0])
    np.testing.assert_array_equal(first_unroll.terminated[:, 0], [0, 1, 0, 1])
    np.testing.assert_array_equal(second_unroll.truncated[:, 2], [1, 0, 0, 0])  # env 2 at step 5
    assert not second_unroll.terminated[:, 2].any()
    # Its final observation [5, 2] never enters the unroll (obs[1] starts the next episode),
    # but its value does: count 5, episode step 5, prev action 2, prev reward 5.
    np.testing.assert_array_equal(second_unroll.observations[1, 2], [0, 2])
    np.testing.assert_array_equal(second_unroll.truncation_values[:, 2], [5525, 0, 0, 0])
    assert (
        not first_unroll.truncation_values.any()
        and not second_unroll.truncation_values[:, :2].any()
    )

    # Consecutive unrolls overlap by one observation.
    for name in ("observations", "prev_actions", "prev_rewards", "first"):
        np.testing.assert_array_equal(
            getattr(second_unroll, name)[0], getattr(first_unroll, name)[-1], err_msg=name
        )

    # initial_state: the state fed at obs[0]. At step 4 env 0 starts an episode
    # (state reset), env 1 is at episode step 1 and env 2 at step 4.
    np.testing.assert_array_equal(first_unroll.initial_state["count"], [0, 0, 0])
    np.testing.assert_array_equal(first_unroll.initial_state["last_obs"], np.zeros([3, 2]))
    np.testing.assert_array_equal(second_unroll.initial_state["count"], [0, 1, 4])
    np.testing.assert_array_equal(second_unroll.initial_state["last_obs"], [[0, 0], [0, 1], [3, 2]])

    np.testing.assert_array_equal(first_unroll.policy_version, [0, 0, 0])
    np.testing.assert_array_equal(second_unroll.policy_version, [7, 7, 7])
    assert second_unroll.policy_version.dtype == np.int64
    assert actor.policy_version == 7 and agent.weights_received == [[]]

    # Finished episodes, ordered by step then env. Env 1's episode from step 3
    # and env 2's from step 0 span both unrolls.
    np.testing.assert_array_equal(first_stats.returns, [3, 6, 3])
    np.testing.assert_array_equal(first_stats.lengths, [2, 3, 2])
    np.testing.assert_array_equal(second_stats.returns, [15, 3, 6, 3])
    np.testing.assert_array_equal(second_stats.lengths, [5, 2, 3, 2])

    # Every env step took the agent's action: no hidden reset step consumed one.
    for sub_env in env.envs:
        assert sub_env.actions_received == [ACTION] * (2 * T)
    # Two compiled functions, each traced once: the policy, and (at the first cut episode)
    # the value of a final observation.
    assert agent.traces == 2
    env.close()


def test_recurrent_state_is_reset_at_first_observations():
    env = scripted_vector_env(AutoresetMode.SAME_STEP)
    actor = Actor(env=env, agent=CountingAgent(), unroll_length=T, seed=0)
    for _ in range(3):
        unroll, _ = actor.unroll()
        fed_count = -100.0 - unroll.behaviour_logits[..., 0]  # [T, E]
        first = unroll.first[:-1]
        assert first.any() and (~first).any()
        # The initial state (count 0) at every first observation; counting on otherwise.
        np.testing.assert_array_equal(fed_count[first], 0.0)
        np.testing.assert_array_equal(fed_count[1:][~first[1:]], fed_count[:-1][~first[1:]] + 1)
        np.testing.assert_array_equal(unroll.initial_state["count"], fed_count[0])
    env.close()


def test_mlp_agent_with_bias_only_weights():
    env = scripted_vector_env(AutoresetMode.SAME_STEP)
    agent = MLPAgent(num_actions=NUM_ACTIONS, hidden_sizes=(8,))
    actor = Actor(env=env, agent=agent, unroll_length=T, seed=1)
    weights = [np.zeros_like(w) for w in agent.get_weights()]
    bias_index = [
        i
        for i, v in enumerate(agent.trainable_variables)
        if "policy_logits" in v.path and "bias" in v.path
    ]
    assert len(bias_index) == 1
    weights[bias_index[0]] = np.array([0.0, 0.0, 30.0], np.float32)
    actor.set_weights(weights, version=3)

    unroll, _ = actor.unroll()

    assert_unroll_matches(unroll, expected_fields(0))
    np.testing.assert_array_equal(
        unroll.behaviour_logits, np.broadcast_to([0.0, 0.0, 30.0], (T, 3, NUM_ACTIONS))
    )
    assert unroll.initial_state == ()
    np.testing.assert_array_equal(unroll.policy_version, [3, 3, 3])
    env.close()


def test_next_step_env_without_reset_mask_is_rejected():
    # CartPoleVectorEnv autoresets on the next step and its reset ignores reset_mask.
    env = gymnasium.make_vec("CartPole-v1", num_envs=2, vectorization_mode="vector_entry_point")
    with pytest.raises(ValueError, match="reset_mask"):
        Actor(env=env, agent=MLPAgent(num_actions=2), unroll_length=T, seed=0)
    env.close()


def test_agent_and_env_must_agree_on_actions():
    env = scripted_vector_env(AutoresetMode.SAME_STEP)
    with pytest.raises(ValueError) as error:
        Actor(env=env, agent=MLPAgent(num_actions=2), unroll_length=T, seed=0)
    assert str(error.value) == (
        "the agent acts with Categorical(2) (2 policy outputs); the env's action space "
        "Discrete(3) needs Categorical(3)"
    )
    env.close()


def cartpole_actor(*, weights=None):
    env = make_vector_env("CartPole-v1", num_envs=8, seed=3)
    agent = MLPAgent(num_actions=2)
    actor = Actor(env=env, agent=agent, unroll_length=60, seed=4)
    if weights is not None:
        actor.set_weights(weights, version=1)
    return actor, agent


def test_cartpole_unrolls():
    actor, agent = cartpole_actor()
    unroll, stats = actor.unroll()

    assert unroll.observations.shape == (61, 8, 4) and unroll.observations.dtype == np.float32
    assert unroll.actions.shape == unroll.rewards.shape == (60, 8)
    assert unroll.behaviour_logits.shape == (60, 8, 2)
    assert unroll.num_frames == 480
    np.testing.assert_array_equal(unroll.rewards, 1.0)
    ended = unroll.terminated | unroll.truncated
    assert ended.any(), "an untrained policy ends CartPole episodes within 60 steps"
    np.testing.assert_array_equal(unroll.first[1:], ended)
    # After an episode ends the next observation is a reset one (all |.| <= 0.05),
    # not the terminal one (|x| > 2.4 or |theta| > 0.21).
    assert np.all(np.abs(unroll.observations[1:][ended]) <= 0.05)
    # Within episodes every transition is real physics: x advances by tau * x_dot.
    x, x_dot = unroll.observations[..., 0], unroll.observations[..., 1]
    np.testing.assert_allclose(
        x[1:][~ended], (x[:-1] + 0.02 * x_dot[:-1])[~ended], rtol=1e-5, atol=1e-6
    )
    # CartPole pays 1 per step, so every finished episode's return is its length.
    assert len(stats.returns) == ended.sum()
    np.testing.assert_array_equal(stats.returns, stats.lengths)

    # Same env seed, actor seed and weights: the same unroll.
    twin, _ = cartpole_actor(weights=agent.get_weights())
    twin_unroll, _ = twin.unroll()
    np.testing.assert_array_equal(twin_unroll.actions, unroll.actions)
    np.testing.assert_array_equal(twin_unroll.observations, unroll.observations)


def test_time_limit_cuts_on_cartpole_carry_the_value_of_the_final_observation():
    # The numpy CartPole keeps a cut episode's final observation in info["final_obs"]
    # (SAME_STEP); with a 10-step limit most episodes are cut.
    from impala_rep.envs.cartpole import CartPoleSameStepVectorEnv

    env = CartPoleSameStepVectorEnv(num_envs=8, max_episode_steps=10)
    env.reset(seed=0)
    agent = MLPAgent(num_actions=2)
    actor = Actor(env=env, agent=agent, unroll_length=30, seed=0)
    unroll, _ = actor.unroll()
    cut = unroll.truncated & ~unroll.terminated
    assert cut.sum() >= 8
    np.testing.assert_array_equal(unroll.truncation_values != 0, cut)
    # Each is the agent's value of the cut episode's final observation, which obs[t+1] does not
    # hold (it starts the next episode): one CartPole-v1 step from obs[t] (gymnasium's own
    # dynamics, which envs/cartpole.py matches bit for bit; the MLP agent sees observations only).
    reference = gymnasium.make("CartPole-v1").unwrapped
    reference.reset(seed=0)
    for t, b in np.argwhere(cut):
        reference.state = unroll.observations[t, b].astype(np.float64)
        final, *_ = reference.step(int(unroll.actions[t, b]))
        assert not np.allclose(final, unroll.observations[t + 1, b])
        output, _ = agent.step(
            AgentInputs(
                tf.constant([final], tf.float32),
                tf.constant([0]),
                tf.constant([0.0]),
                tf.constant([False]),
            ),
            (),
        )
        assert unroll.truncation_values[t, b] == pytest.approx(float(output.baseline[0]), abs=1e-5)
    env.close()


@pytest.mark.parametrize("autoreset_mode", [AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP])
def test_return_moments_follow_each_envs_discounted_return_across_unrolls(autoreset_mode):
    """With `return_discount`, each unroll's stats carry (count, mean, variance) of
    G = r + discount * G over its T x E steps, G carried across unrolls and reset after
    every episode's last step (SB3's VecNormalize), checked against a step-by-step loop."""
    discount = 0.9
    actor = Actor(
        env=scripted_vector_env(autoreset_mode),
        agent=CountingAgent(),
        unroll_length=T,
        seed=0,
        return_discount=discount,
    )
    # The scripted env: env i's step s of an episode pays s, episodes last EPISODE_LENGTHS[i].
    running = np.zeros(len(EPISODE_LENGTHS))
    steps = np.zeros(len(EPISODE_LENGTHS), int)
    for _ in range(3):
        unroll, stats = actor.unroll()
        expected = []
        for _t in range(T):
            steps += 1
            running = discount * running + steps
            expected.append(running.copy())
            ended = steps == np.array(EPISODE_LENGTHS)
            running[ended], steps[ended] = 0.0, 0
        values = np.concatenate(expected)
        count, mean, variance = stats.return_moments
        assert count == values.size
        np.testing.assert_allclose([mean, variance], [values.mean(), values.var()], rtol=1e-12)


def test_no_return_moments_without_a_discount():
    actor = Actor(
        env=scripted_vector_env(AutoresetMode.SAME_STEP),
        agent=CountingAgent(),
        unroll_length=T,
        seed=0,
    )
    assert actor.unroll()[1].return_moments is None
