"""The examples run as documented (tiny settings), from outside the repository.

The Ray runs join the session's embedded Ray (conftest.py) through `--ray-address`,
so each costs the training only. Their workers never have examples/ on `sys.path`:
the user's agent and loss reach them by value.
"""

import json
import os
import pathlib
import subprocess
import sys

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"
TINY_RUN = ["--total-frames", "3200", "--num-actors", "1", "--envs-per-actor", "8",
            "--unroll-length", "20", "--batch-size", "8"]


def _run(args, cwd, timeout=300):
    proc = subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def _address(ray):
    return ray.get_runtime_context().gcs_address


def test_replicator_supervised_one_and_two_replicas_agree(tmp_path):
    out = _run([str(EXAMPLES / "replicator_supervised.py"), "--steps", "20", "--batch-size", "32"], tmp_path)
    last = out.strip().splitlines()[-1]
    assert last.startswith("max |weight difference|")
    assert float(last.rsplit(" ", 1)[-1]) < 1e-4


def test_custom_agent_example_trains_on_two_replicas(local_ray, tmp_path):
    out = _run([str(EXAMPLES / "custom_agent.py"), *TINY_RUN, "--ray-address", _address(local_ray)],
               tmp_path)
    last = out.strip().splitlines()[-1]
    assert last.startswith("custom agent: 20 learner steps on cpu:2"), out[-2000:]


def test_cli_trains_the_custom_agent_named_by_file(local_ray, tmp_path):
    example = EXAMPLES / "custom_agent.py"
    logdir = tmp_path / "run"
    _run(["-m", "impala_rep", "train", "--agent", f"{example}:make_agent",
          "--loss", f"{example}:l2_regularised_loss", "--learner-devices", "cpu:2", *TINY_RUN,
          "--ray-address", _address(local_ray), "--logdir", str(logdir)], tmp_path)
    config = json.loads((logdir / "config.json").read_text())
    assert config["agent"] == f"{example}:make_agent"
    assert config["loss"] == f"{example}:l2_regularised_loss"
    records = [json.loads(line) for line in (logdir / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["learner_steps"] == 20 and records[-1]["loss"] is not None
