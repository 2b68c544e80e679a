"""`impala-rep evaluate --video`: the first evaluation episode, as the env draws it, in a GIF;
envs that draw no frames refused before anything is played or written."""

import json

import gymnasium
import numpy as np
import pytest
from in_process_cli import command_in_process
from PIL import Image

from impala_rep.envs import make_vector_env
from impala_rep.run.video import write_gif


def test_the_first_episode_is_drawn_frame_by_frame_then_recording_stops():
    frames = []
    env = make_vector_env("CartPole-v1", num_envs=2, seed=0, max_episode_steps=5, frames=frames)
    try:
        env.reset()  # as the actor does: on from the seeded reset, which started no episode
        for _ in range(12):  # the first episode's 5 steps, then two more episodes
            env.step(np.zeros(2, np.int64))
    finally:
        env.close()
    assert len(frames) == 1 + 5
    assert all(f.shape == (400, 600, 3) and f.dtype == np.uint8 for f in frames)
    # The same frames gymnasium's own CartPole draws, from the same seeding.
    reference = gymnasium.make("CartPole-v1", render_mode="rgb_array")
    try:
        reference.reset(seed=0)
        reference.reset()
        expected = [reference.render()]
        for _ in range(5):
            reference.step(0)
            expected.append(reference.render())
    finally:
        reference.close()
    for got, want in zip(frames, expected, strict=True):
        np.testing.assert_array_equal(got, want)


def test_minatar_draws_its_grid_which_the_gif_enlarges_to_pixels(tmp_path):
    frames = []
    env = make_vector_env("MinAtar/Breakout-v1", num_envs=1, seed=0, frames=frames)
    try:
        env.reset()
        for _ in range(3):
            env.step(np.zeros(1, np.int64))
    finally:
        env.close()
    assert len(frames) == 4 and frames[0].shape == (10, 10, 3)
    write_gif(str(tmp_path / "breakout.gif"), frames, fps=10, episode_return=0.0)
    with Image.open(tmp_path / "breakout.gif") as image:
        assert image.size == (160, 160)  # each of the 10x10 cells a 16x16 square
        pixels = np.asarray(image.convert("RGB"))
    expected = np.round(frames[0] * 255).astype(np.uint8).repeat(16, 0).repeat(16, 1)
    np.testing.assert_array_equal(pixels, expected)


def test_an_atari_game_is_drawn_by_a_twin_that_plays_the_agents_game_in_colour():
    """ale_py's vector env draws no frames: a twin drawing the whole screen in colour, seeded
    and stepped alike, plays the same game (sticky actions and no-op resets included), which
    the twin's screens, reduced as the agent's are, show: the agent's newest frame."""
    pytest.importorskip("ale_py")
    frames = []
    env = make_vector_env("ALE/Breakout-v5", num_envs=1, seed=3, frames=frames)
    rng = np.random.default_rng(0)
    observations, lengths, length = [], [], 0
    try:
        observations.append(env.reset()[0])
        for _ in range(400):  # several games of random play: the first is recorded
            obs, _, terminated, truncated, _ = env.step(rng.integers(0, 4, size=1))
            observations.append(obs)
            length += 1
            if terminated[0] or truncated[0]:
                lengths.append(length)
                length = 0
    finally:
        env.close()
    assert lengths, "no game ended in 400 steps of random play"
    assert len(frames) == 1 + lengths[0]
    assert all(f.shape == (210, 160, 3) and f.dtype == np.uint8 for f in frames)
    # The twin's screens, reduced to grey and 84x84 by a slow reference, are the agent's
    # newest frames (up to the two reductions' rounding): the same game.
    agent_newest = [o[0, :, :, -1] for o in observations[: len(frames) - 1]]
    luminance = [f @ np.array([0.299, 0.587, 0.114]) for f in frames[:-1]]
    for got, want in zip(luminance[::25], agent_newest[::25], strict=True):
        small = _area_resize(got, 84, 84)
        assert np.abs(small - want).mean() < 0.1  # ~0.06; a few steps apart: 0.14 to 0.5


def _area_resize(image, height, width):
    """A slow reference of an area (box-filter) resize of a 2-D image."""
    rows = np.linspace(0, image.shape[0], height + 1)
    cols = np.linspace(0, image.shape[1], width + 1)
    out = np.empty((height, width))
    for i in range(height):
        for j in range(width):
            r0, r1, c0, c1 = rows[i], rows[i + 1], cols[j], cols[j + 1]
            rr = np.arange(int(r0), int(np.ceil(r1)))
            cc = np.arange(int(c0), int(np.ceil(c1)))
            wr = np.minimum(rr + 1, r1) - np.maximum(rr, r0)
            wc = np.minimum(cc + 1, c1) - np.maximum(cc, c0)
            out[i, j] = wr @ image[np.ix_(rr, cc)] @ wc / (wr.sum() * wc.sum())
    return out


def test_envs_that_draw_no_frames_are_refused():
    with pytest.raises(ValueError, match="cannot render a video: "):
        make_vector_env("observation_spaces_env:TextObservation-v0", num_envs=1, seed=0, frames=[])
    with pytest.raises(ValueError, match="a video is recorded from 1 env, got num_envs 2"):
        make_vector_env("ALE/Breakout-v5", num_envs=2, seed=0, frames=[])


@pytest.mark.launches
def test_evaluate_writes_the_first_episode_as_a_gif_with_its_return(tmp_path):
    run = tmp_path / "run"
    trained = command_in_process(
        "train", "--env", "CartPole-v1", "--launcher", "local", "--num-actors", "1",
        "--envs-per-actor", "16", "--total-frames", "20000", "--logdir", str(run),
    )  # fmt: skip
    assert trained.returncode == 0, trained.stderr[-3000:]
    gif, scores = tmp_path / "episode.gif", tmp_path / "scores.json"
    played = command_in_process(
        "evaluate", str(run), "--episodes", "2", "--video", str(gif), "--json", str(scores)
    )
    assert played.returncode == 0, played.stderr[-3000:]
    result = json.loads(scores.read_text())
    first_return, first_length = result["returns"][0], result["lengths"][0]
    assert f"video of episode 1 (return {first_return:.2f}): {gif}" in played.stdout
    with Image.open(gif) as image:
        assert image.info["comment"].decode() == (
            f"impala-rep evaluate: episode return {first_return:.2f}"
        )
        # Its first observation, then each step, at CartPole's 50 frames a second (20 ms
        # each; Pillow merges identical frames into one, adding up their durations).
        shown = 0
        for index in range(image.n_frames):
            image.seek(index)
            shown += image.info["duration"]
    assert shown == 20 * (first_length + 1)
    for flags, message in (
        (["--video", str(tmp_path / "episode.mp4")], "give a path ending in .gif"),
        (["--video", str(tmp_path / "more.gif"), "--envs", "2"], "a video is played on 1 env"),
    ):
        refused = command_in_process("evaluate", str(run), "--episodes", "2", *flags)
        assert refused.returncode == 2 and message in refused.stderr, refused.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["episode.gif", "run", "scores.json"]


def test_a_long_still_episode_is_cut_at_ten_minutes_and_still_written(tmp_path):
    """A game nobody starts shows one screen for its whole half hour: Pillow merges identical
    frames into one, whose duration would overflow the GIF's 16 bits; the video stops at ten
    minutes."""
    still = [np.zeros((160, 160, 3), np.uint8)] * (30 * 60)  # 30 minutes at 1 a second
    write_gif(str(tmp_path / "still.gif"), still, fps=1, episode_return=0.0)
    with Image.open(tmp_path / "still.gif") as image:
        shown = 0
        for index in range(image.n_frames):
            image.seek(index)
            shown += image.info["duration"]
    assert shown == pytest.approx(600_000, rel=0.01)
