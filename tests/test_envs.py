"""envs/factory.py: env construction, spaces and error messages."""

import importlib.util

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from impala_rep.distributions import Categorical
from impala_rep.envs import EnvSpec, describe_env, make_vector_env


def test_describe_env_cartpole():
    spec = describe_env("CartPole-v1")
    assert spec == EnvSpec(
        observation_shape=(4,),
        observation_dtype=np.dtype(np.float32),
        num_actions=2,
        action_distribution=Categorical(2),
        observation_bounds=spec.observation_bounds,
    )
    low, high = spec.observation_bounds  # as gymnasium declares them
    np.testing.assert_allclose(high, (4.8, np.inf, 0.41887903, np.inf), rtol=1e-6)
    np.testing.assert_allclose(low, -np.array(high), rtol=1e-6)


def test_make_vector_env_cartpole_is_same_step_and_seeded():
    envs = [make_vector_env("CartPole-v1", num_envs=3, seed=seed) for seed in (5, 5, 6)]
    try:
        env = envs[0]
        assert env.num_envs == 3
        # The Unroll layout needs the reset observation in the step that ends an episode.
        assert env.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
        first_obs = [e.reset()[0] for e in envs]
        assert first_obs[0].shape == (3, 4)
        np.testing.assert_array_equal(first_obs[0], first_obs[1])
        assert not np.array_equal(first_obs[0], first_obs[2])
    finally:
        for e in envs:
            e.close()


def test_unknown_id_names_it_and_suggests_a_close_match():
    with pytest.raises(ValueError) as error:
        make_vector_env("Foo-v0", num_envs=1, seed=0)
    message = str(error.value)
    assert message.startswith("unknown environment id 'Foo-v0': not registered with gymnasium")
    assert "\n" not in message
    with pytest.raises(ValueError, match="did you mean 'CartPole-v1'"):
        describe_env("CartPol-v1")


@pytest.mark.parametrize(
    "build", [describe_env, lambda env_id: make_vector_env(env_id, num_envs=2, seed=0)]
)
def test_an_action_space_no_policy_here_acts_in_is_refused_naming_what_is_allowed(build):
    with pytest.raises(ValueError) as error:
        build("action_spaces_env:UnboundedPendulum-v0")
    message = str(error.value)
    assert message.startswith("environment 'action_spaces_env:UnboundedPendulum-v0': action space")
    assert "infinite bound; allowed: Discrete, MultiDiscrete, or a one-dimensional Box" in message


def test_continuous_and_multi_discrete_actions_are_described_with_their_distribution():
    from impala_rep.distributions import DiagGaussian, MultiCategorical

    pendulum = describe_env("Pendulum-v1")
    assert isinstance(pendulum.action_distribution, DiagGaussian)
    assert pendulum.action_distribution.low.tolist() == [-2.0]
    assert pendulum.num_actions == 2  # a mean and a log-std
    multi = describe_env("action_spaces_env:MultiDiscreteCartPole-v0")
    assert isinstance(multi.action_distribution, MultiCategorical)
    assert multi.num_actions == 5 and multi.action_distribution.nvec == (2, 3)


def test_num_envs_must_be_positive():
    with pytest.raises(ValueError, match="num_envs must be >= 1"):
        make_vector_env("CartPole-v1", num_envs=0, seed=0)


@pytest.mark.parametrize(
    "env_id, module, extra",
    [
        ("ALE/Pong-v5", "ale_py", "atari"),
        ("PongNoFrameskip-v4", "ale_py", "atari"),
        ("MinAtar/Breakout-v1", "minatar", "minatar"),
        ("MiniGrid-DoorKey-5x5-v0", "minigrid", "minigrid"),
        ("HalfCheetah-v5", "mujoco", "mujoco"),
        ("LunarLanderContinuous-v3", "Box2D", "box2d"),
    ],
)
def test_an_env_whose_extra_is_missing_says_which_extra_to_install(
    monkeypatch, env_id, module, extra
):
    # The extras are installed here, so the check is shown a registry without the module.
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == module else find_spec(name, *a),
    )
    expected = f"environment id {env_id!r} needs {module}: install the {extra} extra: " + (
        f"pip install -e '.[{extra}]'"
    )
    for build in (describe_env, lambda i: make_vector_env(i, num_envs=1, seed=0)):
        with pytest.raises(ValueError) as error:
            build(env_id)
        assert str(error.value) == expected


@pytest.mark.parametrize(
    "env_id, observations, actions",
    [
        # Importing mujoco loads glfw, which starts a process to read its version.
        pytest.param("HalfCheetah-v5", (17,), 6, marks=pytest.mark.launches),
        ("LunarLanderContinuous-v3", (8,), 2),
        ("MiniGrid-DoorKey-5x5-v0", (7, 7, 21), 7),
    ],
)
def test_each_extras_envs_build_and_step_with_what_the_extra_installs(
    env_id, observations, actions
):
    # A fresh `make venv` installs the extras: an env that imports a package none of them
    # names (gymnasium's MuJoCo envs need imageio) fails here, not in a user's first run.
    keys = ("image",) if env_id.startswith("MiniGrid") else None
    spec = describe_env(env_id, observation_keys=keys)
    assert spec.observation_shape == observations
    assert spec.action_distribution.action_shape in ((), (actions,))
    env = make_vector_env(env_id, num_envs=2, seed=0, observation_keys=keys)
    try:
        env.reset()
        env.action_space.seed(0)
        obs, *_ = env.step(env.action_space.sample())
        assert obs.shape == (2, *observations)
    finally:
        env.close()


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Acrobot-v1", "CliffWalking-v1"])
def test_max_episode_steps_replaces_the_registered_time_limit(env_id):
    """CartPole's 500 and Acrobot's 500 become 7; CliffWalking, registered with no limit, gets
    one. The 7th step truncates (not terminates) every sub-env, and SAME_STEP's final_obs
    holds the observation it reached, in the form the agent sees (CliffWalking's one-hot)."""
    env = make_vector_env(env_id, num_envs=2, seed=3, max_episode_steps=7)
    try:
        obs, _ = env.reset()
        for step in range(1, 8):
            obs, _, terminated, truncated, info = env.step(np.zeros(2, dtype=np.int64))
            assert not terminated.any()
            assert truncated.all() == (step == 7) and truncated.any() == (step == 7)
        final = np.stack(info["final_obs"])
        assert final.shape == obs.shape and final.dtype == obs.dtype
        assert not np.array_equal(final, obs)  # obs is already the next episode's first
        if env_id == "CliffWalking-v1":
            # Seven moves up from the start (row 3, column 0) end in the top-left cell, state 0.
            np.testing.assert_array_equal(final, np.eye(48, dtype=np.uint8)[[0, 0]])
    finally:
        env.close()
