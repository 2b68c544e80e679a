"""The learner's loss hook: an injected loss against a hand-made update, and on 1 vs 2 replicas."""

import json
import os
import pathlib
import subprocess
import sys

import loss_fn_worker
import numpy as np
import pytest
import tensorflow as tf
from manual_update import manual_impala_loss
from random_unrolls import random_unroll

from impala_rep import Learner, LossConfig, MLPAgent, OptimizerConfig, Replicator, impala_loss_fn
from impala_rep.loss_fn import LossOutput

WORKER = pathlib.Path(__file__).with_name("loss_fn_worker.py")
T, B, A, OBS = 4, 6, 3, 5
L2 = 0.05


@pytest.fixture(scope="module")
def replicator():
    return Replicator("cpu")


def l2_loss(*, agent, config, **tensors):
    """impala_loss_fn + L2 * sum(w^2)/2 (counted once over replicas), with an extra metric."""
    out = impala_loss_fn(agent=agent, config=config, **tensors)
    penalty = L2 * tf.add_n([tf.nn.l2_loss(v) for v in agent.trainable_variables])
    return LossOutput(
        out.loss + tf.nn.scale_regularization_loss(penalty),
        out.sums,
        {**out.means, "penalty": tf.stop_gradient(penalty)},
    )


def only_a_custom_metric(*, outputs, **unused):
    """A loss reporting none of impala_loss_fn's metrics: sum of squared baselines."""
    loss = tf.reduce_sum(tf.square(outputs.baseline))
    return LossOutput(loss, sums={"baseline_square": tf.stop_gradient(loss)})


def old_style_loss(**tensors):
    """The contract before LossOutput: a (loss, metrics) pair."""
    out = impala_loss_fn(**tensors)
    return out.loss, {**out.sums, **out.means}


def reports_a_name_twice(**tensors):
    out = impala_loss_fn(**tensors)
    return LossOutput(out.loss, out.sums, {**out.means, "loss": out.loss})


def reports_the_learners_step_count(**tensors):
    out = impala_loss_fn(**tensors)
    return LossOutput(out.loss, out.sums, {**out.means, "learner_steps": out.loss})


def make_learner(replicator, loss_fn, lr):
    return Learner(
        agent=MLPAgent(num_actions=A, hidden_sizes=(16,)),
        replicator=replicator,
        observation_shape=(OBS,),
        total_steps=10,
        optimizer=OptimizerConfig(max_grad_norm=None),
        make_optimizer=lambda: tf.keras.optimizers.SGD(lr),
        loss_fn=loss_fn,
    )


def manual_gradient(weights, batch, config):
    """Gradient of impala_loss + L2 penalty over the whole batch, no Replicator, written out."""
    agent = MLPAgent(num_actions=A, hidden_sizes=(16,))
    agent.build((OBS,))
    agent.set_weights(weights)
    with tf.GradientTape() as tape:
        loss = manual_impala_loss(agent, batch, config)
        penalty = L2 * sum(0.5 * tf.reduce_sum(tf.square(v)) for v in agent.trainable_variables)
        loss = loss + penalty
    grads = tape.gradient(loss, agent.trainable_variables)
    return [g.numpy() for g in grads], float(loss), float(penalty)


def test_injected_loss_equals_manual_sgd_update(replicator):
    lr = 0.01
    learner = make_learner(replicator, l2_loss, lr)
    batch = random_unroll(T=T, B=B, obs_size=OBS, num_actions=A, seed=3)
    _, before = learner.get_weights()
    grads, loss, penalty = manual_gradient(before, batch, LossConfig())

    metrics = learner.step(batch)

    _, after = learner.get_weights()
    for w0, w1, g in zip(before, after, grads):
        np.testing.assert_allclose(w1, w0 - lr * g, rtol=1e-5, atol=1e-6)
    assert metrics["penalty"] == pytest.approx(penalty, rel=1e-5)  # a custom metric comes through
    # impala_loss_fn's metrics come through too; "loss" is the IMPALA part it reported.
    assert metrics["loss"] == pytest.approx(loss - penalty, rel=1e-5)


def test_a_loss_may_report_only_its_own_metrics(replicator):
    learner = make_learner(replicator, only_a_custom_metric, 0.01)
    metrics = learner.step(random_unroll(T=T, B=B, obs_size=OBS, num_actions=A, seed=4))
    assert metrics["baseline_square"] > 0 and metrics["grad_norm"] > 0
    assert "loss" not in metrics


@pytest.mark.parametrize(
    "loss_fn, error, match",
    [
        (
            old_style_loss,
            TypeError,
            r"loss_fn must return an impala_rep.LossOutput\(loss, sums, means\), got a tuple",
        ),
        (
            reports_a_name_twice,
            ValueError,
            r"loss_fn metric names \['loss'\] are in both sums and means",
        ),
        (
            reports_the_learners_step_count,
            ValueError,
            r"metric names \['learner_steps'\] .* or are the "
            r"learner's own \(grad_norm, .*learner_steps",
        ),
    ],
)
def test_a_loss_breaking_the_contract_is_named(replicator, loss_fn, error, match):
    # Raised while the step is traced (AutoGraph prefixes where, and keeps the type).
    learner = make_learner(replicator, loss_fn, 0.01)
    with pytest.raises(error, match=match):
        learner.step(random_unroll(T=T, B=B, obs_size=OBS, num_actions=A, seed=4))
    assert learner.num_steps == 0


@pytest.fixture(scope="module")
def on_two_replicas():
    """Every worker case's result on 2 replicas, from one process."""
    proc = subprocess.run(
        [sys.executable, str(WORKER), "2", *loss_fn_worker.CASES],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, (
        f"worker failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    return json.loads(lines[-1][len("RESULT ") :])


def _two_replicas_and_one(replicator, on_two_replicas, case):
    two = on_two_replicas[case]
    one = loss_fn_worker.run_case(replicator, case)
    assert (two["num_replicas"], one["num_replicas"]) == (2, 1)
    for i0, i1 in zip(two["initial"], one["initial"]):
        np.testing.assert_array_equal(i0, i1)
    moved = max(np.abs(np.subtract(w, i)).max() for w, i in zip(one["weights"], one["initial"]))
    assert moved > 1e-2
    for w2, w1 in zip(two["weights"], one["weights"]):
        np.testing.assert_allclose(w2, w1, rtol=1e-5, atol=1e-5)
    return two, one


def _same_metrics(two, one):
    """Every step's metrics agree, but value_explained_variance: a per-shard ratio (impala_loss)."""
    for m2, m1 in zip(two["metrics"], one["metrics"]):
        for key in set(m1) - {"value_explained_variance"}:
            assert m2[key] == pytest.approx(m1[key], rel=1e-4, abs=1e-5), key


@pytest.mark.launches
def test_custom_loss_and_cross_replica_batch_norm_two_replicas_equal_one(
    replicator, on_two_replicas
):
    # Trainable weights and the batch-norm moving statistics both agree: the penalty
    # counted once, and the normalisation used the global batch's statistics.
    two, one = _two_replicas_and_one(replicator, on_two_replicas, "custom_agent")
    assert len(one["weights"]) == one["num_trainable"] + 2
    _same_metrics(two, one)


@pytest.mark.launches
@pytest.mark.parametrize("case", ["rnd", "rnd_step_costs"])
def test_rnd_two_replicas_equal_one(replicator, on_two_replicas, case):
    """RND's bonus is centred on the global batch's mean (all replicas' shards), and with
    step_costs_only applied or not on the whole batch, so 2 replicas update as 1 does, the
    predictor included (impala_rep/rnd.py)."""
    two, one = _two_replicas_and_one(replicator, on_two_replicas, case)
    if case == "rnd_step_costs":  # on for the first batch only (tests/loss_fn_worker.py)
        assert [m["rnd_on"] for m in one["metrics"]] == [1.0, 0.0, 0.0]
    assert one["unpublished"] and len(two["unpublished"]) == len(one["unpublished"])
    for p2, p1 in zip(two["unpublished"], one["unpublished"]):
        np.testing.assert_allclose(p2, p1, rtol=1e-5, atol=1e-5)
    _same_metrics(two, one)


@pytest.mark.launches
def test_popart_two_replicas_equal_one(replicator, on_two_replicas):
    """PopArt's statistics follow the whole batch's targets (every replica's shard), and the
    head is rescaled alike on each replica: the published weights (the statistics among them)
    agree (impala_rep/popart.py)."""
    two, one = _two_replicas_and_one(replicator, on_two_replicas, "popart")
    assert len(one["weights"]) == one["num_trainable"] + 1  # the (mean, second moment) pair
    assert abs(one["weights"][-1][1] - 1.0) > 1e-2  # the second moment moved from its start
    _same_metrics(two, one)


@pytest.mark.launches
def test_observation_normalization_two_replicas_equal_one_and_numpy(replicator, on_two_replicas):
    """The running statistics fold in the whole batch's moments (every replica's shard), so the
    published statistics, the last weight, agree on 2 replicas and 1; and they are the mean and
    variance numpy gives over every step trained on, the bootstrap observations left out
    (impala_rep/observation_normalization.py)."""
    two, one = _two_replicas_and_one(replicator, on_two_replicas, "observation_normalization")
    _same_metrics(two, one)
    steps = np.concatenate(
        [
            loss_fn_worker._offset_observations(
                random_unroll(
                    T=loss_fn_worker.T, B=loss_fn_worker.B, obs_size=3, num_actions=2, seed=s
                ),
                s,
            )
            .observations[:-1]
            .reshape(-1, 3)
            for s in range(loss_fn_worker.STEPS)
        ]
    )
    count, mean, variance = np.asarray(one["weights"][-1])
    np.testing.assert_allclose(count, len(steps))
    np.testing.assert_allclose(mean, steps.mean(0), rtol=1e-5)
    np.testing.assert_allclose(variance, steps.var(0), rtol=1e-4)
    # Each step reported the count its batch was normalised with: none, then one batch's.
    per_batch = loss_fn_worker.T * loss_fn_worker.B
    assert [m["observation_count"] for m in one["metrics"]] == [0.0, per_batch, 2 * per_batch]
