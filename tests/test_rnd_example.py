"""examples/rnd_exploration.py: RND's bonus and predictor loss, against a manual update."""

import importlib.util
import json
import math
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from manual_update import manual_impala_loss
from random_unrolls import random_unroll

from impala_rep import Learner, LossConfig, OptimizerConfig, Replicator

EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "rnd_exploration.py"
# Loaded from its file: examples/ stays off sys.path (test_examples.py relies on that).
_spec = importlib.util.spec_from_file_location("rnd_exploration", EXAMPLE)
rnd_exploration = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rnd_exploration)

T, B, A, OBS = 5, 4, 3, 2
COST = 0.5


def _agent():
    return rnd_exploration.RNDAgent(num_actions=A, observation_normalization=((0.0, 0.0), (1.0, 0.1)))


def test_the_target_is_the_same_random_network_in_every_process():
    # Actors, learner and a resumed learner each build their own copy.
    first, second = _agent(), _agent()
    first.build((OBS,))
    second.build((OBS,))
    for a, b in zip(first.non_trainable_variables, second.non_trainable_variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert first.non_trainable_variables  # the target exists, apart from the trained weights
    assert not set(map(id, first.non_trainable_variables)) & set(map(id, first.trainable_variables))


def test_a_learner_step_is_sgd_on_the_bonus_rewarded_impala_loss_plus_the_predictor_error():
    lr = 0.01
    learner = Learner(agent=_agent(), replicator=Replicator("cpu"), observation_shape=(OBS,),
                      total_steps=10, optimizer=OptimizerConfig(max_grad_norm=None),
                      make_optimizer=lambda: tf.keras.optimizers.SGD(lr),
                      loss_fn=lambda **kw: rnd_exploration.rnd_loss(intrinsic_cost=COST, **kw))
    batch = random_unroll(T=T, B=B, obs_size=OBS, num_actions=A, seed=5)
    _, before = learner.get_weights()

    # By hand: the predictor's error on each next observation, centred on the batch's mean
    # with numpy, added to the rewards; the predictor's summed error added to the loss.
    agent = _agent()
    agent.build((OBS,))
    agent.set_weights(before)
    following = batch.observations[1:].reshape(T * B, OBS)
    error = agent.rnd_error(tf.constant(following)).numpy().reshape(T, B)
    bonus = COST * (error - error.mean())
    bonus[batch.first[1:]] = 0.0  # a step that ended an episode: obs[t+1] is the next one's
    assert batch.first[1:].any() and not batch.first[1:].all()
    rewarded = batch._replace(rewards=(batch.rewards + bonus).astype(np.float32))
    with tf.GradientTape() as tape:
        loss = (manual_impala_loss(agent, rewarded, LossConfig())
                + tf.reduce_sum(agent.rnd_error(tf.constant(following))))
    grads = tape.gradient(loss, agent.trainable_variables)

    metrics = learner.step(batch)

    _, after = learner.get_weights()
    for w0, w1, g in zip(before, after, grads):
        np.testing.assert_allclose(w1, w0 - lr * g.numpy(), rtol=1e-4, atol=1e-6)
    assert metrics["rnd_error"] == pytest.approx(error.mean(), rel=1e-5)


def test_the_example_trains_through_the_train_command(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "impala_rep", "train", "--env", "MountainCar-v0", "--launcher", "local",
         "--total-frames", "6400", "--num-actors", "1", "--envs-per-actor", "8", "--batch-size", "8",
         "--agent", f"{EXAMPLE}:make_agent", "--loss", f"{EXAMPLE}:rnd_loss",
         "--logdir", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    last = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1])
    assert math.isfinite(last["rnd_error"]) and last["rnd_error"] > 0, last
