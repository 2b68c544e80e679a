"""The Replicator on 1, 2 and 4 logical CPU devices.

Each count of several devices runs tests/replication_worker.py in its own process (the
count is fixed when TensorFlow initialises), one device in this one; the assertions are
made here on the values it reports.
"""

import json
import os
import pathlib
import subprocess
import sys
import warnings

import numpy as np
import pytest

from impala_rep.devices import DeviceSpec, parse_devices

WORKER = pathlib.Path(__file__).with_name("replication_worker.py")
COUNTS = [1, 2, 4]


@pytest.fixture(scope="module", params=COUNTS, ids=lambda n: f"{n}replicas")
def run(request):
    n = request.param
    if n == 1:  # one device: this process has it already, no fresh TensorFlow needed
        import replication_worker

        with warnings.catch_warnings():
            # The worker compiles more one-call steps than the Replicator keeps, on purpose.
            warnings.filterwarnings("ignore", "Replicator: compiling step function")
            return n, json.loads(json.dumps(replication_worker.report(1)))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(
        [sys.executable, str(WORKER), str(n)], capture_output=True, text=True, timeout=300, env=env
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, (
        f"worker failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    return n, json.loads(lines[-1][len("RESULT ") :])


@pytest.mark.launches
def test_replica_ids_and_count(run):
    n, result = run
    per = result["primitives"]["per_replica"]
    assert result["num_replicas"] == n and len(per) == n
    assert [r["replica_id"] for r in per] == list(range(n))
    assert all(r["num_replicas"] == n for r in per)


@pytest.mark.launches
def test_all_reduce_ops_exact(run):
    n, result = run
    values = np.array([(i + 1) * np.array([1.0, -2.0]) for i in range(n)])
    for r in result["primitives"]["per_replica"]:
        np.testing.assert_array_equal(r["sum"], values.sum(0))
        np.testing.assert_array_equal(r["mean"], values.mean(0))
        np.testing.assert_array_equal(r["max"], values.max(0))
        np.testing.assert_array_equal(r["min"], values.min(0))
        np.testing.assert_array_equal(r["nested_sum"]["a"], values.sum(0))
        np.testing.assert_array_equal(r["nested_sum"]["b"], [sum(range(n))])


@pytest.mark.launches
def test_all_gather_and_broadcast_exact(run):
    n, result = run
    values = np.array([(i + 1) * np.array([1.0, -2.0]) for i in range(n)])
    for r in result["primitives"]["per_replica"]:
        np.testing.assert_array_equal(r["gather"], values)
        np.testing.assert_array_equal(r["broadcast"], values[n - 1])
        assert r["broadcast_int"] == 7  # replica 0's value: 0 * 10 + 7


@pytest.mark.launches
def test_run_splits_batch_evenly_in_replica_order(run):
    n, result = run
    x = np.arange(4 * n, dtype=np.float32).reshape(2 * n, 2)
    tb = np.arange(3 * 2 * n, dtype=np.float32).reshape(3, 2 * n)
    per = result["primitives"]["per_replica"]
    np.testing.assert_array_equal(np.concatenate([r["shard"] for r in per]), x)
    # Time-major [T, B] data is split along the batch axis with batch_axis=1.
    shards = result["primitives"]["time_major_axis1"]
    assert all(np.shape(s) == (3, 2) for s in shards)
    np.testing.assert_array_equal(np.concatenate(shards, axis=1), tb)


@pytest.mark.launches
def test_reduce(run):
    n, result = run
    values = np.array([(i + 1) * np.array([1.0, -2.0]) for i in range(n)])
    np.testing.assert_allclose(result["primitives"]["reduce_sum"], n * values.sum(0))
    assert result["primitives"]["reduce_mean"] == pytest.approx((n - 1) / 2)  # mean of the ids


@pytest.mark.launches
def test_wrapped_optimizer_keeps_replicas_identical(run):
    n, result = run
    training = result["training"]
    for variable in training["replicas"]:
        assert len(variable) == n
        for copy in variable[1:]:
            np.testing.assert_array_equal(copy, variable[0])
    # It really trained, the unused variable (None gradient) was skipped, and the
    # optimizer counted one iteration per step.
    assert (
        max(
            np.abs(np.subtract(v[0], i)).max()
            for v, i in zip(training["replicas"], training["initial"])
        )
        > 1e-2
    )
    np.testing.assert_array_equal(training["unused"], [1.0, 1.0])
    assert training["iterations"] == 4 and training["repeated"] == 2


@pytest.mark.launches
def test_repeat_stops_after_the_first_step_its_condition_holds_for(run):
    n, result = run
    r = result["repeat_until"]
    assert r["done"] == 4 and r["result"] == 2 * n + 4  # steps 1-3 give 2n+1..2n+3
    assert r["all_done"] == 3 and r["counter"] == 7  # never true: every step, 4 + 3 in all


@pytest.mark.launches
def test_repeat_traces_its_step_once_and_keeps_autograph(run):
    n, result = run
    r = result["traced_once"]
    # One trace for 5 steps, which calls step_fn once per replica (the loop holds one
    # copy of the step, so XLA compiles one).
    assert r["repeat_traces"] == n and r["done"] == 5
    assert r["result"] == 5 * 2 * n  # the tensor `if` took its True branch on every step
    assert r["run_result"] == 5 * 2 * n + 3 * 2 * n  # and its False branch under `run`
    # From the zeros start: times=1 runs one step, an `until` true at once stops after it,
    # and an `until` with a tensor `if` is converted as the step is.
    assert r["one_done"] == 1 and r["first_done"] == 1 and r["converted_done"] == 1
    # A result of no fixed shape: the first step runs before the loop, and all 3 run, or
    # only it when `until` holds after it.
    assert r["masked_done"] == 3 and r["once_done"] == 1
    for i, shard in enumerate(r["masked"]):
        assert shard == [float(v) for v in (2 * i, 2 * i + 1) if v > 0.5]


@pytest.mark.launches
def test_replicated_steps_equal_single_device_steps(run):
    _, result = run
    training = result["training"]
    for variable, single in zip(training["replicas"], training["single"]):
        np.testing.assert_allclose(variable[0], single, rtol=1e-5, atol=1e-6)


@pytest.mark.launches
def test_cross_replica_batch_norm_uses_global_statistics(run):
    n, result = run
    bn = result["batch_norm"]
    x = np.asarray(bn["x"], np.float64)
    expected = (x - x.mean(0)) / np.sqrt(x.var(0) + bn["epsilon"])
    got = np.concatenate([np.asarray(o) for o in bn["outputs"]])
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    moving_mean, moving_var = bn["moving"]
    for copy in moving_mean:  # momentum 0.5 from an initial mean of 0
        np.testing.assert_allclose(copy, 0.5 * x.mean(0), rtol=1e-4, atol=1e-5)
    for copy in moving_var[1:]:
        np.testing.assert_array_equal(copy, moving_var[0])


@pytest.mark.launches
def test_errors_are_clear(run):
    n, result = run
    errors = result["errors"]
    if n > 1:
        assert (
            f"over {n} replicas" in errors["not_divisible"]
            and str(2 * n + 1) in errors["not_divisible"]
        )
        assert errors["repeat_not_divisible"] == errors["not_divisible"]
    else:  # one replica takes any batch size
        assert "not_divisible" not in errors and "repeat_not_divisible" not in errors
    assert (
        f"cpu:{n + 1}" in errors["late_count"] and f"initialised with {n}" in errors["late_count"]
    )
    assert "must be called inside a step_fn" in errors["cross_replica"]
    assert errors["unreplicated_sum"] == 2.0


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("auto", DeviceSpec("auto", None)),
        ("cpu", DeviceSpec("cpu", 1)),
        ("cpu:4", DeviceSpec("cpu", 4)),
        ("CPU:2", DeviceSpec("cpu", 2)),
        ("gpu", DeviceSpec("gpu", None)),
        ("gpu:8", DeviceSpec("gpu", 8)),
        ("tpu", DeviceSpec("tpu", None)),
    ],
)
def test_parse_devices(spec, expected):
    assert parse_devices(spec) == expected


@pytest.mark.parametrize(
    "spec", ["", "cpu:0", "cpu:-1", "gpu:x", "tpu:2", "auto:2", "cuda", "cpu:2:3", None, 3]
)
def test_parse_devices_rejects_bad_specs(spec):
    with pytest.raises(
        ValueError, match=r"bad device spec .*expected \"auto\", \"cpu\", \"cpu:N\""
    ):
        parse_devices(spec)


@pytest.mark.parametrize(
    "spec, gpus", [("cpu", 0), ("cpu:4", 0), ("auto", 0), ("gpu", 1), ("gpu:4", 4)]
)
def test_learner_asks_ray_for_its_gpus(spec, gpus):
    from impala_rep.learner.ray_learner import learner_gpus

    assert learner_gpus(spec) == gpus


@pytest.mark.parametrize("call, kwargs", [("run", {}), ("repeat", {"times": 2})])
def test_run_and_repeat_refuse_inputs_without_an_array_naming_themselves(call, kwargs):
    from impala_rep import Replicator

    with pytest.raises(ValueError, match=rf"Replicator\.{call} needs at least one input array"):
        getattr(Replicator("cpu"), call)(lambda inputs: inputs, {"state": ()}, **kwargs)


def test_the_same_step_function_is_traced_once_while_recently_used():
    """One trace per step function however often it comes back, a bound method of one object
    included (a new bound method object at each attribute access); the cache drops the least
    RECENTLY USED step, so one in use survives any number of newer ones."""
    from impala_rep import Replicator
    from impala_rep.learner.replicator import STEP_CACHE_SIZE

    class Model:
        traces = 0

        def step(self, batch):
            Model.traces += 1  # Python: runs only while tracing
            return batch["x"] * 2.0

    replicator, model = Replicator("cpu"), Model()
    x = {"x": np.arange(4, dtype=np.float32).reshape(2, 2)}
    for _ in range(3):
        np.testing.assert_array_equal(replicator.run(model.step, x)[0], x["x"] * 2)
    others = [lambda batch, i=i: batch["x"] + i for i in range(2 * STEP_CACHE_SIZE)]
    with pytest.warns(RuntimeWarning, match="make the step function once"):
        for other in others:  # the model's step, used between them, stays among the recent
            replicator.run(other, x)
            replicator.run(model.step, x)
    assert Model.traces == 1


def test_fresh_lambdas_do_not_grow_the_compile_cache():
    """A new lambda per call is traced at every call (as a new `tf.function` would be), but
    the cache keeps at most STEP_CACHE_SIZE compiled steps, and says why once it is full."""
    from impala_rep import Replicator
    from impala_rep.learner.replicator import STEP_CACHE_SIZE

    replicator = Replicator("cpu")
    x = {"x": np.ones((2, 1), np.float32)}
    extra = 3
    with pytest.warns(RuntimeWarning, match="traced at every call") as caught:
        for i in range(STEP_CACHE_SIZE + extra):
            assert float(replicator.run(lambda batch, i=i: batch["x"] + i, x)[0][0, 0]) == 1 + i
        for i in range(extra):  # repeat's (step, until) pairs share the same bound
            until = lambda r, i=i: r[0, 0] > i  # noqa: E731 (a new function per call)
            replicator.repeat(lambda batch: batch["x"], x, times=2, until=until)
    assert len(replicator._compiled) == STEP_CACHE_SIZE
    dropped = [w for w in caught if "least recently used" in str(w.message)]
    assert len(dropped) == 2 * extra
    assert all(w.filename == __file__ for w in dropped)  # points at the caller's line


def test_steps_that_were_reused_are_dropped_silently():
    """More long-lived step functions than the cache holds (learners made one after another on
    a shared Replicator): the oldest are dropped, with no warning of fresh lambdas."""
    import warnings

    from impala_rep import Replicator
    from impala_rep.learner.replicator import STEP_CACHE_SIZE

    replicator = Replicator("cpu")
    x = {"x": np.ones((2, 1), np.float32)}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for i in range(STEP_CACHE_SIZE + 2):
            step = lambda batch, i=i: batch["x"] * i  # noqa: E731 (one learner's step)
            for _ in range(2):
                replicator.run(step, x)
    assert len(replicator._compiled) == STEP_CACHE_SIZE


# The optimizer mistakes docs/guide/replicator.md describes, on 2 logical CPUs: an
# optimizer made outside scope() (warned of), and a Keras optimizer used unwrapped
# (Keras sums the replicas' gradients; not detectable, so pinned here as documented).
OPTIMIZER_MISTAKES = """
import json, warnings
import numpy as np
from impala_rep import Replicator
replicator = Replicator("cpu:2")
import tensorflow as tf

x = np.random.default_rng(0).normal(size=(8, 3)).astype(np.float32)
y = x.sum(1, keepdims=True)

def train(where, steps=3):
    make = lambda: tf.keras.optimizers.SGD(0.1, momentum=0.9)
    if where == "outside":
        optimizer = make()
    with replicator.scope():
        model = tf.keras.Sequential(
            [tf.keras.Input((3,)), tf.keras.layers.Dense(1, kernel_initializer="zeros")]
        )
        if where != "outside":
            optimizer = make()
        applied = optimizer if where == "unwrapped" else replicator.wrap_optimizer(optimizer)
        if where != "outside":
            applied.build(model.trainable_variables)
    if where == "outside":
        applied.build(model.trainable_variables)

    def step_fn(batch):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(batch["x"]) - batch["y"]))
        applied.apply_gradients(
            zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables)
        )
        return loss

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        replicator.run(step_fn, {"x": x, "y": y})
        first = model.trainable_variables[0].numpy().ravel().tolist()
        for _ in range(steps - 1):
            replicator.run(step_fn, {"x": x, "y": y})
    return {"warnings": [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)],
            "iterations": int(optimizer.iterations.numpy()), "first_step": first}

print("RESULT " + json.dumps({where: train(where) for where in ("inside", "outside", "unwrapped")}))
"""


@pytest.mark.launches
def test_optimizer_mistakes_on_two_replicas():
    proc = subprocess.run(
        [sys.executable, "-c", OPTIMIZER_MISTAKES],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, (
        f"worker failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    result = json.loads(lines[-1][len("RESULT ") :])
    inside, outside, unwrapped = result["inside"], result["outside"], result["unwrapped"]
    # Made and built inside scope(): no warning, one count per step.
    assert inside["warnings"] == [] and inside["iterations"] == 3
    # Made outside: every replica advances the step counter (and the momentum slot).
    assert outside["iterations"] == 6
    assert outside["warnings"], "no warning for an optimizer made outside scope()"
    assert all(
        "created outside Replicator.scope()" in w and "advance 2 times per step" in w
        for w in outside["warnings"]
    )
    # Unwrapped: Keras sums the 2 replicas' gradients, so plain SGD's first step is twice the
    # wrapped (mean) one; no warning can see it.
    np.testing.assert_allclose(
        unwrapped["first_step"], 2 * np.asarray(inside["first_step"]), rtol=1e-5
    )
    assert unwrapped["warnings"] == [] and unwrapped["iterations"] == 3
