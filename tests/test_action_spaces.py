"""Continuous (`Box`) and multi-discrete actions through the commands a user runs: a Gaussian
MLP on Pendulum trains, resumes and evaluates (under Ray, and quietly); independent categoricals
learn a CartPole pushed by one entry of a MultiDiscrete action."""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
from in_process_cli import command_in_process, refused_in_process
from test_console import foreign_lines

TESTS_DIR = pathlib.Path(__file__).parent


def _run(*args, timeout=300, as_a_user=False, **environ):
    """`python -m impala_rep *args`; `as_a_user`: with TensorFlow's log level unset, as in a
    user's shell (the suite sets it elsewhere to keep the logs short)."""
    env = {k: v for k, v in os.environ.items() if not as_a_user or k != "TF_CPP_MIN_LOG_LEVEL"}
    if not as_a_user:
        env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    path = os.pathsep.join(p for p in (str(TESTS_DIR), os.environ.get("PYTHONPATH")) if p)
    return subprocess.run(
        [sys.executable, "-m", "impala_rep", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(env, PYTHONPATH=path, **environ),
    )


def _records(logdir):
    return [json.loads(line) for line in (logdir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.launches
def test_a_gaussian_policy_trains_on_pendulum_resumes_and_evaluates(tmp_path):
    """The run is also the quiet console's under Ray (a CPU run prints only its own lines;
    under the local launcher: test_console.py): its TensorFlow log level is the user's, and
    RAY_ADDRESS names a Ray that is not there, which the embedded start must not try to join
    (ray.init would wait for it forever). The resume runs in the test's process (--launcher local):
    restoring the policy does not depend on the launcher, and the suite saves a Ray start. The
    greedy evaluation is quiet too, and writes its JSON. It normalises observations by running
    statistics, which the resume restores and goes on moving (they are in the checkpoint)."""
    logdir = tmp_path / "run"
    small = ["--num-actors", "1", "--envs-per-actor", "8", "--unroll-length", "20"]
    done = _run(
        "train",
        "--env",
        "Pendulum-v1",
        "--total-frames",
        "6400",
        "--normalize-observations",
        "--logdir",
        str(logdir),
        *small,
        as_a_user=True,
        RAY_ADDRESS="127.0.0.1:1",
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert foreign_lines(done.stdout) == [] and foreign_lines(done.stderr) == [], done.stderr
    assert "final mean return" in done.stdout
    assert json.loads((logdir / "config.json").read_text())["run"]["launcher"] == "ray"
    records = _records(logdir)
    assert records[-1]["frames"] >= 6400 and records[-1]["loss"] is not None
    assert all(r["loss"] is None or abs(r["loss"]) < 1e6 for r in records)
    counted = max(r.get("observation_count") or 0 for r in records)
    assert counted > 0
    done = command_in_process(
        "train", "--resume", str(logdir), "--total-frames", "9600", "--launcher", "local"
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    resumed = _records(logdir)[len(records) :]
    last = resumed[-1]
    assert last["frames"] >= 9600
    assert min(r["observation_count"] for r in resumed if r.get("observation_count")) >= counted
    out = tmp_path / "evaluation.json"
    done = _run(
        "evaluate",
        str(logdir),
        "--episodes",
        "4",
        "--envs",
        "2",
        "--json",
        str(out),
        as_a_user=True,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stderr == ""  # a quiet console: no TensorFlow notes
    assert done.stdout.count("\n") == 1 and "greedy policy, 4 episodes" in done.stdout
    result = json.loads(out.read_text())
    # The final checkpoint, of the final state; Pendulum pays between -16.3 and 0 a step.
    assert result["checkpoint"].endswith(f"ckpt-{last['learner_steps']}")
    assert result["frames"] == last["frames"]
    assert len(result["returns"]) == 4 and all(-16.3 * 200 <= r <= 0 for r in result["returns"])
    assert f"mean return {np.mean(result['returns']):.2f}" in done.stdout


@pytest.mark.launches
def test_independent_categoricals_learn_a_multi_discrete_cartpole(tmp_path):
    logdir = tmp_path / "run"
    done = command_in_process(
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


def test_an_action_space_no_policy_here_acts_in_exits_2_naming_it(tmp_path, capsys):
    logdir = tmp_path / "run"
    argv = ["train", "--env", "action_spaces_env:UnboundedPendulum-v0", "--logdir", str(logdir)]
    last = refused_in_process(argv, capsys)
    assert (
        "has an infinite bound; allowed: Discrete, MultiDiscrete, or a one-dimensional Box" in last
    )
    assert not logdir.exists()
