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


@pytest.mark.parametrize(
    "env_id, message",
    [
        ("ALE/Pong-v5", "Atari ids play in ale_py's vector env, which draws no frames"),
        ("observation_spaces_env:TextObservation-v0", "cannot render a video: "),
    ],
)
def test_envs_that_draw_no_frames_are_refused(env_id, message):
    with pytest.raises(ValueError, match=message):
        make_vector_env(env_id, num_envs=1, seed=0, frames=[])


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
