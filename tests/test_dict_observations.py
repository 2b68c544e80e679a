"""Dict observations: the keys `--observation-keys` keeps, one part as it is, several
flattened or, with an image among them, a nest (tests/test_observation_nests.py carries it on),
and the refusals of a part no network takes and of keys that are not there."""

import gymnasium
import numpy as np
import pytest
from in_process_cli import refused_in_process

from impala_rep.config import EnvConfig
from impala_rep.envs import check_env_options, describe_env, make_vector_env
from impala_rep.observation_nest import rows

# tests/observation_spaces_env.py: MiniGrid's layout on CartPole. "image" [5, 5, 3] uint8
# (every cell the step number mod 11), "direction" Discrete(4) (the step number mod 4),
# "mission" Text.
GRID = "observation_spaces_env:GridObservation-v0"
KEPT = ("image", "direction")


def _steps_seen(env_id, keys, steps=14):
    """Sub-env 0's observations after reset and `steps` steps, each with the number of
    steps into its episode (an episode's end resets the count: the observation returned
    then is the next episode's first)."""
    env = make_vector_env(env_id, num_envs=2, seed=5, observation_keys=keys)
    try:
        seen = [(rows(env.reset()[0], 0), 0)]
        for _ in range(steps):
            obs, _, terminated, truncated, _ = env.step(np.zeros(2, np.int64))
            seen.append((rows(obs, 0), 0 if terminated[0] or truncated[0] else seen[-1][1] + 1))
        return seen
    finally:
        env.close()


def test_a_part_no_network_takes_is_refused_naming_the_key_and_the_flag():
    with pytest.raises(ValueError) as error:
        describe_env(GRID)
    assert str(error.value) == (
        f"environment {GRID!r}: observation key 'mission' is a Text space, which no network "
        "here takes; keep the others with --observation-keys (its keys: direction, image, "
        "mission)"
    )


def test_one_kept_key_is_that_part_as_it_is():
    spec = describe_env(GRID, observation_keys=("image",))
    assert spec.observation_shape == (5, 5, 3) and spec.observation_dtype == np.uint8
    assert spec.observation_bounds is None  # an image: the CNN scales it
    for obs, step in _steps_seen(GRID, ("image",)):
        assert obs.dtype == np.uint8
        np.testing.assert_array_equal(obs, np.full((5, 5, 3), step % 11))


def test_an_image_kept_with_other_keys_is_a_nest_of_the_image_and_each_part_one_hot():
    spec = describe_env(GRID, observation_keys=("image", "direction"))
    assert spec.observation_shape == {"direction": (4,), "image": (5, 5, 3)}
    assert spec.observation_dtype == {"direction": np.uint8, "image": np.uint8}
    assert spec.observation_bounds is None  # the CNN scales the image; the code is 0/1
    for obs, step in _steps_seen(GRID, ("image", "direction")):
        assert sorted(obs) == ["direction", "image"]
        np.testing.assert_array_equal(obs["direction"], np.eye(4, dtype=np.uint8)[step % 4])
        np.testing.assert_array_equal(obs["image"], np.full((5, 5, 3), step % 11, np.uint8))


def test_several_kept_keys_without_an_image_are_flattened_in_key_order():
    mixed = "observation_spaces_env:MixedObservation-v0"
    spec = describe_env(mixed, observation_keys=("state", "phase"))
    # gymnasium orders a Dict's keys alphabetically: phase's one-hot codes, then the state.
    assert spec.observation_shape == (2 + 3 + 4,) and spec.observation_dtype == np.float32
    low, high = spec.observation_bounds
    assert (low[:5], high[:5]) == ((0.0,) * 5, (1.0,) * 5)
    for obs, step in _steps_seen(mixed, ("state", "phase")):
        np.testing.assert_array_equal(obs[:5], [*np.eye(2)[step % 2], *np.eye(3)[step % 3]])


def test_vectors_and_discrete_parts_asked_for_as_a_nest_keep_each_part_apart():
    # A user's agent takes them so (`observation_nests`, auto: on for --agent).
    mixed = "observation_spaces_env:MixedObservation-v0"
    spec = describe_env(mixed, observation_nests=True)
    assert spec.observation_shape == {"phase": (5,), "state": (4,)}
    assert spec.observation_dtype == {"phase": np.uint8, "state": np.float32}
    assert spec.observation_bounds is None
    env = make_vector_env(mixed, num_envs=2, seed=5, observation_nests=True)
    try:
        first = env.reset()[0]
        assert sorted(first) == ["phase", "state"] and first["state"].shape == (2, 4)
        for step in range(1, 4):
            obs, _, terminated, truncated, _ = env.step(np.zeros(2, np.int64))
            assert not (terminated.any() or truncated.any())
            expected = [*np.eye(2)[step % 2], *np.eye(3)[step % 3]]
            np.testing.assert_array_equal(obs["phase"], np.array([expected] * 2, np.uint8))
            assert obs["state"].dtype == np.float32
    finally:
        env.close()


def test_a_tuple_with_an_image_is_a_nest_under_its_positions_bool_pixels_as_uint8():
    env_id = "observation_spaces_env:PixelsAndState-v0"
    spec = describe_env(env_id)
    assert spec.observation_shape == {"0": (4, 4, 2), "1": (4,)}
    assert spec.observation_dtype == {"0": np.uint8, "1": np.float32}
    for obs, step in _steps_seen(env_id, None, steps=5):
        np.testing.assert_array_equal(obs["0"], np.full((4, 4, 2), 255 * (step % 2), np.uint8))
        assert obs["1"].shape == (4,) and obs["1"].dtype == np.float32


def test_a_truncated_episodes_last_observation_keeps_the_keys_too():
    env = make_vector_env(
        GRID, num_envs=1, seed=0, observation_keys=("image",), max_episode_steps=3
    )
    try:
        env.reset()
        for _ in range(3):
            obs, _, terminated, truncated, info = env.step(np.zeros(1, np.int64))
        assert truncated[0] and not terminated[0]
        np.testing.assert_array_equal(info["final_obs"][0], np.full((5, 5, 3), 3))
        np.testing.assert_array_equal(obs[0], np.zeros((5, 5, 3)))  # the next episode's first
    finally:
        env.close()


def test_a_truncated_episodes_last_nest_is_in_the_info_as_the_agent_takes_it():
    env = make_vector_env(GRID, num_envs=2, seed=0, observation_keys=KEPT, max_episode_steps=3)
    try:
        env.reset()
        for _ in range(3):
            obs, _, terminated, truncated, info = env.step(np.zeros(2, np.int64))
        assert truncated.all() and not terminated.any()
        for i in range(2):
            final = info["final_obs"][i]
            assert sorted(final) == ["direction", "image"]
            np.testing.assert_array_equal(final["image"], np.full((5, 5, 3), 3, np.uint8))
            np.testing.assert_array_equal(final["direction"], np.eye(4, dtype=np.uint8)[3])
        np.testing.assert_array_equal(obs["image"], np.zeros((2, 5, 5, 3)))  # the next firsts
    finally:
        env.close()


def test_an_image_part_no_cnn_takes_is_refused_naming_it():
    env_id = "observation_spaces_env:WideIntegerPixels-v0"
    with pytest.raises(ValueError) as error:
        describe_env(env_id)
    assert str(error.value) == (
        "observation part 'image' is an image of dtype int64 with bounds beyond [0, 255]; "
        "the CNNs take uint8 pixels, or floats already scaled"
    )


@pytest.mark.parametrize(
    "env_id, keys, message",
    [
        (
            GRID,
            ("image", "colour"),
            f"bad observation_keys 'image,colour': environment {GRID!r} has no observation key "
            "'colour'; its keys: direction, image, mission",
        ),
        (
            GRID,
            ("mission", "image"),
            f"bad observation_keys 'mission,image': environment {GRID!r}'s observation key "
            "'mission' is a Text space, which no network here takes",
        ),
        (
            "CartPole-v1",
            ("image",),
            "bad observation_keys 'image': they select parts of Dict observations, and "
            "environment 'CartPole-v1' has Box observations; leave them out",
        ),
    ],
)
def test_keys_that_cannot_be_kept_are_refused_in_one_line(env_id, keys, message):
    with pytest.raises(ValueError) as error:
        describe_env(env_id, observation_keys=keys)
    assert str(error.value) == message


@pytest.mark.parametrize("keys", [(), ("image", "image"), ("image", ""), "image", ("image", 3)])
def test_the_config_takes_distinct_keys_only(keys):
    with pytest.raises(ValueError, match="^bad observation_keys "):
        EnvConfig(observation_keys=keys)


@pytest.mark.parametrize(
    "flag, message",
    [
        (
            "image,colour",
            f"bad observation_keys 'image,colour': environment {GRID!r} has no observation key",
        ),
        ("image,image", "argument --observation-keys: expected comma-separated names"),
    ],
)
def test_the_command_refuses_bad_keys_before_anything_is_written(flag, message, tmp_path, capsys):
    logdir = tmp_path / "run"
    argv = ["train", "--env", GRID, "--observation-keys", flag, "--logdir", str(logdir)]
    last = refused_in_process(argv, capsys)
    assert last.startswith("impala-rep") and message in last, last
    assert not logdir.exists()


def test_the_kept_keys_are_what_gymnasium_keeps():
    # The reference: gymnasium's own FilterObservation and FlattenObservation, by hand.
    mixed = "observation_spaces_env:MixedObservation-v0"
    reference = gymnasium.wrappers.FlattenObservation(
        gymnasium.wrappers.FilterObservation(
            gymnasium.make(mixed.split(":")[1]), ["phase", "state"]
        )
    )
    try:
        # Sub-env 0 is reset with the seed itself when built; a plain reset follows on.
        reference.reset(seed=5)
        obs, _ = reference.reset()
        assert (
            reference.observation_space.shape
            == describe_env(mixed, observation_keys=("phase", "state")).observation_shape
        )
        np.testing.assert_allclose(obs, _steps_seen(mixed, ("phase", "state"))[0][0])
    finally:
        reference.close()


def _planes_by_hand(image):
    """The one-hot planes of MiniGrid's [H, W, 3] codes, cell by cell: 11 object planes, 6
    colour planes, 4 state planes."""
    planes = np.zeros((*image.shape[:2], 21), np.uint8)
    for row in range(image.shape[0]):
        for col in range(image.shape[1]):
            thing, colour, state = (int(v) for v in image[row, col])
            planes[row, col, thing] = planes[row, col, 11 + colour] = 255
            planes[row, col, 17 + state] = 255
    return planes


def test_minigrid_needs_its_mission_left_out_and_gives_its_image_to_the_cnn_as_one_hot_planes():
    env_id = "MiniGrid-DoorKey-5x5-v0"
    with pytest.raises(ValueError) as error:
        describe_env(env_id)
    assert str(error.value).startswith(f"environment {env_id!r}: observation key 'mission' is a ")
    assert str(error.value).endswith("(its keys: direction, image, mission)")
    spec = describe_env(env_id, observation_keys=("image",))
    assert (spec.observation_shape, spec.observation_dtype) == ((7, 7, 21), np.uint8)
    env = make_vector_env(env_id, num_envs=2, seed=0, observation_keys=("image",))
    reference = gymnasium.make(env_id)
    try:
        # Sub-env 0 is reset with the seed itself when built; a plain reset follows on.
        reference.reset(seed=0)
        images = [reference.reset()[0]["image"]]
        seen = [env.reset()[0][0]]
        # Turn and step: walls, the key, the door and the goal come into view.
        for action in (0, 2, 2, 1, 1, 2, 3, 5):
            images.append(reference.step(action)[0]["image"])
            seen.append(env.step(np.array([action, action]))[0][0])
    finally:
        env.close()
        reference.close()
    assert seen[0].shape == (7, 7, 21)
    for obs, image in zip(seen, images):
        np.testing.assert_array_equal(obs, _planes_by_hand(image))
    kinds = {int(k) for image in images for k in np.unique(image[..., 0])}
    assert {1, 2, 4, 5} <= kinds, kinds  # empty, wall, door and key were seen and coded


def test_minigrid_with_its_direction_is_a_nest_of_the_planes_and_the_direction_one_hot():
    env_id = "MiniGrid-DoorKey-5x5-v0"
    spec = describe_env(env_id, observation_keys=("image", "direction"))
    assert spec.observation_shape == {"direction": (4,), "image": (7, 7, 21)}
    env = make_vector_env(env_id, num_envs=1, seed=0, observation_keys=("image", "direction"))
    reference = gymnasium.make(env_id)
    try:
        obs = rows(env.reset()[0], 0)
        reference.reset(seed=0)
        raw = reference.reset()[0]
    finally:
        env.close()
        reference.close()
    np.testing.assert_array_equal(obs["direction"], np.eye(4)[raw["direction"]])
    np.testing.assert_array_equal(obs["image"], _planes_by_hand(raw["image"]))


def test_minigrid_wrappers_codes_get_planes_and_what_they_made_of_them_is_kept():
    import minigrid.wrappers

    from impala_rep.envs.minigrid import one_hot_image

    def first(wrapper):
        env = one_hot_image(wrapper(gymnasium.make("MiniGrid-DoorKey-5x5-v0")))
        raw = wrapper(gymnasium.make("MiniGrid-DoorKey-5x5-v0"))
        try:
            return env.observation_space, env.reset(seed=3)[0], raw.reset(seed=3)[0]
        finally:
            env.close()
            raw.close()

    # The image alone (a Box), and the whole grid with the agent's direction in its state code.
    space, obs, raw = first(minigrid.wrappers.ImgObsWrapper)
    assert space.shape == obs.shape == (7, 7, 21)
    np.testing.assert_array_equal(obs, _planes_by_hand(raw))
    space, obs, raw = first(minigrid.wrappers.FullyObsWrapper)
    assert space["image"].shape == obs["image"].shape == (5, 5, 21)
    np.testing.assert_array_equal(obs["image"], _planes_by_hand(raw["image"]))
    assert 10 in raw["image"][..., 0]  # the agent, its direction in the state code
    # Pixels, one 8x8 tile per cell: kept as they are.
    space, obs, raw = first(minigrid.wrappers.RGBImgPartialObsWrapper)
    assert space["image"].shape == obs["image"].shape == (56, 56, 3)
    np.testing.assert_array_equal(obs["image"], raw["image"])


@pytest.mark.parametrize("env_id", ["MinAtar/Breakout-v1", "ALE/Pong-v5"])
def test_keys_for_an_atari_or_minatar_id_are_refused_before_anything_is_built(env_id):
    # Their images are of the platform's own making: no Dict to select from.
    expected = (
        "bad observation_keys 'image': they select parts of Dict observations, and "
        f"environment {env_id!r} has Box observations; leave them out"
    )
    for check in (
        lambda: check_env_options(env_id, observation_keys=("image",)),
        lambda: describe_env(env_id, observation_keys=("image",)),
        lambda: make_vector_env(env_id, num_envs=1, seed=0, observation_keys=("image",)),
    ):
        with pytest.raises(ValueError) as error:
            check()
        assert str(error.value) == expected
