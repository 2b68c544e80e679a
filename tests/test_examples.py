"""The examples run as documented (tiny settings), from outside the repository.

The Ray runs join the session's embedded Ray (conftest.py) through `--ray-address`,
so each costs the training only. Their workers never have examples/ on `sys.path`:
the user's agent and loss reach them by value.
"""

import os
import pathlib
import subprocess
import sys

import pytest

from impala_rep.config import TrainConfig

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"
PASSES = TrainConfig().learner.passes  # the default the examples run with
TINY_RUN = [
    "--total-frames",
    "3200",
    "--num-actors",
    "1",
    "--envs-per-actor",
    "8",
    "--unroll-length",
    "20",
    "--batch-size",
    "8",
]


def _run(args, cwd, timeout=300, *, quiet_console=False):
    """The script's stdout. `quiet_console`: run it as a user does (no log level set) and
    check that TensorFlow's start-up notes stayed off its console."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    proc = subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env if quiet_console else dict(env, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    if quiet_console:
        noise = [
            line
            for line in (proc.stdout + proc.stderr).splitlines()
            if "cuda" in line.lower() or "absl" in line or "cpu_feature_guard" in line
        ]
        assert not noise, noise
    return proc.stdout


def _address(ray):
    return ray.get_runtime_context().gcs_address


@pytest.mark.launches
def test_replicator_supervised_one_and_two_replicas_agree(tmp_path):
    out = _run(
        [str(EXAMPLES / "replicator_supervised.py"), "--steps", "20", "--batch-size", "32"],
        tmp_path,
        quiet_console=True,
    )
    last = out.strip().splitlines()[-1]
    assert last.startswith("max |weight difference|")
    assert float(last.rsplit(" ", 1)[-1]) < 1e-4


def test_custom_agent_example_trains_on_two_replicas(local_ray, tmp_path):
    out = _run(
        [str(EXAMPLES / "custom_agent.py"), *TINY_RUN, "--ray-address", _address(local_ray)],
        tmp_path,
        quiet_console=True,
    )
    last = out.strip().splitlines()[-1]
    # 3,200 frames in batches of 20 x 8: 20 batches, each trained on `passes` times.
    assert last.startswith(f"custom agent: {20 * PASSES} learner steps on cpu:2"), out[-2000:]


def test_the_command_line_takes_the_custom_agent_and_loss_by_file(tmp_path):
    """The example's docstring runs the same agent and loss through the command line, named
    by file: `train`'s preparation, before anything starts (here, in this process), loads
    both, checks them (the agent built and unrolled, the loss applied: run/code_check.py)
    and records them in the run's config. A run through the command with a user's agent and
    loss named by file, on two learner replicas under Ray, the loss's own metric in
    metrics.jsonl: test_user_code.py's; this agent and loss trained on two replicas: above."""
    import ray.cloudpickle

    from impala_rep.run.cli import config_from_args, parse_args
    from impala_rep.run.prepare import prepare

    example = EXAMPLES / "custom_agent.py"
    by_value = set(ray.cloudpickle.list_registry_pickle_by_value())
    try:
        plan = prepare(
            config_from_args(
                parse_args(
                    [
                        "train",
                        "--learner-devices",
                        "cpu:2",
                        "--agent",
                        f"{example}:make_agent",
                        "--loss",
                        f"{example}:l2_regularised_loss",
                        "--logdir",
                        str(tmp_path / "run"),
                    ]
                )
            )
        )
        # The example's agent, inside RND's wrapper (auto: on for vector observations).
        assert type(plan.agent_factory().policy).__name__ == "BatchNormMLPAgent"
    finally:  # the example's module, imported by value for the workers: not for later tests
        for name in set(ray.cloudpickle.list_registry_pickle_by_value()) - by_value:
            module = sys.modules.pop(name, None)
            if module is not None:
                ray.cloudpickle.unregister_pickle_by_value(module)
    config = plan.config.to_json()
    assert config["agent"]["factory"] == f"{example}:make_agent"
    assert config["loss"]["function"] == f"{example}:l2_regularised_loss"
    assert config["learner"]["devices"] == "cpu:2"
    assert not (tmp_path / "run").exists()  # nothing started, nothing written


def test_custom_agent_acts_with_the_network_it_trains():
    """The example's actors (`step`) and learner (`unroll`) compute the same policy from the same
    weights, and only `unroll` moves the batch-norm statistics (docs/guide/custom-agents.md)."""
    import importlib.util

    import numpy as np

    from impala_rep import AgentInputs

    spec = importlib.util.spec_from_file_location(
        "custom_agent_example", EXAMPLES / "custom_agent.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    agent = module.make_agent(observation_shape=(4,), num_actions=2)
    agent.build((4,))
    rng = np.random.default_rng(0)
    weights = agent.get_weights()
    weights[-2] = rng.normal(size=weights[-2].shape).astype(np.float32)  # moving mean
    weights[-1] = rng.uniform(0.5, 2.0, size=weights[-1].shape).astype(np.float32)  # variance
    agent.set_weights(weights)
    t, b = 5, 3
    obs = rng.normal(size=[t, b, 4]).astype(np.float32)
    zeros = np.zeros([t, b], np.float32)
    acted, _ = agent.step(
        AgentInputs(
            obs.reshape(t * b, 4),
            zeros.reshape(-1).astype(np.int32),
            zeros.reshape(-1),
            zeros.reshape(-1).astype(bool),
        ),
        (),
    )
    np.testing.assert_array_equal(agent.get_weights()[-1], weights[-1])  # step: no update
    trained, _ = agent.unroll(
        AgentInputs(obs, zeros.astype(np.int32), zeros, zeros.astype(bool)), ()
    )
    np.testing.assert_allclose(
        np.reshape(trained.policy_logits, [t * b, 2]), acted.policy_logits, rtol=1e-5, atol=1e-6
    )
    assert np.abs(agent.get_weights()[-1] - weights[-1]).max() > 1e-3  # unroll: statistics moved
