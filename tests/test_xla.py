"""XLA for the learner's step (`--learner-xla`): the same updates as the graph step, decided
automatically only for the built-in MLP on one CPU, and refused where XLA cannot go."""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from random_unrolls import random_unroll

from impala_rep import Replicator
from impala_rep.config import TrainConfig
from impala_rep.learner.learner import Learner
from impala_rep.run.cli import config_from_args, parse_args
from impala_rep.run.prepare import prepare
from impala_rep.run.resume import load_run_config, resumed_config

T, B = 5, 8
EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "custom_agent.py"


def _plan_learners(*argv):
    """Two Learners of the run `train *argv` would build (its agent, its loss with RND and
    PopArt wrapped in as the flags say), one stepping with XLA, one without, same weights."""
    plan = prepare(config_from_args(parse_args(["train", *argv])))
    config = plan.config
    learners = [
        Learner(
            agent=plan.agent_factory(),
            replicator=Replicator("cpu", jit_compile=jit),
            observation_shape=plan.observation_shape,
            total_steps=100,
            loss=config.loss,
            optimizer=config.optimizer,
            loss_fn=plan.loss_fn,
            loss_grad_norms=True,
        )
        for jit in (True, False)
    ]
    learners[0].agent.set_weights(learners[1].agent.get_weights())
    return plan, learners


@pytest.mark.compiles
@pytest.mark.parametrize(
    "argv",
    [("--env", "CartPole-v1"), ("--env", "Acrobot-v1", "--popart", "--kl-cost", "0.1")],
    ids=["cartpole-defaults", "acrobot-rnd-popart-kl"],
)
def test_the_xla_step_makes_the_graph_steps_updates(argv):
    plan, (xla, graph) = _plan_learners(*argv)
    assert plan.config.learner.xla is True  # auto: the built-in MLP on one CPU
    initial = graph.get_weights()[1]
    for seed in range(3):
        batch = random_unroll(
            T=T, B=B, obs_size=plan.observation_shape[0], num_actions=plan.num_actions, seed=seed
        )
        if "Acrobot-v1" in argv and seed < 2:
            batch = batch._replace(rewards=-np.ones_like(batch.rewards))  # RND's step costs: on
        got, want = xla.step(batch, passes=3), graph.step(batch, passes=3)
        assert got.keys() == want.keys()
        for key in want:
            np.testing.assert_allclose(got[key], want[key], rtol=2e-4, atol=1e-5, err_msg=key)
    assert xla.num_steps == graph.num_steps == 9
    if "Acrobot-v1" in argv:
        assert want["rnd_on"] == 0.0 and got["rnd_on"] == 0.0  # the third batch: RND off
    for a, b in zip(xla.get_weights()[1], graph.get_weights()[1]):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-5)
    assert all(not np.allclose(a, b) for a, b in zip(xla.get_weights()[1][:2], initial[:2]))


@pytest.mark.launches
def test_a_replicator_refuses_xla_over_several_replicas():
    """In a new process: the logical device count is fixed when TensorFlow starts."""
    code = (
        "from impala_rep import Replicator\n"
        "try:\n    Replicator('cpu:2', jit_compile=True)\n"
        "except ValueError as err:\n    print(err)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    assert out.stdout.strip() == (
        "jit_compile needs one replica, got 2 from devices 'cpu:2'; use one device or no XLA"
    ), out.stdout + out.stderr


def _resolved(*argv):
    config = config_from_args(parse_args(["train", *argv]))
    return config.learner.xla, prepare(config).config.learner.xla


def test_auto_is_on_only_for_the_built_in_mlp_on_one_cpu(tmp_path):
    assert _resolved() == (None, True)  # CartPole
    assert _resolved("--env", "Taxi-v4") == (None, True)  # one-hot codes
    assert _resolved("--learner-devices", "cpu:1") == (None, True)
    assert _resolved("--env", "MinAtar/Breakout-v1") == (None, False)  # a CNN
    assert _resolved("--learner-devices", "cpu:2") == (None, False)
    assert _resolved("--learner-hosts", "2") == (None, False)
    assert _resolved("--agent", f"{EXAMPLE}:make_agent") == (None, False)  # a user's agent
    (tmp_path / "my_loss.py").write_text("from impala_rep import impala_loss_fn as same_loss\n")
    assert _resolved("--loss", f"{tmp_path / 'my_loss.py'}:same_loss") == (None, False)  # and loss
    assert _resolved("--no-learner-xla") == (False, False)
    assert _resolved("--env", "MinAtar/Breakout-v1", "--learner-xla") == (True, True)


def test_a_resume_onto_other_devices_decides_xla_again(tmp_path):
    """XLA changes nothing in the checkpoint: a run saved with it resumes on two replicas
    (where XLA cannot go) with it off, and keeps it when the layout stays."""
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "checkpoint").write_text('model_checkpoint_path: "ckpt-7"\n')
    saved = prepare(TrainConfig.from_keys({"logdir": str(tmp_path / "new")})).config
    assert saved.learner.xla is True
    (run / "config.json").write_text(json.dumps(saved.replace({"logdir": str(run)}).to_json()))

    def resumed(**given):
        config = resumed_config(load_run_config(str(run)), {"logdir": str(run), **given})
        return prepare(config, resume=True).config.learner.xla

    assert resumed() is True
    assert resumed(num_actors=4) is True
    assert resumed(learner_devices="cpu:2") is False
    assert resumed(learner_devices="cpu:1") is True
    assert resumed(learner_xla=False) is False
    with pytest.raises(ValueError, match="bad learner_xla True: takes one device on one host"):
        resumed(learner_devices="cpu:2", learner_xla=True)
    # A run saved without XLA keeps it off when the layout given is the one it had.
    off = saved.replace({"logdir": str(run), "learner_xla": False})
    (run / "config.json").write_text(json.dumps(off.to_json()))
    assert resumed(learner_devices="cpu", learner_hosts=1) is False
    assert resumed(learner_devices="cpu:2") is False


def test_jit_compile_reaches_the_compiled_step():
    """XLA has no kernels for string ops: a step using one runs in the graph and is refused
    under XLA, so the flag is what compiles it."""

    def step_fn(x):
        return tf.strings.length(tf.strings.as_string(x))

    numbers = np.array([5, 10, 100])
    assert Replicator("cpu").run(step_fn, numbers)[0].numpy().tolist() == [1, 2, 3]
    with pytest.raises(tf.errors.InvalidArgumentError, match="unsupported operations"):
        Replicator("cpu", jit_compile=True).run(step_fn, numbers)


@pytest.mark.parametrize("flag, want", [("--learner-xla", True), ("--no-learner-xla", False)])
def test_the_learner_a_run_builds_compiles_as_its_config_says(monkeypatch, flag, want):
    """`build_learner_service`, the one place a run's learner is built, hands the setting on."""
    import impala_rep.learner.replicator as replicator_module
    from impala_rep.learner.build import build_learner_service

    made = []

    class Recorded(Replicator):
        def __init__(self, *args, jit_compile=False, **kwargs):
            made.append(jit_compile)
            super().__init__(*args, jit_compile=jit_compile, **kwargs)

    monkeypatch.setattr(replicator_module, "Replicator", Recorded)
    plan = prepare(config_from_args(parse_args(["train", flag])))
    service = build_learner_service(
        config=plan.config,
        observation_shape=plan.observation_shape,
        agent_factory=plan.agent_factory,
        loss_fn=plan.loss_fn,
    )
    assert service.stop(timeout_s=60)  # its training thread, which waits for unrolls
    assert made == [want]


_LEARNER_HOST = """
import functools, json, sys
import tensorflow as tf
from impala_rep.agent import MLPAgent
from impala_rep.config import TrainConfig
from impala_rep.learner.ray_learner import LearnerHost
config = TrainConfig.from_keys(dict(learner_xla=sys.argv[1] == "on", total_frames=1000))
# The Ray learner's class, run in this fresh process without Ray; given its settings when made,
# it imports TensorFlow (and sets the pools) before `start` is called, as under Ray.
host = LearnerHost(config.learner if sys.argv[2] == "preload" else None)
host.start(config=config, observation_shape=(4,),
           agent_factory=functools.partial(MLPAgent, num_actions=2))
print(json.dumps([tf.config.threading.get_intra_op_parallelism_threads(),
                  tf.config.threading.get_inter_op_parallelism_threads()]))
host.stop()
"""


# Both places a host imports TensorFlow (made with its settings, as a run makes it, or in
# `start`) set the pools under XLA; without XLA neither does (one case, as a run makes it: the
# same `_import_tensorflow` call either way, its pools untouched). Each case costs a process's
# TensorFlow import.
@pytest.mark.launches
@pytest.mark.parametrize(
    "xla, threads, made",
    [("on", [1, 1], "preload"), ("on", [1, 1], "plain"), ("off", [0, 0], "preload")],
)
def test_a_learner_host_with_xla_runs_tensorflow_on_one_thread(xla, threads, made):
    # One thread under XLA (cheaper for the MLP: docs/notebook.md, "Where the CPU goes");
    # TensorFlow's default pools (0: one thread per core) without it, where the CNN step
    # needs them.
    out = subprocess.run(
        [sys.executable, "-c", _LEARNER_HOST, xla, made],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == threads
