"""envs/minatar.py and the minatar network: MinAtar games as the actor needs them (real MinAtar)."""

import sys

import gymnasium
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

pytest.importorskip("minatar")

from impala_rep.config import TrainConfig  # noqa: E402
from impala_rep.distributions import Categorical
from impala_rep.envs import EnvSpec, describe_env, make_vector_env  # noqa: E402
from impala_rep.envs.minatar import register_minatar_envs  # noqa: E402

BREAKOUT = "MinAtar/Breakout-v1"  # minimal action set: no-op, left, right


def test_describe_env_breakout():
    assert describe_env(BREAKOUT) == EnvSpec(
        observation_shape=(10, 10, 4),
        observation_dtype=np.dtype(np.uint8),
        num_actions=3,
        action_distribution=Categorical(3),
        frame_skip=1,
    )


def test_unknown_game_names_the_id():
    with pytest.raises(ValueError, match="unknown environment id 'MinAtar/Pong-v1'"):
        make_vector_env("MinAtar/Pong-v1", num_envs=1, seed=0)


def test_missing_extra_names_the_install_command(monkeypatch):
    monkeypatch.setitem(
        sys.modules, "minatar", None
    )  # what find_spec sees when it is not installed
    with pytest.raises(ValueError, match=r"pip install -e '\.\[minatar\]'"):
        register_minatar_envs()
    with pytest.raises(
        ValueError,
        match=r"^environment id 'MinAtar/Breakout-v1' needs minatar: "
        r"install the minatar extra: pip install -e '\.\[minatar\]'$",
    ):
        describe_env(BREAKOUT)


def test_vector_env_equals_single_envs_stepped_by_hand(closing):
    """SAME_STEP, uint8 0/255, raw rewards, seeds: against MinAtar's own env, same seeds and
    actions."""
    num_envs, seed = 3, 7
    env = closing(make_vector_env(BREAKOUT, num_envs=num_envs, seed=seed))
    assert env.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    assert env.single_observation_space == gymnasium.spaces.Box(0, 255, (10, 10, 4), np.uint8)
    singles = [closing(gymnasium.make(BREAKOUT)) for _ in range(num_envs)]
    for i, single in enumerate(singles):
        single.reset(seed=seed + i)  # what make_vector_env did to sub-env i
    obs, _ = env.reset()  # a plain reset continues from the seeded generators
    expected = np.stack([single.reset()[0] for single in singles])
    assert obs.dtype == np.uint8 and obs.shape == (num_envs, 10, 10, 4)
    np.testing.assert_array_equal(obs, expected.astype(np.uint8) * 255)

    rng = np.random.default_rng(0)
    endings = 0
    for t in range(300):
        actions = rng.integers(0, 3, num_envs)
        obs, rewards, terminated, truncated, infos = env.step(actions)
        assert rewards.dtype == np.float64 and terminated.dtype == bool and truncated.dtype == bool
        for i, single in enumerate(singles):
            single_obs, reward, single_terminated, single_truncated, _ = single.step(
                int(actions[i])
            )
            assert rewards[i] == reward and terminated[i] == single_terminated
            assert not truncated[i] and not single_truncated  # MinAtar has no time limit
            if single_terminated:
                endings += 1
                # The terminal observation is in the infos; the step returns the next
                # episode's first.
                np.testing.assert_array_equal(
                    infos["final_obs"][i], single_obs.astype(np.uint8) * 255
                )
                single_obs, _ = single.reset()
            np.testing.assert_array_equal(
                obs[i], single_obs.astype(np.uint8) * 255, f"step {t}, env {i}"
            )
    assert endings >= 10  # random play misses the ball within a few dozen steps
    assert set(np.unique(obs)) <= {0, 255}


def test_sticky_action_setting_reaches_every_sub_env(closing):
    default = closing(make_vector_env(BREAKOUT, num_envs=2, seed=0))
    assert [e.unwrapped.game.sticky_action_prob for e in default.envs] == [0.1, 0.1]
    chosen = closing(make_vector_env(BREAKOUT, num_envs=2, seed=0, sticky_actions=0.0))
    assert [e.unwrapped.game.sticky_action_prob for e in chosen.envs] == [0.0, 0.0]

    def paddle_path(sticky: float) -> np.ndarray:
        env = closing(make_vector_env(BREAKOUT, num_envs=1, seed=1, sticky_actions=sticky))
        env.reset()
        # Left (1) and right (2) alternately: a repeated action shows in the paddle row.
        return np.stack([env.step(np.array([1 + t % 2]))[0][0, 9, :, 0] for t in range(8)])

    np.testing.assert_array_equal(paddle_path(0.0), paddle_path(0.0))
    assert not np.array_equal(paddle_path(0.0), paddle_path(0.9))


def test_env_options_are_checked_before_a_run_starts():
    from impala_rep.run.prepare import prepare

    assert TrainConfig.from_keys(dict(env=BREAKOUT, sticky_actions=0.0)).env.sticky_actions == 0.0
    assert TrainConfig.from_keys(
        dict(env="ALE/Pong-v5", sticky_actions=0.0, episodic_life=True)
    ).env.episodic_life
    for kwargs, message in [
        (
            dict(env=BREAKOUT, sticky_actions=1.0),
            r"bad sticky_actions 1\.0: must be a probability in \[0, 1\)",
        ),
        (dict(env=BREAKOUT, sticky_actions=-0.1), r"bad sticky_actions -0\.1"),
        (
            dict(env="CartPole-v1", sticky_actions=0.2),
            r"bad sticky_actions 0\.2: .*not 'CartPole-v1'",
        ),
        (
            dict(env=BREAKOUT, episodic_life=True),
            r"bad episodic_life True: .*Atari.*not 'MinAtar/Breakout-v1'",
        ),
        (dict(env="CartPole-v1", episodic_life=True), r"bad episodic_life True"),
        (dict(env="ALE/Pong-v5", episodic_life=1), r"bad episodic_life 1: must be True or False"),
    ]:
        # A range is the config's to refuse; an option that does not apply to the env,
        # the preparation's (it reads the env id's form, nothing is started).
        with pytest.raises(ValueError, match=message):
            prepare(TrainConfig.from_keys(kwargs))


def test_auto_network_on_a_minatar_observation_is_the_minatar_cnn(closing):
    from impala_rep.agent import AgentInputs
    from impala_rep.networks import CNNAgent, make_agent

    env = closing(make_vector_env(BREAKOUT, num_envs=5, seed=0))
    obs, _ = env.reset()
    shape = env.single_observation_space.shape
    agent = make_agent(observation_shape=shape, num_actions=3)()
    assert isinstance(agent, CNNAgent) and agent.torso_name == "minatar"
    agent.build(shape)
    # Conv 3x3x4 -> 16 (valid: 8x8), Dense 1024 -> 128, then the heads on 128 + 3 + 1.
    assert [tuple(v.shape) for v in agent.trainable_variables] == [
        (3, 3, 4, 16),
        (16,),
        (8 * 8 * 16, 128),
        (128,),
        (132, 3),
        (3,),
        (132, 1),
        (1,),
    ]
    inputs = AgentInputs(
        observation=obs,
        prev_action=np.zeros(5, np.int32),
        prev_reward=np.zeros(5, np.float32),
        first=np.ones(5, bool),
    )
    out, state = agent.step(inputs, agent.initial_state(5))
    assert out.policy_logits.shape == (5, 3) and out.baseline.shape == (5,) and state == ()
    stacked = AgentInputs(*(np.stack([x, x]) for x in inputs))  # [T=2, B=5, ...]
    out, _ = agent.unroll(stacked, agent.initial_state(5))
    assert out.policy_logits.shape == (2, 5, 3) and out.baseline.shape == (2, 5)

    lstm = make_agent(observation_shape=shape, num_actions=3, use_lstm=True)()
    out, (h, c) = lstm.step(inputs, lstm.initial_state(5))
    assert out.policy_logits.shape == (5, 3) and h.shape == (5, 256)


def test_shallow_network_refuses_images_smaller_than_20x20():
    from impala_rep.networks import make_agent

    with pytest.raises(
        ValueError, match=r"'shallow' needs images of at least 20x20, got shape \(10, 10, 4\)"
    ):
        make_agent(observation_shape=(10, 10, 4), num_actions=3, network="shallow")
    assert (
        make_agent(observation_shape=(84, 84, 4), num_actions=3).build.keywords["torso"]
        == "shallow"
    )
    assert (
        make_agent(observation_shape=(10, 10, 4), num_actions=3, network="deep").build.keywords[
            "torso"
        ]
        == "deep"
    )


def test_seeds_at_the_top_of_numpy_range_work():
    # seed + i would pass 2**32 - 1, which numpy's RandomState refuses.
    env = make_vector_env("MinAtar/Breakout-v1", num_envs=4, seed=2**32 - 1)
    try:
        observation, _ = env.reset()
        assert observation.shape == (4, 10, 10, 4)
    finally:
        env.close()
