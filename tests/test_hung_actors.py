"""An actor that hangs (alive, sending nothing) is noticed and replaced, through `train`;
one that is only slow to start is not.

In both cases the learner gets nothing until the hung actor is replaced (one
actor; or two learner hosts, which step together, so one silent actor stalls
both), so a run that reaches its frame total proves the replacement.
"""

import json
import os
import pathlib
import subprocess
import sys

import pytest

TESTS_DIR = pathlib.Path(__file__).parent


def _train(tmp_path, *flags, env_id="hanging_env:HangingCartPole-v1", **environ):
    env = dict(
        os.environ,
        HANGING_ENV_MARKER=str(tmp_path / "hung"),
        **environ,
        PYTHONPATH=os.pathsep.join(p for p in (str(TESTS_DIR), os.environ.get("PYTHONPATH")) if p),
    )
    logdir = tmp_path / "run"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "impala_rep",
            "train",
            "--env",
            env_id,
            "--envs-per-actor",
            "8",
            "--batch-size",
            "8",
            "--total-frames",
            "4000",
            "--actor-timeout",
            "12",
            "--logdir",
            str(logdir),
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    return done, logdir


def _events(logdir):
    path = logdir / "events.jsonl"  # written at the first event
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


# Under Ray with two learner hosts (actor s feeds host s % 2, so the hung actor's host
# has no batch and both wait), and with the local launcher's threads. A replacement's
# start-up (Ray's: a process, its envs, tens of seconds on a loaded machine) does not
# count against the limit (a second restart would fail the test).
@pytest.mark.parametrize(
    "flags",
    [
        ["--num-actors", "2", "--learner-hosts", "2"],
        ["--num-actors", "1", "--launcher", "local", "--actor-timeout", "8"],
    ],
    ids=["ray-two-learner-hosts", "local"],
)
@pytest.mark.launches
def test_a_hung_actor_is_replaced_and_the_run_finishes(tmp_path, flags):
    done, logdir = _train(tmp_path, *flags)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "hung").exists()  # an env really hung
    failures = [e for e in _events(logdir) if e["event"] == "actor_restart"]
    assert len(failures) == 1, failures
    assert "sent no unroll for" in failures[0]["cause"] and "hung, replaced" in failures[0]["cause"]
    last = [json.loads(line) for line in (logdir / "metrics.jsonl").read_text().splitlines()][-1]
    assert last["frames"] >= 4000 and last["actor_restarts"] == 1
    assert "hung, replaced" in done.stdout + done.stderr  # the console says it too


@pytest.mark.launches
def test_an_actor_slow_to_start_is_not_taken_for_hung(tmp_path):
    """Its 8 envs take 1 s each to build: 8 s of start-up against a 4-s limit on
    silence, which counts from the end of start-up."""
    done, logdir = _train(
        tmp_path,
        "--num-actors",
        "1",
        "--launcher",
        "local",
        "--actor-timeout",
        "4",
        env_id="slow_start_env:SlowStartCartPole-v1",
        SLOW_START_S="1.0",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert [e for e in _events(logdir) if e["event"] == "actor_restart"] == []
    last = [json.loads(line) for line in (logdir / "metrics.jsonl").read_text().splitlines()][-1]
    assert last["frames"] >= 4000 and last["actor_restarts"] == 0
