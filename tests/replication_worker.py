"""Runs Replicator cases on N logical CPU devices and prints the raw results as JSON.

The device count can only be chosen before TensorFlow initialises, so
tests/test_replicator.py runs this file once per N in a fresh process
(`python replication_worker.py N`) and makes its assertions on what it prints.
Nothing here asserts: it only computes, replicated and single-device side by side.
"""

import json
import sys

import numpy as np

from impala_rep import Replicator
from impala_rep.learner import replicator as rep_lib


def _np(tree):
    """Tensors (nested) -> JSON-able lists."""
    if isinstance(tree, dict):
        return {k: _np(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return [_np(v) for v in tree]
    return np.asarray(tree).tolist()


def primitives(replicator, tf):
    n = replicator.num_replicas

    def step_fn(batch):
        rid = rep_lib.replica_id()
        value = tf.cast(rid + 1, tf.float32) * tf.constant([1.0, -2.0])
        nested = {"a": value, "b": (tf.cast(rid, tf.float32),)}
        return {
            "replica_id": rid,
            "num_replicas": tf.constant(rep_lib.num_replicas()),
            "sum": rep_lib.all_reduce(value, op="sum"),
            "mean": rep_lib.all_reduce(value, op="mean"),
            "max": rep_lib.all_reduce(value, op="max"),
            "min": rep_lib.all_reduce(value, op="min"),
            "nested_sum": rep_lib.all_reduce(nested, op="sum"),
            "gather": rep_lib.all_gather(value[None], axis=0),
            "broadcast": rep_lib.broadcast(value, source=n - 1),
            "broadcast_int": rep_lib.broadcast(rid * 10 + 7, source=0),
            "shard": batch["x"],
        }

    x = np.arange(4 * n, dtype=np.float32).reshape(2 * n, 2)
    # [T=3, B=2n] time-major data, split along the batch axis.
    tb = np.arange(3 * 2 * n, dtype=np.float32).reshape(3, 2 * n)
    xs = replicator.run(step_fn, {"x": x}, batch_axis=0)
    tbs = replicator.run(lambda b: b["tb"], {"tb": tb}, batch_axis=1)
    return {
        "per_replica": _np(xs),
        "time_major_axis1": _np(tbs),
        "reduce_sum": _np(replicator.reduce("sum", [r["sum"] for r in xs])),
        "reduce_mean": _np(replicator.reduce("mean", [r["replica_id"] for r in xs])),
    }


def make_model(tf):
    return tf.keras.Sequential(
        [
            tf.keras.Input((3,)),
            tf.keras.layers.Dense(8, activation="tanh"),
            tf.keras.layers.Dense(1),
        ]
    )


def training(replicator, tf, steps=4):
    """Several RMSProp steps replicated, and the same steps on one device without a strategy."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(8, 3)).astype(np.float32)
    y = rng.normal(size=(8, 1)).astype(np.float32)

    def optimizer():
        # The IMPALA paper's RMSProp settings (momentum 0, eps 0.01).
        return tf.keras.optimizers.RMSprop(learning_rate=0.05, rho=0.99, momentum=0.0, epsilon=0.01)

    tf.keras.utils.set_random_seed(3)
    with replicator.scope():
        model = make_model(tf)
        # A variable no loss touches: its gradient is None and must be skipped.
        unused = tf.Variable(np.ones(2, np.float32), name="unused")
        opt = replicator.wrap_optimizer(optimizer())
        opt.build(model.trainable_variables + [unused])
    initial = [v.numpy() for v in model.trainable_variables]

    def step_fn(batch):
        variables = model.trainable_variables + [unused]
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(batch["x"]) - batch["y"]))
        grads = tape.gradient(loss, variables)
        opt.apply_gradients(zip(grads, variables))
        return loss

    # Half the steps through `run`, half through one `repeat` (the loop in the graph, as a
    # batch's passes run): both must be the single device's steps.
    for _ in range(steps // 2):
        replicator.run(step_fn, {"x": x, "y": y})
    _, repeated = replicator.repeat(step_fn, {"x": x, "y": y}, times=steps - steps // 2)
    replicas = [
        [
            np.asarray(part).tolist()
            for part in replicator.strategy.experimental_local_results(v.value)
        ]
        for v in model.trainable_variables
    ]

    # The reference: the same model and optimizer on the whole batch, no strategy.
    single = make_model(tf)
    for v, value in zip(single.trainable_variables, initial):
        v.assign(value)
    single_opt = optimizer()
    for _ in range(steps):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(single(x) - y))
        grads = tape.gradient(loss, single.trainable_variables)
        single_opt.apply_gradients(zip(grads, single.trainable_variables))
    return {
        "initial": _np(initial),
        "replicas": replicas,  # [variable][replica] -> values
        "single": _np([v.numpy() for v in single.trainable_variables]),
        "unused": _np(unused.numpy()),
        "iterations": int(opt.iterations.numpy()),
        "repeated": repeated,
    }


def batch_norm(replicator, tf):
    rng = np.random.default_rng(1)
    # Shards with very different statistics, so per-replica statistics would differ.
    x = (rng.normal(size=(8, 3)) * np.arange(1, 9)[:, None] + np.arange(8)[:, None]).astype(
        np.float32
    )
    with replicator.scope():
        layer = rep_lib.CrossReplicaBatchNorm(momentum=0.5)
        layer.build((None, 3))
    outputs = replicator.run(lambda b: layer(b["x"], training=True), {"x": x})
    moving = [
        [np.asarray(p).tolist() for p in replicator.strategy.experimental_local_results(v.value)]
        for v in (layer.moving_mean, layer.moving_variance)
    ]
    return {"x": _np(x), "outputs": _np(outputs), "epsilon": layer.epsilon, "moving": moving}


def errors(replicator):
    n = replicator.num_replicas
    found = {}
    try:
        replicator.run(lambda b: b, {"x": np.zeros((2 * n + 1, 2), np.float32)})
    except ValueError as err:
        found["not_divisible"] = str(err)
    try:
        replicator.repeat(lambda b: b, {"x": np.zeros((2 * n + 1, 2), np.float32)}, times=2)
    except ValueError as err:
        found["repeat_not_divisible"] = str(err)
    try:
        Replicator(f"cpu:{n + 1}")
    except ValueError as err:
        found["late_count"] = str(err)
    try:
        with replicator.scope():  # cross-replica context: there is no replica to talk for
            rep_lib.all_reduce(1.0, op="sum")
        found["cross_replica"] = "no error"
    except RuntimeError as err:
        found["cross_replica"] = str(err)
    # Outside any strategy the default (single) replica context serves the
    # primitives, so a step_fn also runs unreplicated.
    found["unreplicated_sum"] = float(rep_lib.all_reduce(2.0, op="sum"))
    return found


def repeat_until(replicator, tf):
    """`repeat` ends after the first step whose (all-reduced) result satisfies `until`."""
    n = replicator.num_replicas
    counter = None
    with replicator.scope():
        counter = tf.Variable(0.0, aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)

    def step_fn(batch):
        counter.assign_add(1.0)
        return rep_lib.all_reduce(tf.reduce_sum(batch["x"]), op="sum") + counter

    inputs = {"x": np.ones((2 * n, 1), np.float32)}  # sums to 2n over the replicas
    # counter after step k is k, so the result is 2n + k: over 2n + 3 from the 4th step on.
    results, done = replicator.repeat(step_fn, inputs, times=10, until=lambda r: r > 2 * n + 3.5)
    never, all_done = replicator.repeat(step_fn, inputs, times=3, until=lambda r: r < 0)
    return {
        "done": done,
        "result": float(results[0]),
        "all_done": all_done,
        "counter": float(counter.numpy()),
    }


def traced_once(replicator, tf):
    """`repeat` traces the step once however many times it runs; `run` and `repeat` still
    convert a step's Python control flow on tensors (AutoGraph, as `tf.function` does);
    a step whose result has no fixed shape repeats too."""
    n = replicator.num_replicas
    traces = []
    with replicator.scope():
        total = tf.Variable(0.0, aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)

    def step_fn(batch):
        traces.append(1)  # Python: runs once per trace, not per step
        x = rep_lib.all_reduce(tf.reduce_sum(batch["x"]), op="sum")
        if x > 0:  # a tensor condition: traces only if AutoGraph converts it
            change = x
        else:
            change = -3.0 * x
        return total.assign_add(change)

    inputs = {"x": np.ones((2 * n, 1), np.float32)}  # sums to 2n
    results, done = replicator.repeat(step_fn, inputs, times=5)
    repeat_traces = len(traces)
    ran = replicator.run(step_fn, {"x": -inputs["x"]})

    _, one_done = replicator.repeat(step_fn, inputs, times=1)
    _, first_done = replicator.repeat(step_fn, inputs, times=4, until=lambda r: r > -1.0)

    def python_until(r):  # Python control flow on a tensor: traces only if converted
        if r > -1.0:
            return tf.constant(True)
        return tf.constant(False)

    _, converted_done = replicator.repeat(step_fn, inputs, times=4, until=python_until)

    def ragged(batch):  # [None]: the values over 0.5, a shape known only when it runs
        return tf.boolean_mask(batch["x"][:, 0], batch["x"][:, 0] > 0.5)

    column = {"x": np.arange(2 * n, dtype=np.float32)[:, None]}
    masked, masked_done = replicator.repeat(ragged, column, times=3)
    _, once_done = replicator.repeat(ragged, column, times=3, until=lambda r: tf.size(r) >= 0)
    return {
        "repeat_traces": repeat_traces,
        "done": done,
        "result": float(results[0]),
        "run_result": float(ran[0]),
        "masked": _np(masked),
        "masked_done": masked_done,
        "once_done": once_done,
        "one_done": one_done,
        "first_done": first_done,
        "converted_done": converted_done,
    }


def report(n):
    """Everything this worker measures on `n` logical CPU devices, as JSON-ready values.
    One device needs no fresh process: tests/test_replicator.py calls it in its own."""
    replicator = Replicator(f"cpu:{n}")
    import tensorflow as tf  # after the Replicator has fixed the device count

    return {
        "num_replicas": replicator.num_replicas,
        "primitives": primitives(replicator, tf),
        "training": training(replicator, tf),
        "batch_norm": batch_norm(replicator, tf),
        "errors": errors(replicator),
        "repeat_until": repeat_until(replicator, tf),
        "traced_once": traced_once(replicator, tf),
    }


def main(n):
    print("RESULT " + json.dumps(report(n)))


if __name__ == "__main__":
    main(int(sys.argv[1]))
