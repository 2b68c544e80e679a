"""envs/atari.py: ale_py's AtariVectorEnv as the actor needs it (real ALE frames)."""

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

ale_py = pytest.importorskip("ale_py")

from impala_rep.distributions import Categorical  # noqa: E402
from impala_rep.envs import EnvSpec, describe_env, make_vector_env  # noqa: E402
from impala_rep.envs.atari import atari_game, is_atari_id, make_atari_vector_env  # noqa: E402

FIRE = 1  # index of FIRE in Pong's and Breakout's minimal action sets


def _area_resize_matrix(n_in: int, n_out: int) -> np.ndarray:
    """[n_out, n_in] weights of an area-average resize (OpenCV's INTER_AREA)."""
    matrix = np.zeros((n_out, n_in))
    scale = n_in / n_out
    for i in range(n_out):
        lo, hi = i * scale, (i + 1) * scale
        for j in range(int(np.floor(lo)), int(np.ceil(hi))):
            matrix[i, j] = min(hi, j + 1) - max(lo, j)
    return matrix / scale


_ROWS, _COLS = _area_resize_matrix(210, 84), _area_resize_matrix(160, 84)


def _reference_frame(screen: np.ndarray) -> np.ndarray:
    """A [210, 160] grayscale screen area-resized to [84, 84], float64 (not rounded)."""
    return _ROWS @ screen.astype(np.float64) @ _COLS.T


def _assert_resized(actual: np.ndarray, reference: np.ndarray, message: str = "") -> None:
    """`actual` uint8 is `reference` rounded. ALE rounds in fixed point: values within
    0.01 of a .5 tie may round either way (seen once in 40 Pong steps)."""
    error = np.abs(actual.astype(np.float64) - reference)
    assert error.max() <= 0.51, f"{message}: max error {error.max()}"


def test_ids_map_to_games_and_their_sticky_actions():
    assert is_atari_id("ALE/Pong-v5") and is_atari_id("PongNoFrameskip-v4")
    assert not is_atari_id("CartPole-v1") and not is_atari_id("Pong-v4")
    assert atari_game("ALE/Pong-v5") == ("pong", 0.25)
    assert atari_game("PongNoFrameskip-v4") == ("pong", 0.0)
    assert atari_game("ALE/MsPacman-v5") == ("ms_pacman", 0.25)


@pytest.mark.parametrize("env_id", ["ALE/NoSuchGame-v5", "NoSuchGameNoFrameskip-v4"])
def test_unknown_game_names_the_id(env_id):
    with pytest.raises(ValueError, match=f"'{env_id}'"):
        make_vector_env(env_id, num_envs=1, seed=0)
    with pytest.raises(ValueError, match=f"'{env_id}'"):
        describe_env(env_id)
    with pytest.raises(ValueError, match=f"unknown Atari game in environment id '{env_id}'"):
        make_atari_vector_env(env_id, num_envs=1, seed=0)


def test_describe_env_pong():
    assert describe_env("ALE/Pong-v5") == EnvSpec(
        observation_shape=(84, 84, 4),
        observation_dtype=np.dtype(np.uint8),
        num_actions=6,
        action_distribution=Categorical(6),
        frame_skip=4,
    )


@pytest.mark.parametrize("env_id, sticky", [("ALE/Pong-v5", 0.25), ("PongNoFrameskip-v4", 0.0)])
def test_make_vector_env_pong_shapes_dtypes_and_settings(closing, env_id, sticky):
    env = closing(make_vector_env(env_id, num_envs=3, seed=0))
    assert env.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    assert env.num_envs == 3
    assert env.single_observation_space.shape == (84, 84, 4)
    assert env.single_action_space.n == 6
    assert env.repeat_action_probability == sticky
    obs, _ = env.reset()
    assert obs.shape == (3, 84, 84, 4) and obs.dtype == np.uint8 and obs.flags.c_contiguous
    assert env.observation_space.contains(obs)
    rng = np.random.default_rng(0)
    returns = np.zeros(3)
    for _ in range(100):
        obs, reward, terminated, truncated, _ = env.step(rng.integers(0, 6, 3))
        returns += reward
    assert obs.shape == (3, 84, 84, 4) and obs.dtype == np.uint8
    assert reward.dtype == np.float64 and terminated.dtype == bool and truncated.dtype == bool
    # Raw rewards: ale_py's C++ clipping is off (Pong's scores are +-1 anyway).
    assert set(np.unique(reward)) <= {-1.0, 0.0, 1.0}
    assert returns.min() < 0  # random play concedes points within 400 frames


def test_ale_is_built_without_reward_clipping_and_with_the_literature_settings(monkeypatch):
    # ale_py exposes no getter for these, so record the constructor's arguments.
    from ale_py import vector_env

    built = {}

    class Recording(vector_env.AtariVectorEnv):
        def __init__(self, game, num_envs, **kwargs):
            built.update(kwargs, game=game, num_envs=num_envs)
            super().__init__(game, num_envs, **kwargs)

    monkeypatch.setattr(vector_env, "AtariVectorEnv", Recording)
    make_vector_env("PongNoFrameskip-v4", num_envs=2, seed=0).close()
    assert built["game"] == "pong" and built["num_envs"] == 2
    assert built["reward_clipping"] is False
    assert built["repeat_action_probability"] == 0.0
    assert built["max_num_frames_per_episode"] == 108_000
    assert built["frameskip"] == 4 and built["maxpool"] is True and built["stack_num"] == 4
    assert built["noop_max"] == 30 and built["episodic_life"] is False
    assert built["autoreset_mode"] == AutoresetMode.SAME_STEP


def test_frame_skip_max_pool_grayscale_resize_and_stack_match_ale(closing):
    """Against ALE's single interface, 1 frame per act, deterministic (no sticky, no no-ops)."""
    env = closing(
        make_atari_vector_env("ALE/Pong-v5", num_envs=1, seed=0, sticky_action_prob=0.0, noop_max=0)
    )
    ale = ale_py.ALEInterface()
    ale.setLoggerMode(ale_py.LoggerMode.Error)
    ale.setInt("random_seed", 0)
    ale.setFloat("repeat_action_probability", 0.0)
    ale.setInt("frame_skip", 1)
    ale.loadROM(ale_py.roms.get_rom_path("pong"))
    ale.reset_game()
    action_set = ale.getMinimalActionSet()

    obs, info = env.reset()
    # The reset stack: three zero frames, then the first frame.
    assert not obs[0, ..., :3].any()
    _assert_resized(obs[0, ..., 3], _reference_frame(ale.getScreenGrayscale()), "reset")
    rng = np.random.default_rng(1)
    pooled_differs = 0
    for t in range(40):
        action = int(rng.integers(0, 6))
        screens, reward = [], 0
        for _ in range(4):
            reward += ale.act(action_set[action])
            screens.append(ale.getScreenGrayscale())
        previous = obs
        obs, rewards, terminated, truncated, info = env.step(np.array([action]))
        newest = _reference_frame(np.maximum(screens[-2], screens[-1]))
        pooled_differs += np.abs(newest - _reference_frame(screens[-1])).max() > 1
        _assert_resized(obs[0, ..., 3], newest, f"step {t}")
        # The stack shifts by one: frame k of step t+1 is frame k+1 of step t.
        np.testing.assert_array_equal(obs[0, ..., :3], previous[0, ..., 1:])
        assert rewards[0] == reward
        assert info["episode_frame_number"][0] == 4 * (t + 1) == ale.getEpisodeFrameNumber()
        assert not terminated[0] and not truncated[0]
    assert pooled_differs > 0  # the max over two frames mattered (Pong's ball flickers)


def test_no_sticky_actions_is_deterministic_and_sticky_actions_are_not(closing):
    def observations(sticky: float, seed: int) -> np.ndarray:
        env = closing(
            make_atari_vector_env(
                "ALE/Pong-v5", num_envs=2, seed=seed, sticky_action_prob=sticky, noop_max=0
            )
        )
        obs = [env.reset()[0]]
        for action in np.random.default_rng(0).integers(0, 6, (150, 2)):
            obs.append(env.step(action)[0])
        return np.stack(obs)

    no_sticky = observations(0.0, seed=1)
    np.testing.assert_array_equal(no_sticky, observations(0.0, seed=2))  # seed-independent
    sticky = observations(0.5, seed=1)
    np.testing.assert_array_equal(sticky, observations(0.5, seed=1))  # reproducible per seed
    assert not np.array_equal(sticky, no_sticky)
    assert not np.array_equal(sticky, observations(0.5, seed=2))


def test_terminated_episode_autoresets_in_the_same_step(closing):
    # Breakout with FIRE held and the paddle still: game over (5 lives) after 121 steps.
    def make():
        return closing(
            make_atari_vector_env(
                "ALE/Breakout-v5", num_envs=2, seed=0, sticky_action_prob=0.0, noop_max=0
            )
        )

    env = make()
    first_obs, _ = make().reset()  # deterministic: every episode starts like this
    obs, _ = env.reset()
    np.testing.assert_array_equal(obs, first_obs)
    fire = np.full(2, FIRE)
    for t in range(200):  # noqa: B007 (t is read after the loop)
        previous = obs
        obs, _, terminated, truncated, info = env.step(fire)
        assert not truncated.any()
        if terminated.any():
            break
    else:
        pytest.fail("Breakout did not end within 200 steps")
    assert terminated.all() and t > 100
    np.testing.assert_array_equal(obs, first_obs)  # the new episode's first observation
    final = info["final_obs"]
    assert final.shape == (2, 84, 84, 4)
    np.testing.assert_array_equal(final[..., :3], previous[..., 1:])  # the terminal one
    assert not np.array_equal(final, first_obs)
    assert (info["episode_frame_number"] == 0).all()
    obs, _, terminated, _, info = env.step(fire)
    assert not terminated.any() and (info["episode_frame_number"] == 4).all()


def test_episodic_life_terminates_on_a_life_loss(closing):
    env = closing(
        make_atari_vector_env(
            "ALE/Breakout-v5",
            num_envs=1,
            seed=0,
            sticky_action_prob=0.0,
            noop_max=0,
            episodic_life=True,
        )
    )
    env.reset()
    for t in range(100):  # noqa: B007 (t is read after the loop)
        obs, _, terminated, truncated, _ = env.step(np.array([FIRE]))
        if terminated[0]:
            break
    assert terminated[0] and not truncated[0] and t < 30  # the first life is lost at step 24
    assert obs[0, ..., :3].max() == 0  # a fresh frame stack


def test_episodic_life_restarts_the_whole_game_in_ale_py_0_12(closing):
    """What --episodic-life means with ale_py 0.12.1: the autoreset after a lost life starts a
    new game with all 5 lives, unlike DeepMind's EpisodicLifeEnv (docs/guide/atari.md,
    envs/atari.py)."""
    env = closing(
        make_atari_vector_env(
            "ALE/Breakout-v5",
            num_envs=1,
            seed=0,
            sticky_action_prob=0.0,
            noop_max=0,
            episodic_life=True,
        )
    )
    _, info = env.reset()
    assert info["lives"][0] == 5
    lives_after_each_end = []
    for _ in range(200):
        _, _, terminated, _, info = env.step(np.array([FIRE]))
        if terminated[0]:
            lives_after_each_end.append(int(info["lives"][0]))
    assert len(lives_after_each_end) >= 5  # more life losses than one game has lives
    assert set(lives_after_each_end) == {5}


def test_sticky_actions_and_episodic_life_reach_ale(monkeypatch):
    from ale_py import vector_env

    built = []

    class Recording(vector_env.AtariVectorEnv):
        def __init__(self, game, num_envs, **kwargs):
            built.append(kwargs)
            super().__init__(game, num_envs, **kwargs)

    monkeypatch.setattr(vector_env, "AtariVectorEnv", Recording)
    env = make_vector_env("ALE/Pong-v5", num_envs=1, seed=0, sticky_actions=0.0, episodic_life=True)
    assert env.repeat_action_probability == 0.0
    env.close()
    make_vector_env("PongNoFrameskip-v4", num_envs=1, seed=0, sticky_actions=0.1).close()
    assert [(b["repeat_action_probability"], b["episodic_life"]) for b in built] == [
        (0.0, True),
        (0.1, False),
    ]


def test_frame_limit_truncates_and_autoresets_in_the_same_step(closing):
    env = closing(
        make_atari_vector_env(
            "ALE/Pong-v5",
            num_envs=2,
            seed=0,
            sticky_action_prob=0.0,
            noop_max=0,
            max_num_frames_per_episode=100,
        )
    )
    first_obs, _ = env.reset()
    for t in range(25):  # 100 frames
        obs, _, terminated, truncated, info = env.step(np.zeros(2, np.int64))
        assert truncated.all() == (t == 24)
        assert not terminated.any()
    np.testing.assert_array_equal(obs, first_obs)
    assert info["final_obs"].shape == (2, 84, 84, 4)


def test_reset_mask_resets_only_the_masked_envs(closing):
    env = closing(
        make_atari_vector_env("ALE/Pong-v5", num_envs=2, seed=0, sticky_action_prob=0.0, noop_max=0)
    )
    first_obs, _ = env.reset()
    for _ in range(10):
        obs, *_ = env.step(np.full(2, FIRE))
    reset_obs, _ = env.reset(options={"reset_mask": np.array([True, False])})
    np.testing.assert_array_equal(reset_obs[0], first_obs[0])
    np.testing.assert_array_equal(reset_obs[1], obs[1])


@pytest.mark.parametrize("seed", [2**31 - 1, 2**32 - 1])
def test_seeds_beyond_ale_range_work_and_are_reproducible(closing, seed):
    # Actor seeds are any uint32; ALE takes C ints. Such a seed used to fail in reset.
    def first_frames(s):
        env = closing(make_vector_env("ALE/Pong-v5", num_envs=4, seed=s))
        actions = np.random.default_rng(0).integers(0, 6, (30, 4))
        return [env.step(a)[0] for a in actions][-1]

    np.testing.assert_array_equal(first_frames(seed), first_frames(seed))
