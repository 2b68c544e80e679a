"""An actor that hangs (alive, sending nothing) is noticed and replaced, through `train` with
the local launcher's threads; its start-up, however slow, is not taken for a hang. (Under Ray,
with two learner hosts: test_shutdown.py's two-host run.)

The learner gets nothing from its one actor until the hung actor is replaced, so a run that
reaches its frame total proves the replacement.
"""

import json
import os
import pathlib
import subprocess
import sys

import pytest

TESTS_DIR = pathlib.Path(__file__).parent


def _train(tmp_path, *flags, env_id="hanging_env:HangingCartPole-v1", extra_path=None, **environ):
    path = (extra_path, TESTS_DIR, os.environ.get("PYTHONPATH"))
    env = dict(
        os.environ,
        HANGING_ENV_MARKER=str(tmp_path / "hung"),
        **environ,
        PYTHONPATH=os.pathsep.join(str(p) for p in path if p),
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


# A module of the test's own (in tmp_path): the hanging env, slow to start (a wait before
# building each env), so one run shows both sides of the limit on silence.
SLOW_HANGING_ENV = """
import os
import time

import gymnasium
from hanging_env import HangingCartPole


class SlowStartHangingCartPole(HangingCartPole):
    def __init__(self):
        time.sleep(float(os.environ["SLOW_START_S"]))
        super().__init__()


gymnasium.register(id="SlowStartHangingCartPole-v1", entry_point=SlowStartHangingCartPole)
"""


# Under Ray, with two learner hosts (one silent actor stalls both): the resume on two hosts of
# test_shutdown.py's two-host run, which an actor hangs in (one Ray run fewer for the suite).


@pytest.mark.launches
def test_a_hung_actor_slow_to_start_is_replaced_once_and_its_start_up_is_not_taken_for_hung(
    tmp_path,
):
    """With the local launcher's threads. Its 8 envs take 0.75 s each to build: 6 s of
    start-up against a 4-s limit on silence, which counts from the end of start-up, checked
    at every report (each 0.5 s here). Taken for hung, the first actor would be replaced
    before any env hung, and the replacement (as slow to start) again: exactly one restart,
    for the hang, shows that neither start-up counted."""
    (tmp_path / "slow_hanging_env.py").write_text(SLOW_HANGING_ENV)
    done, logdir = _train(
        tmp_path,
        "--num-actors",
        "1",
        "--launcher",
        "local",
        "--actor-timeout",
        "4",
        "--report-every",
        "0.5",
        env_id="slow_hanging_env:SlowStartHangingCartPole-v1",
        extra_path=tmp_path,
        SLOW_START_S="0.75",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "hung").exists()  # an env really hung
    failures = [e for e in _events(logdir) if e["event"] == "actor_restart"]
    assert len(failures) == 1, failures
    assert "sent no unroll for" in failures[0]["cause"] and "hung, replaced" in failures[0]["cause"]
    last = [json.loads(line) for line in (logdir / "metrics.jsonl").read_text().splitlines()][-1]
    assert last["frames"] >= 4000 and last["actor_restarts"] == 1
    assert "hung, replaced" in done.stdout + done.stderr  # the console says it too
