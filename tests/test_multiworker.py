"""Between-graph replication: two worker processes in one MultiWorkerMirroredStrategy group.

Over loopback only. Both workers must hold identical weights after the steps,
equal to the same steps on one device over the whole global batch.
"""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

WORKER = os.path.join(os.path.dirname(__file__), "multiworker_worker.py")


def _free_ports(n):
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


@pytest.mark.launches
def test_two_workers_stay_identical_and_equal_one_device():
    ports = _free_ports(2)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    procs = [
        subprocess.Popen(
            [sys.executable, WORKER, str(task), *map(str, ports)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for task in range(2)
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=240)
        lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
        assert proc.returncode == 0 and lines, err[-3000:]
        results.append(json.loads(lines[-1][len("RESULT ") :]))
    assert [r["num_replicas"] for r in results] == [2, 2]
    assert [r["local_replicas"] for r in results] == [1, 1]
    for a, b in zip(results[0]["weights"], results[1]["weights"]):
        np.testing.assert_array_equal(a, b)

    # The cross-replica primitives on each worker's raw input shard: worker k holds rows 4k..4k+3.
    x, y = np.asarray(results[0]["x"], np.float32), np.asarray(results[0]["y"], np.float32)
    for result in results:
        got = {k: np.asarray(v, np.float32) for k, v in result["primitives"].items()}
        np.testing.assert_allclose(got["sum"], x[:4] + x[4:], rtol=1e-6)
        np.testing.assert_array_equal(got["max"], np.maximum(x[:4], x[4:]))
        np.testing.assert_array_equal(got["gathered"], x)
        np.testing.assert_array_equal(got["broadcast"], x[4:])

    # The reference: one device, the whole global batch, same optimizer and start.
    model = tf.keras.Sequential(
        [
            tf.keras.Input((3,)),
            tf.keras.layers.Dense(4, activation="tanh"),
            tf.keras.layers.Dense(1),
        ]
    )
    for v, value in zip(model.trainable_variables, results[0]["initial"]):
        v.assign(value)
    optimizer = tf.keras.optimizers.RMSprop(
        learning_rate=0.05, rho=0.99, momentum=0.0, epsilon=0.01
    )
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        optimizer.apply_gradients(
            zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables)
        )
    for got, want in zip(results[0]["weights"], model.trainable_variables):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-6)
