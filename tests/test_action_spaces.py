"""Continuous (`Box`) and multi-discrete actions through the commands a user runs: a Gaussian
MLP on Pendulum trains, resumes and evaluates under Ray; independent categoricals learn a
CartPole pushed by one entry of a MultiDiscrete action."""

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
    return subprocess.run(
        [sys.executable, "-m", "impala_rep", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def _records(logdir):
    return [json.loads(line) for line in (logdir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.launches
def test_a_gaussian_policy_trains_on_pendulum_resumes_and_evaluates(tmp_path):
    logdir = tmp_path / "run"
    small = ["--num-actors", "1", "--envs-per-actor", "8", "--unroll-length", "20"]
    done = _run(
        "train", "--env", "Pendulum-v1", "--total-frames", "6400", "--logdir", str(logdir), *small
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    records = _records(logdir)
    assert records[-1]["frames"] >= 6400 and records[-1]["loss"] is not None
    assert all(r["loss"] is None or abs(r["loss"]) < 1e6 for r in records)
    done = _run("train", "--resume", str(logdir), "--total-frames", "9600", *small)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert _records(logdir)[-1]["frames"] >= 9600
    done = _run("evaluate", str(logdir), "--episodes", "2")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "2 episodes" in done.stdout, done.stdout


@pytest.mark.launches
def test_independent_categoricals_learn_a_multi_discrete_cartpole(tmp_path):
    logdir = tmp_path / "run"
    done = _run(
        "train",
        "--env",
        "action_spaces_env:MultiDiscreteCartPole-v0",
        "--launcher",
        "local",
        "--total-frames",
        "150000",
        "--seed",
        "1",
        "--logdir",
        str(logdir),
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # CartPole's defaults reach 475 in ~110k frames; a random policy averages ~22.
    assert _records(logdir)[-1]["episode_return_mean"] > 150


@pytest.mark.launches
def test_an_action_space_no_policy_here_acts_in_exits_2_naming_it(tmp_path):
    logdir = tmp_path / "run"
    done = _run("train", "--env", "action_spaces_env:UnboundedPendulum-v0", "--logdir", str(logdir))
    assert done.returncode == 2, done.stdout + done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert (
        "has an infinite bound; allowed: Discrete, MultiDiscrete, or a one-dimensional Box" in last
    )
    assert not logdir.exists()
