"""A short Atari run through Ray: pixel observations, the IMPALA CNN with an LSTM core."""

import json

import pytest

pytest.importorskip("ale_py")
ray = pytest.importorskip("ray")

from impala_rep.config import TrainConfig  # noqa: E402
from impala_rep.config.presets import PRESETS  # noqa: E402
from impala_rep.run.training import train  # noqa: E402


def test_pong_smoke_run_with_lstm(local_ray, tmp_path):
    settings = dict(PRESETS["atari"])
    # A few learner steps in CI time: small batches, a handful of envs.
    # total_frames counts env frames: 4 per agent step with Atari's frame skip.
    settings.update(envs_per_actor=4, unroll_length=10, batch_size=8, total_frames=4 * 10 * 8 * 3)
    config = TrainConfig.from_keys(
        dict(
            env="ALE/Pong-v5",
            num_actors=1,
            use_lstm=True,
            seed=3,
            logdir=str(tmp_path / "run"),
            report_every=1.0,
            **settings,
        )
    )
    result = train(config)
    assert result.learner_steps >= 3
    assert result.frames == 4 * 10 * 8 * result.learner_steps  # reported in env frames
    records = [
        json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    ]
    last = records[-1]
    assert last["loss"] is not None and last["grad_norm"] is not None and last["grad_norm"] > 0
    assert last["frames_produced"] == last["frames"] + last["frames_queued"]
