"""An actor that hangs (alive, sending nothing) is noticed and replaced, through `train`.

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


def _train(tmp_path, *flags):
    env = dict(os.environ, HANGING_ENV_MARKER=str(tmp_path / "hung"),
               PYTHONPATH=os.pathsep.join(p for p in (str(TESTS_DIR), os.environ.get("PYTHONPATH"))
                                          if p))
    logdir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "impala_rep", "train", "--env", "hanging_env:HangingCartPole-v1",
         "--envs-per-actor", "8", "--batch-size", "8", "--total-frames", "4000",
         "--actor-timeout", "20", "--logdir", str(logdir), *flags],
        capture_output=True, text=True, timeout=600, env=env)
    return done, logdir


def _events(logdir):
    return [json.loads(line) for line in (logdir / "events.jsonl").read_text().splitlines()]


# Under Ray with two learner hosts (actor s feeds host s % 2, so the hung actor's host
# has no batch and both wait), and with the local launcher's threads. Ray's replacement
# actor imports TensorFlow within its 20 s (a second restart would fail the test); a local
# replacement is a thread of a process that has, so 8 s is ample there.
@pytest.mark.parametrize("flags", [
    ["--num-actors", "2", "--learner-hosts", "2"],
    ["--num-actors", "1", "--launcher", "local", "--actor-timeout", "8"],
], ids=["ray-two-learner-hosts", "local"])
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
