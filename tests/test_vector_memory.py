"""An agent with memory on vector observations (`--use-lstm` over the MLP), through the
commands a user runs: CartPole with its velocities hidden trains, resumes and evaluates."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

TESTS_DIR = pathlib.Path(__file__).parent


def _run(*args, timeout=300):
    env = dict(
        os.environ,
        TF_CPP_MIN_LOG_LEVEL="2",
        PYTHONPATH=os.pathsep.join(p for p in (str(TESTS_DIR), os.environ.get("PYTHONPATH")) if p),
    )
    done = subprocess.run(
        [sys.executable, "-m", "impala_rep", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


@pytest.mark.launches
def test_a_partially_observed_vector_task_trains_with_an_lstm_resumes_and_evaluates(tmp_path):
    logdir = tmp_path / "run"
    common = ["--launcher", "local", "--num-actors", "1", "--envs-per-actor", "8"]
    _run(
        "train",
        "--env",
        "masked_cartpole:MaskedCartPole-v1",
        "--use-lstm",
        "--unroll-length",
        "20",
        "--batch-size",
        "8",
        "--total-frames",
        "3200",
        "--logdir",
        str(logdir),
        *common,
    )
    config = json.loads((logdir / "config.json").read_text())
    assert config["agent"]["use_lstm"] is True and config["agent"]["network"] == "auto"
    records = [json.loads(line) for line in (logdir / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["frames"] >= 3200 and records[-1]["loss"] is not None
    _run("train", "--resume", str(logdir), "--total-frames", "4800", *common)
    records = [json.loads(line) for line in (logdir / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["frames"] >= 4800
    done = _run("evaluate", str(logdir), "--episodes", "3")
    assert "3 episodes" in done.stdout, done.stdout
