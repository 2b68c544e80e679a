"""One worker of a 2-process MultiWorkerMirroredStrategy group over loopback.

`python multiworker_worker.py TASK_INDEX PORT0 PORT1` joins the group described
by TF_CONFIG, runs RMSProp steps through the Replicator (each worker feeds its
own half of every global batch) and prints the resulting weights as JSON.
tests/test_multiworker.py starts both workers and compares.
"""

import json
import os
import sys

import numpy as np


def main(task, ports):
    os.environ["TF_CONFIG"] = json.dumps(
        {
            "cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
            "task": {"type": "worker", "index": task},
        }
    )
    import tensorflow as tf

    from impala_rep import Replicator

    replicator = Replicator(strategy=tf.distribute.MultiWorkerMirroredStrategy())
    rng = np.random.default_rng(0)
    x = rng.normal(size=(8, 3)).astype(np.float32)
    y = rng.normal(size=(8, 1)).astype(np.float32)
    half = slice(4 * task, 4 * task + 4)  # this worker's share of the global batch

    tf.keras.utils.set_random_seed(3)
    with replicator.scope():
        model = tf.keras.Sequential(
            [
                tf.keras.Input((3,)),
                tf.keras.layers.Dense(4, activation="tanh"),
                tf.keras.layers.Dense(1),
            ]
        )
        optimizer = replicator.wrap_optimizer(
            tf.keras.optimizers.RMSprop(learning_rate=0.05, rho=0.99, momentum=0.0, epsilon=0.01)
        )
        optimizer.build(model.trainable_variables)

    def step_fn(batch):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(batch["x"]) - batch["y"]))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    def primitives_fn(batch):
        # On the raw input shard (no op of the step_fn's own before the collective).
        from impala_rep import all_gather, all_reduce, broadcast

        return {
            "sum": all_reduce(batch["x"], op="sum"),
            "max": all_reduce(batch["x"], op="max"),
            "gathered": all_gather(batch["x"], axis=0),
            "broadcast": broadcast(batch["x"], source=1),
        }

    primitives = {
        k: np.asarray(v).tolist()
        for k, v in replicator.run(primitives_fn, {"x": x[half]})[0].items()
    }
    initial = [v.numpy().tolist() for v in model.trainable_variables]
    for _ in range(3):
        replicator.run(step_fn, {"x": x[half], "y": y[half]})
    print(
        "RESULT "
        + json.dumps(
            {
                "num_replicas": replicator.num_replicas,
                "local_replicas": replicator.num_local_replicas,
                "initial": initial,
                "weights": [v.numpy().tolist() for v in model.trainable_variables],
                "x": x.tolist(),
                "y": y.tolist(),
                "primitives": primitives,
            }
        )
    )


if __name__ == "__main__":
    main(int(sys.argv[1]), [int(p) for p in sys.argv[2:4]])
