"""The Learner: its update against a hand-made one, clipping, lr decay, checkpoints, replicas.

Everything runs in this process on one device except the 2-replica case, which
runs tests/learner_worker.py in a fresh process (the logical device count is
fixed when TensorFlow initialises) and is compared with the same case here.
"""

import json
import os
import pathlib
import re
import subprocess
import sys

import learner_worker
import numpy as np
import pytest
import tensorflow as tf
from manual_update import manual_impala_loss
from random_unrolls import random_unroll

from impala_rep import Replicator
from impala_rep.agent import MLPAgent
from impala_rep.config import LossConfig, OptimizerConfig
from impala_rep.learner.learner import Learner
from impala_rep.learner.optimizers import paper_rmsprop

# Learners that take one step share the module's Replicator: past its bound on compiled steps,
# dropping theirs (each served a single call) warns as a fresh lambda per call would.
pytestmark = pytest.mark.filterwarnings("ignore:Replicator. compiling step function:RuntimeWarning")

WORKER = pathlib.Path(__file__).with_name("learner_worker.py")
T, B, A, OBS = 4, 6, 3, 5
DEFAULT_LOSS = LossConfig()  # frozen, so one shared instance is a safe default


@pytest.fixture(scope="module")
def replicator():
    return Replicator("cpu")


def make_batch(seed=0, policy_version=None):
    return random_unroll(
        T=T, B=B, obs_size=OBS, num_actions=A, seed=seed, policy_version=policy_version
    )


def make_learner(replicator, *, sgd_lr=None, total_steps=100, loss=DEFAULT_LOSS, **optimizer):
    """A Learner of a small MLP; `optimizer`: OptimizerConfig fields; `sgd_lr`: plain SGD instead
    of the paper's RMSProp."""
    make_optimizer = None if sgd_lr is None else (lambda: tf.keras.optimizers.SGD(sgd_lr))
    return Learner(
        agent=MLPAgent(num_actions=A, hidden_sizes=(16, 16)),
        replicator=replicator,
        observation_shape=(OBS,),
        total_steps=total_steps,
        loss=loss,
        optimizer=OptimizerConfig(**optimizer),
        make_optimizer=make_optimizer,
    )


def manual_gradient(weights, batch, config):
    """Gradient of impala_loss over the whole batch, with no Replicator, written out here."""
    agent = MLPAgent(num_actions=A, hidden_sizes=(16, 16))
    agent.build((OBS,))
    agent.set_weights(weights)
    with tf.GradientTape() as tape:
        loss = manual_impala_loss(agent, batch, config)
    grads = tape.gradient(loss, agent.trainable_variables)
    return [g.numpy() for g in grads], float(loss)


def global_norm(arrays):
    return float(np.sqrt(sum(np.sum(np.square(a, dtype=np.float64)) for a in arrays)))


# The default loss settings, and others in every field the loss uses (reward clipping off).
LOSS_CONFIGS = [
    LossConfig(),
    LossConfig(
        discount=0.9,
        baseline_cost=0.25,
        entropy_cost=0.05,
        clip_rho_threshold=None,
        clip_pg_rho_threshold=2.0,
        lambda_=0.9,
        reward_clipping="none",
    ),
    LossConfig(surrogate_clip=0.2, kl_cost=0.5),
    LossConfig(surrogate_clip=None, normalize_advantages=True),
]


@pytest.mark.parametrize(
    "loss_config", LOSS_CONFIGS, ids=["default", "other", "appo", "normalized"]
)
def test_step_equals_manual_sgd_update(replicator, loss_config):
    lr = 0.01
    learner = make_learner(replicator, sgd_lr=lr, max_grad_norm=None, loss=loss_config)
    batch = make_batch()
    version, before = learner.get_weights()
    assert version == 0
    grads, loss = manual_gradient(before, batch, loss_config)

    metrics = learner.step(batch)

    version, after = learner.get_weights()
    assert version == 1 and learner.num_steps == 1
    for w0, w1, g in zip(before, after, grads):
        np.testing.assert_allclose(w1, w0 - lr * g, rtol=1e-5, atol=1e-6)
    # get_weights is the agent's current weights.
    for w, v in zip(after, learner.agent.trainable_variables):
        np.testing.assert_array_equal(w, v.numpy())
    assert metrics["loss"] == pytest.approx(loss, rel=1e-5)
    assert metrics["grad_norm"] == pytest.approx(global_norm(grads), rel=1e-5)
    assert metrics["learning_rate"] == pytest.approx(lr)
    assert metrics["learner_steps"] == 1.0  # the counter after the step, as num_steps reads it
    expected = {
        "loss",
        "pg_loss",
        "baseline_loss",
        "entropy_loss",
        "entropy",
        "vtrace_rho_clipped_fraction",
        "rho_mean",
        "advantage_mean",
        "value_mean",
        "kl",
        "value_explained_variance",
        "vtrace_target_mean",
        "vtrace_target_square_mean",
        "grad_norm",
        "learning_rate",
        "passes",
        "learner_steps",
        "policy_lag_mean",
        "policy_lag_max",
    }
    if loss_config.surrogate_clip is not None:
        expected.add("surrogate_clipped_fraction")
    assert set(metrics) == expected
    assert all(isinstance(v, float) for v in metrics.values())


def test_clipping_limits_the_update_to_lr_times_max_norm(replicator):
    # Updates large enough that float32 w1 - w0 keeps its relative precision.
    lr, max_norm = 0.1, 0.5
    learner = make_learner(replicator, sgd_lr=lr, max_grad_norm=max_norm)
    batch = make_batch(1)
    _, before = learner.get_weights()
    grads, _ = manual_gradient(before, batch, LossConfig())
    norm = global_norm(grads)
    assert norm > 2 * max_norm  # clipping really acts

    metrics = learner.step(batch)

    _, after = learner.get_weights()
    deltas = [w1 - w0 for w0, w1 in zip(before, after)]
    assert global_norm(deltas) == pytest.approx(lr * max_norm, rel=1e-4)
    for d, g in zip(deltas, grads):  # same direction as the unclipped gradient
        np.testing.assert_allclose(d, -lr * g * (max_norm / norm), rtol=1e-4, atol=1e-7)
    assert metrics["grad_norm"] == pytest.approx(norm, rel=1e-5)  # before clipping


def test_learning_rate_decays_linearly_to_zero_and_compiles_once(replicator):
    lr, total = 1e-3, 4
    learner = make_learner(replicator, learning_rate=lr, total_steps=total)
    traces = []
    unroll = learner.agent.unroll
    learner.agent.unroll = lambda *args: (traces.append(1), unroll(*args))[1]  # runs when traced
    batch = make_batch(2)

    rates = [learner.step(batch)["learning_rate"]]
    # The first call traces the update: the first pass and the passes' loop body, in one graph.
    traced = len(traces)
    rates += [learner.step(batch)["learning_rate"] for _ in range(total + 1)]

    np.testing.assert_allclose(
        rates, [lr * (1 - k / total) for k in range(total)] + [0.0, 0.0], rtol=1e-6, atol=1e-12
    )
    assert 1 <= traced <= 2 and len(traces) == traced  # fixed shapes: no retracing after
    # At learning rate 0 RMSProp leaves the weights alone.
    _, before = learner.get_weights()
    learner.step(batch)
    for w0, w1 in zip(before, learner.get_weights()[1]):
        np.testing.assert_array_equal(w0, w1)


def test_adam_steps_equal_manual_adam_updates(replicator):
    """`optimizer="adam"`: each step is Adam's update (Kingma & Ba, with epsilon added to the
    root of the uncorrected second moment, as Keras does) at the decaying learning rate,
    its moments carried from step to step."""
    lr, eps, total, b1, b2 = 0.01, 1e-5, 10, 0.9, 0.999
    learner = make_learner(
        replicator,
        optimizer="adam",
        learning_rate=lr,
        adam_epsilon=eps,
        total_steps=total,
        max_grad_norm=None,
    )
    assert isinstance(learner.optimizer.optimizer, tf.keras.optimizers.Adam)
    _, weights = learner.get_weights()
    m = [np.zeros_like(w, np.float64) for w in weights]
    v = [np.zeros_like(w, np.float64) for w in weights]
    for t in range(1, 4):
        batch = make_batch(t)
        grads, _ = manual_gradient(weights, batch, LossConfig())
        rate = lr * (1 - (t - 1) / total)
        m = [b1 * mi + (1 - b1) * g for mi, g in zip(m, grads)]
        v = [b2 * vi + (1 - b2) * np.square(g, dtype=np.float64) for vi, g in zip(v, grads)]
        alpha = rate * np.sqrt(1 - b2**t) / (1 - b1**t)
        weights = [
            (w - alpha * mi / (np.sqrt(vi) + eps)).astype(np.float32)
            for w, mi, vi in zip(weights, m, v)
        ]

        metrics = learner.step(batch)

        assert metrics["learning_rate"] == pytest.approx(rate)
        for got, want in zip(learner.get_weights()[1], weights):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_passes_equal_as_many_steps_on_the_same_batch(replicator):
    """`step(batch, passes=3)`: the batch goes to the devices once and three updates
    follow, the same as three `step(batch)` calls; the lag is that of the first."""
    batch = make_batch(4, policy_version=np.zeros(B, np.int64))
    one_by_one, together = make_learner(replicator), make_learner(replicator)
    together.agent.set_weights(one_by_one.agent.get_weights())
    for _ in range(3):
        last = one_by_one.step(batch)

    metrics = together.step(batch, passes=3)

    assert together.num_steps == one_by_one.num_steps == 3
    for a, b in zip(together.get_weights()[1], one_by_one.get_weights()[1]):
        np.testing.assert_array_equal(a, b)
    assert metrics["policy_lag_mean"] == metrics["policy_lag_max"] == 0.0  # the first pass's
    assert last["policy_lag_max"] == 2.0
    assert metrics["passes"] == 3.0 and last["passes"] == 1.0
    assert {k: v for k, v in metrics.items() if "lag" not in k and k != "passes"} == {
        k: v for k, v in last.items() if "lag" not in k and k != "passes"
    }
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="passes must be an integer >= 1"):
            together.step(batch, passes=bad)


def test_a_target_kl_stops_the_passes_after_the_first_whose_kl_exceeds_it(replicator):
    """`step(batch, passes=8, target_kl=x)` applies the same updates as single steps up
    to the first whose `kl` (measured before its update) is over x, then stops; the
    learning-rate schedule moves on by all 8 planned passes."""
    tf.keras.utils.set_random_seed(0)  # the same initial network on every run
    batch, after = make_batch(4, policy_version=np.zeros(B, np.int64)), make_batch(5)
    # Uniform actors: the updates move the policy away from them, so `kl` grows over the passes.
    batch = batch._replace(behaviour_logits=np.zeros_like(batch.behaviour_logits))
    reference = make_learner(replicator)
    start = reference.agent.get_weights()
    kls, weights = [], []
    for _ in range(8):
        kls.append(reference.step(batch)["kl"])
        weights.append(reference.get_weights()[1])
    full = make_learner(replicator)
    full.agent.set_weights(start)
    full.step(batch, passes=8)
    rate_after_8 = full.step(after)["learning_rate"]
    # The first pass m >= 2 whose kl is a new maximum: a target just below it stops there.
    middle = next(m for m in range(2, 8) if kls[m] > max(kls[:m]))
    # Below the first pass's, between the earlier passes' and pass m's, above all.
    for target in (1e-9, max(kls[:middle]), 2 * max(kls)):
        stop = next((i for i, kl in enumerate(kls) if kl > target), 7)
        learner = make_learner(replicator)
        learner.agent.set_weights(start)
        metrics = learner.step(batch, passes=8, target_kl=target)
        assert metrics["passes"] == learner.num_steps == stop + 1
        assert metrics["kl"] == kls[stop]
        for got, want in zip(learner.get_weights()[1], weights[stop]):
            np.testing.assert_array_equal(got, want)
        assert learner.step(after)["learning_rate"] == pytest.approx(rate_after_8)
    assert middle < 7  # the middle case stops early (uniform actors: kl grows over the passes)
    for bad in (0, -1.0, float("nan"), True, "0.1"):
        with pytest.raises(ValueError, match="target_kl must be a number > 0 or None"):
            learner.step(batch, target_kl=bad)


def test_policy_lag_and_run(replicator):
    learner = make_learner(replicator)
    batches = [make_batch(seed) for seed in range(3)]
    learner.run(iter(batches * 2), num_steps=2)  # stops after 2 steps
    assert learner.num_steps == 2
    # 2 updates applied: an unroll from version v lags 2 - v.
    metrics = learner.step(make_batch(0, policy_version=[0, 1, 1, 2, 2, 2]))
    assert metrics["policy_lag_mean"] == pytest.approx(2 - 8 / 6)
    assert metrics["policy_lag_max"] == 2.0
    last = learner.run(batches)
    assert learner.num_steps == 6 and last["policy_lag_max"] == 5.0
    assert learner.run(batches, num_steps=0) == {}


def test_save_restore_round_trips_weights_optimizer_state_and_step(replicator, tmp_path):
    hyper = dict(learning_rate=1e-2, total_steps=10)
    original = make_learner(replicator, **hyper)
    for seed in range(2):
        original.step(make_batch(seed))
    path = original.save(tmp_path)
    assert pathlib.Path(path).name.startswith("ckpt-2")

    restored = make_learner(replicator, **hyper)
    restored.restore(tmp_path)

    assert restored.num_steps == 2
    for a, b in zip(original.get_weights()[1], restored.get_weights()[1]):
        np.testing.assert_array_equal(a, b)
    slots = [v.numpy() for v in original.optimizer.variables]
    assert any(np.any(s != 0) for s in slots[1:])  # RMSProp state is not trivial
    for a, b in zip(slots, [v.numpy() for v in restored.optimizer.variables]):
        np.testing.assert_array_equal(a, b)
    # Both continue identically, the learning-rate schedule included.
    batch = make_batch(5)
    m1, m2 = original.step(batch), restored.step(batch)
    assert m1["learning_rate"] == m2["learning_rate"] == pytest.approx(1e-2 * (1 - 2 / 10))
    for a, b in zip(original.get_weights()[1], restored.get_weights()[1]):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)

    for _ in range(3):
        original.step(batch)
        original.save(tmp_path)
    kept = tf.train.get_checkpoint_state(str(tmp_path)).all_model_checkpoint_paths
    assert [pathlib.Path(p).name for p in kept] == ["ckpt-4", "ckpt-5", "ckpt-6"]  # max_to_keep=3
    with pytest.raises(FileNotFoundError, match="no checkpoint in"):
        restored.restore(tmp_path / "empty")


def test_make_optimizer_is_called_inside_the_scope(replicator):
    # Made outside, the optimizer's step counter would count once per replica.
    calls = []

    def make_optimizer():
        calls.append(tf.distribute.get_strategy() is replicator.strategy)
        return tf.keras.optimizers.SGD(0.1)

    learner = Learner(
        agent=MLPAgent(num_actions=A),
        replicator=replicator,
        observation_shape=(OBS,),
        total_steps=1,
        make_optimizer=make_optimizer,
    )
    assert calls == [True]
    assert replicator.strategy.extended.variable_created_in_scope(
        learner.optimizer.iterations.value
    )


@pytest.mark.parametrize(
    "config, field, key, value, allowed",
    [
        (OptimizerConfig, "learning_rate", "learning_rate", 0.0, "must be a positive number"),
        (
            OptimizerConfig,
            "learning_rate",
            "learning_rate",
            float("nan"),
            "must be a positive number",
        ),
        (LossConfig, "discount", "discount", 1.5, r"must be in \[0, 1\]"),
        (LossConfig, "baseline_cost", "baseline_cost", -1.0, "must be >= 0"),
        (LossConfig, "entropy_cost", "entropy_cost", "0.1", "must be >= 0"),
        (LossConfig, "clip_rho_threshold", "clip_rho_threshold", 0.0, "must be > 0, or None"),
        (
            LossConfig,
            "clip_pg_rho_threshold",
            "clip_pg_rho_threshold",
            -1.0,
            "must be > 0, or None",
        ),
        (LossConfig, "lambda_", "lambda", -0.1, r"must be in \[0, 1\], or None"),
        (OptimizerConfig, "rmsprop_decay", "rmsprop_decay", 1.0, r"must be in \[0, 1\)"),
        (OptimizerConfig, "rmsprop_epsilon", "rmsprop_epsilon", 0.0, "must be a positive number"),
        (OptimizerConfig, "rmsprop_momentum", "rmsprop_momentum", -0.5, r"must be in \[0, 1\)"),
        (
            OptimizerConfig,
            "max_grad_norm",
            "max_grad_norm",
            0.0,
            "must be a positive number, or None",
        ),
        (OptimizerConfig, "optimizer", "optimizer", "sgd", "must be one of rmsprop, adam"),
        (OptimizerConfig, "adam_epsilon", "adam_epsilon", -1e-8, "must be a positive number"),
        (LossConfig, "reward_clipping", "reward_clipping", "clip", "must be 'abs_one' or 'none'"),
    ],
)
def test_loss_and_optimizer_configs_reject_bad_values(config, field, key, value, allowed):
    with pytest.raises(ValueError, match=rf"^bad {key} {re.escape(repr(value))}: {allowed}$"):
        config(**{field: value})


@pytest.mark.parametrize("total_steps", [0, 2.5, True])
def test_learner_and_paper_rmsprop_reject_bad_step_counts(replicator, total_steps):
    with pytest.raises(
        ValueError, match=rf"^total_steps must be an integer >= 1, got {total_steps!r}$"
    ):
        Learner(
            agent=MLPAgent(num_actions=A),
            replicator=replicator,
            observation_shape=(OBS,),
            total_steps=total_steps,
        )
    with pytest.raises(
        ValueError, match=rf"^decay_steps must be an integer >= 1, got {total_steps!r}$"
    ):
        paper_rmsprop(OptimizerConfig(), decay_steps=total_steps)


def test_learner_arguments_defaults_and_optional_clipping(replicator):
    loss = LossConfig(clip_rho_threshold=None, reward_clipping="none")
    optimizer = OptimizerConfig(max_grad_norm=None)
    assert (
        loss.clip_rho_threshold is None
        and loss.discount == 0.99
        and optimizer.max_grad_norm is None
    )
    with pytest.raises(TypeError):
        Learner(agent=MLPAgent(num_actions=A), replicator=replicator, observation_shape=(OBS,))
    with pytest.raises(
        TypeError, match="^loss must be an impala_rep.LossConfig, got OptimizerConfig$"
    ):
        Learner(
            agent=MLPAgent(num_actions=A),
            replicator=replicator,
            observation_shape=(OBS,),
            total_steps=1,
            loss=optimizer,
        )
    with pytest.raises(
        TypeError, match="^optimizer must be an impala_rep.OptimizerConfig, got LossConfig$"
    ):
        Learner(
            agent=MLPAgent(num_actions=A),
            replicator=replicator,
            observation_shape=(OBS,),
            total_steps=1,
            optimizer=loss,
        )


@pytest.fixture(scope="module")
def two_replicas():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(
        [sys.executable, str(WORKER), "2"], capture_output=True, text=True, timeout=300, env=env
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, (
        f"worker failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    return json.loads(lines[-1][len("RESULT ") :])


@pytest.mark.launches
@pytest.mark.parametrize("optimizer", learner_worker.CASES)
def test_two_replicas_equal_one(replicator, two_replicas, optimizer):
    single = learner_worker.run_case(replicator, optimizer)
    two_replicas = two_replicas[optimizer]
    assert two_replicas["num_replicas"] == 2 and single["num_replicas"] == 1
    assert two_replicas["num_steps"] == single["num_steps"] == learner_worker.STEPS
    np.testing.assert_array_equal(
        np.concatenate([np.ravel(w) for w in two_replicas["initial"]]),
        np.concatenate([np.ravel(w) for w in single["initial"]]),
    )
    # Replicas stay identical, and training moved the weights.
    for copies in two_replicas["replicas"]:
        assert len(copies) == 2
        np.testing.assert_array_equal(copies[0], copies[1])
    moved = max(
        np.abs(np.subtract(w, i)).max() for w, i in zip(single["weights"], single["initial"])
    )
    assert moved > 1e-2
    for w2, w1 in zip(two_replicas["weights"], single["weights"]):
        np.testing.assert_allclose(w2, w1, rtol=1e-5, atol=1e-5)
    # Metrics describe the whole batch whatever the replica count; clipping acted.
    for m2, m1 in zip(two_replicas["metrics"], single["metrics"]):
        if optimizer != "sgd":
            assert m1["grad_norm"] > 1.0
        assert m1["grad_norm_pg_loss"] > 0  # the worker asks for each part's norm
        # Explained variance is a ratio of variances: the mean of two shards' is not the
        # batch's, and the learner reports the mean (impala_loss documents it).
        for key in set(m1) - {"value_explained_variance"}:
            assert m2[key] == pytest.approx(m1[key], rel=1e-4, abs=1e-5), key


def test_loss_grad_norms_are_the_norms_of_each_parts_own_gradient(replicator):
    """With loss_grad_norms, `grad_norm_<part>` is the global norm of the gradient of that
    weighted part alone; the loss is linear in its costs, so a part's gradient is the
    difference of two manual gradients whose configs differ in that part's cost only."""
    config = LossConfig(entropy_cost=0.05, kl_cost=0.3)
    learner = Learner(
        agent=MLPAgent(num_actions=A, hidden_sizes=(16, 16)),
        replicator=replicator,
        observation_shape=(OBS,),
        total_steps=100,
        loss=config,
        make_optimizer=lambda: tf.keras.optimizers.SGD(0.01),
        loss_grad_norms=True,
    )
    batch = make_batch(seed=3)
    before = learner.get_weights()[1]
    metrics = learner.step(batch)

    def gradient(**costs):
        return manual_gradient(before, batch, LossConfig(**{**vars_of(config), **costs}))[0]

    zero = dict(baseline_cost=0.0, entropy_cost=0.0, kl_cost=0.0)
    pg_only = gradient(**zero)
    parts = {
        "pg_loss": pg_only,
        "baseline_loss": [
            a - b for a, b in zip(gradient(**{**zero, "baseline_cost": 0.5}), pg_only)
        ],
        "entropy_loss": [
            a - b for a, b in zip(gradient(**{**zero, "entropy_cost": 0.05}), pg_only)
        ],
        "kl_loss": [a - b for a, b in zip(gradient(**{**zero, "kl_cost": 0.3}), pg_only)],
    }
    for name, grads in parts.items():
        assert metrics[f"grad_norm_{name}"] == pytest.approx(
            global_norm(grads), rel=1e-4, abs=1e-6
        ), name
    assert metrics["grad_norm_entropy_loss"] > 0 and metrics["grad_norm_kl_loss"] > 0
    # Without the option, no such metric (and no extra backward passes).
    assert not any(k.startswith("grad_norm_") for k in make_learner(replicator).step(batch))


def vars_of(config):
    import dataclasses

    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
