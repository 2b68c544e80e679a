"""envs/cartpole.py: CartPoleSameStepVectorEnv equals gymnasium's CartPole-v1; the actor runs on it.

The reference is gymnasium's own CartPole-v1 (`gymnasium.make`, so with its
TimeLimit), alone for single steps and as `SyncVectorEnv(SAME_STEP)` (the path
`make_vector_env` used before) for whole episodes. Both sides start from the
same float64 states, set through `state` / `env.unwrapped.state`.
"""

import math

import gymnasium
import numpy as np
import pytest
from gymnasium.spaces import Discrete, MultiDiscrete
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from impala_rep.actors.actor import Actor
from impala_rep.agent import MLPAgent
from impala_rep.envs import make_vector_env
from impala_rep.envs.cartpole import CartPoleSameStepVectorEnv

X_LIMIT = 2.4
THETA_LIMIT = 12 * 2 * math.pi / 360  # as CartPoleEnv computes it


def reference_env(max_episode_steps: int = 500) -> gymnasium.Env:
    return gymnasium.make("CartPole-v1", max_episode_steps=max_episode_steps)


def random_states(rng: np.random.Generator, count: int) -> np.ndarray:
    """`[count, 4]` float64 states: a quarter each well inside the limits, near the
    x limit, near the theta limit, and anywhere up to twice the limits."""
    quarter = count // 4
    states = np.stack(
        [
            rng.uniform(-X_LIMIT, X_LIMIT, count),
            rng.uniform(-3, 3, count),
            rng.uniform(-THETA_LIMIT, THETA_LIMIT, count),
            rng.uniform(-4, 4, count),
        ],
        axis=1,
    )
    sign = rng.choice([-1.0, 1.0], count)
    near_x, near_theta, wide = (
        slice(quarter, 2 * quarter),
        slice(2 * quarter, 3 * quarter),
        slice(3 * quarter, None),
    )
    states[near_x, 0] = sign[near_x] * (X_LIMIT + rng.uniform(-0.05, 0.05, quarter))
    states[near_theta, 2] = sign[near_theta] * (THETA_LIMIT + rng.uniform(-0.05, 0.05, quarter))
    # Stays inside the observation space (twice the limits) after one step, so
    # gymnasium's env checker has nothing to warn about.
    states[wide, 0] = rng.uniform(-1.9, 1.9, count - 3 * quarter) * X_LIMIT
    states[wide, 2] = rng.uniform(-1.8, 1.8, count - 3 * quarter) * THETA_LIMIT
    return states


def balancing_actions(observations: np.ndarray) -> np.ndarray:
    """Pushes towards the side the pole falls to: lasts CartPole-v1's 500 steps."""
    return (observations[:, 2] + 0.5 * observations[:, 3] > 0).astype(np.int64)


@pytest.mark.parametrize("max_episode_steps", [500, 1])
def test_one_step_matches_gymnasium_from_many_states(max_episode_steps):
    rng = np.random.default_rng(0)
    states = random_states(rng, 2000)
    actions = rng.integers(0, 2, len(states))
    env = CartPoleSameStepVectorEnv(num_envs=len(states), max_episode_steps=max_episode_steps)
    env.reset(seed=0)
    env.state = states
    obs, rewards, terminated, truncated, infos = env.step(actions)
    done = terminated | truncated
    # Where the episode ended, the step's own observation is in final_obs.
    next_obs = obs.copy()
    if done.any():
        next_obs[done] = np.stack(infos["final_obs"][done])

    reference = reference_env(max_episode_steps)
    expected = []
    for state, action in zip(states, actions):
        reference.reset(seed=0)  # a fresh episode: no elapsed steps, not terminated
        reference.unwrapped.state = state.copy()
        expected.append(reference.step(int(action)))
    reference.close()
    expected_obs, expected_rewards, expected_terminated, expected_truncated, _ = map(
        np.array, zip(*expected)
    )

    # Bit-identical: the same float64 operations in the same order.
    np.testing.assert_array_equal(next_obs, expected_obs)
    np.testing.assert_array_equal(rewards, expected_rewards)
    np.testing.assert_array_equal(terminated, expected_terminated)
    np.testing.assert_array_equal(truncated, expected_truncated)
    # The states reached both ways to terminate, and not terminating.
    assert (terminated & (np.abs(next_obs[:, 0]) > X_LIMIT)).any()
    assert (terminated & (np.abs(next_obs[:, 2]) > THETA_LIMIT)).any()
    assert (~terminated).any()
    assert truncated.all() if max_episode_steps == 1 else not truncated.any()
    assert np.all(np.abs(obs[done]) <= 0.05)


@pytest.mark.parametrize("max_episode_steps", [500, 25])
@pytest.mark.parametrize("num_envs", [1, 2, 3, 4])
def test_episodes_match_gymnasium_sync_vector_env(num_envs, max_episode_steps):
    """Step for step against SyncVectorEnv(SAME_STEP) of CartPole-v1, through many episodes.

    Each env alternates a balancing episode (truncated at max_episode_steps)
    with a random one (terminated, or truncated too when the limit is small).
    Whenever an episode ends, the reference's new episode is restarted from
    ours' fresh initial state, so the two stay in lockstep.
    """
    rng = np.random.default_rng(num_envs)
    env = CartPoleSameStepVectorEnv(num_envs=num_envs, max_episode_steps=max_episode_steps)
    reference = SyncVectorEnv(
        [lambda: reference_env(max_episode_steps)] * num_envs,
        autoreset_mode=AutoresetMode.SAME_STEP,
    )
    assert env.observation_space == reference.observation_space
    assert env.action_space == reference.action_space
    obs, infos = env.reset(seed=num_envs)
    assert infos == {}
    reference.reset(seed=100)
    for i in range(num_envs):
        reference.envs[i].unwrapped.state = env.state[i]

    episodes = np.zeros(num_envs, np.int64)
    ends = {"terminated": 0, "truncated": 0}
    for _ in range(2 * max_episode_steps + 100):
        balancing = episodes % 2 == 0
        actions = np.where(balancing, balancing_actions(obs), rng.integers(0, 2, num_envs))
        obs, rewards, terminated, truncated, infos = env.step(actions)
        ref_obs, ref_rewards, ref_terminated, ref_truncated, ref_infos = reference.step(actions)

        assert obs.shape == (num_envs, 4) and obs.dtype == np.float32
        assert rewards.dtype == ref_rewards.dtype and terminated.dtype == truncated.dtype == bool
        np.testing.assert_array_equal(rewards, ref_rewards)
        np.testing.assert_array_equal(terminated, ref_terminated)
        np.testing.assert_array_equal(truncated, ref_truncated)
        done = terminated | truncated
        np.testing.assert_array_equal(obs[~done], ref_obs[~done])
        assert infos.keys() == ref_infos.keys()
        if not done.any():
            continue

        for key in ("_final_obs", "_final_info"):
            np.testing.assert_array_equal(infos[key], ref_infos[key])
        assert infos["final_info"] == ref_infos["final_info"] == {}
        assert infos["final_obs"].dtype == object and infos["final_obs"].shape == (num_envs,)
        assert all(final is None for final in infos["final_obs"][~done])
        for i in np.flatnonzero(done):
            final = infos["final_obs"][i]
            assert final.dtype == np.float32
            np.testing.assert_array_equal(final, ref_infos["final_obs"][i])
            # Restart the reference's new episode from ours.
            reference.envs[i].unwrapped.state = env.state[i]
        # The returned observation starts the new episode.
        assert np.all(np.abs(obs[done]) <= 0.05)
        np.testing.assert_array_equal(obs, env.state.astype(np.float32))
        episodes += done
        ends["terminated"] += int(terminated.sum())
        ends["truncated"] += int(truncated.sum())
    reference.close()
    assert ends["terminated"] > 0 and ends["truncated"] >= num_envs


def test_spaces_metadata_and_seeding():
    env = CartPoleSameStepVectorEnv(num_envs=3)
    reference = reference_env()
    assert env.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    assert env.num_envs == 3 and env.max_episode_steps == 500
    assert env.single_observation_space == reference.observation_space
    assert env.single_action_space == Discrete(2)
    assert env.observation_space.shape == (3, 4)
    assert env.action_space == MultiDiscrete([2, 2, 2])
    reference.close()

    first, _ = env.reset(seed=7)
    again, _ = env.reset(seed=7)
    other, _ = CartPoleSameStepVectorEnv(num_envs=3).reset(seed=8)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
    assert first.dtype == np.float32 and np.all(np.abs(first) <= 0.05)
    assert env.observation_space.contains(first)


def test_reset_mask_resets_only_the_masked_envs():
    env = CartPoleSameStepVectorEnv(num_envs=3)
    env.reset(seed=0)
    moved, *_ = env.step(np.array([1, 1, 1]))
    obs, infos = env.reset(options={"reset_mask": np.array([False, True, False])})
    assert infos == {}
    np.testing.assert_array_equal(obs[[0, 2]], moved[[0, 2]])
    assert not np.array_equal(obs[1], moved[1])
    with pytest.raises(ValueError, match="reset_mask"):
        env.reset(options={"reset_mask": np.zeros(3, bool)})
    with pytest.raises(ValueError, match="unsupported reset options"):
        env.reset(options={"low": -0.1})


@pytest.mark.parametrize(
    "actions", [np.array([0, 2]), np.array([-1, 0]), np.array([1]), np.array([0.0, 1.0]), [[0, 1]]]
)
def test_invalid_actions_are_rejected(actions):
    env = CartPoleSameStepVectorEnv(num_envs=2)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(np.array([0, 1]))
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"actions must be 2 integers in \{0, 1\}"):
        env.step(actions)
    env.step([0, 1])  # a list of valid actions is fine


def test_make_vector_env_builds_it_for_cartpole():
    env = make_vector_env("CartPole-v1", num_envs=5, seed=3)
    assert isinstance(env, CartPoleSameStepVectorEnv)
    assert env.max_episode_steps == gymnasium.spec("CartPole-v1").max_episode_steps == 500
    # Already reset with seed 3: a plain reset continues from that generator.
    twin = CartPoleSameStepVectorEnv(num_envs=5)
    twin.reset(seed=3)
    np.testing.assert_array_equal(env.reset()[0], twin.reset()[0])


def test_actor_unrolls_on_it():
    env = make_vector_env("CartPole-v1", num_envs=8, seed=0)
    actor = Actor(env=env, agent=MLPAgent(num_actions=2), unroll_length=50, seed=0)
    (first, first_stats), (second, second_stats) = actor.unroll(), actor.unroll()

    for unroll in (first, second):
        assert unroll.observations.shape == (51, 8, 4) and unroll.observations.dtype == np.float32
        assert unroll.actions.shape == unroll.rewards.shape == (50, 8)
        assert unroll.behaviour_logits.shape == (50, 8, 2)
        np.testing.assert_array_equal(unroll.rewards, 1.0)
        ended = unroll.terminated | unroll.truncated
        np.testing.assert_array_equal(unroll.first[1:], ended)
        # A new episode's first observation follows every end, never the terminal one.
        assert np.all(np.abs(unroll.observations[1:][ended]) <= 0.05)
    np.testing.assert_array_equal(second.observations[0], first.observations[-1])

    returns = np.concatenate([first_stats.returns, second_stats.returns])
    lengths = np.concatenate([first_stats.lengths, second_stats.lengths])
    assert (
        len(returns)
        == (first.terminated | first.truncated).sum() + (second.terminated | second.truncated).sum()
        > 0
    )
    # 1 per step: a return is its episode's length, at least the ~8 steps the
    # pole needs to fall from a reset state, at most the 100 steps taken.
    np.testing.assert_array_equal(returns, lengths)
    assert returns.min() >= 5 and returns.max() <= 100
    env.close()
