"""The Replicator on 1, 2 and 4 logical CPU devices.

Each device count runs tests/replication_worker.py in its own process (the
count is fixed when TensorFlow initialises); the assertions are made here on
the values it reports.
"""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from impala_rep.devices import DeviceSpec, parse_devices

WORKER = pathlib.Path(__file__).with_name("replication_worker.py")
COUNTS = [1, 2, 4]


@pytest.fixture(scope="module", params=COUNTS, ids=lambda n: f"{n}replicas")
def run(request):
    n = request.param
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(
        [sys.executable, str(WORKER), str(n)], capture_output=True, text=True, timeout=300, env=env
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, f"worker failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return n, json.loads(lines[-1][len("RESULT "):])


def test_replica_ids_and_count(run):
    n, result = run
    per = result["primitives"]["per_replica"]
    assert result["num_replicas"] == n and len(per) == n
    assert [r["replica_id"] for r in per] == list(range(n))
    assert all(r["num_replicas"] == n for r in per)


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


def test_all_gather_and_broadcast_exact(run):
    n, result = run
    values = np.array([(i + 1) * np.array([1.0, -2.0]) for i in range(n)])
    for r in result["primitives"]["per_replica"]:
        np.testing.assert_array_equal(r["gather"], values)
        np.testing.assert_array_equal(r["broadcast"], values[n - 1])
        assert r["broadcast_int"] == 7  # replica 0's value: 0 * 10 + 7


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


def test_reduce(run):
    n, result = run
    values = np.array([(i + 1) * np.array([1.0, -2.0]) for i in range(n)])
    np.testing.assert_allclose(result["primitives"]["reduce_sum"], n * values.sum(0))
    assert result["primitives"]["reduce_mean"] == pytest.approx((n - 1) / 2)  # mean of the ids


def test_wrapped_optimizer_keeps_replicas_identical(run):
    n, result = run
    training = result["training"]
    for variable in training["replicas"]:
        assert len(variable) == n
        for copy in variable[1:]:
            np.testing.assert_array_equal(copy, variable[0])
    # It really trained, the unused variable (None gradient) was skipped, and the
    # optimizer counted one iteration per step.
    assert max(np.abs(np.subtract(v[0], i)).max() for v, i in zip(training["replicas"], training["initial"])) > 1e-2
    np.testing.assert_array_equal(training["unused"], [1.0, 1.0])
    assert training["iterations"] == 4


def test_replicated_steps_equal_single_device_steps(run):
    _, result = run
    training = result["training"]
    for variable, single in zip(training["replicas"], training["single"]):
        np.testing.assert_allclose(variable[0], single, rtol=1e-5, atol=1e-6)


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


def test_errors_are_clear(run):
    n, result = run
    errors = result["errors"]
    if n > 1:
        assert f"over {n} replicas" in errors["not_divisible"] and str(2 * n + 1) in errors["not_divisible"]
    else:  # one replica takes any batch size
        assert "not_divisible" not in errors
    assert f"cpu:{n + 1}" in errors["late_count"] and f"initialised with {n}" in errors["late_count"]
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


@pytest.mark.parametrize("spec", ["", "cpu:0", "cpu:-1", "gpu:x", "tpu:2", "auto:2", "cuda", "cpu:2:3", None, 3])
def test_parse_devices_rejects_bad_specs(spec):
    with pytest.raises(ValueError, match=r"bad device spec .*expected \"auto\", \"cpu\", \"cpu:N\""):
        parse_devices(spec)


@pytest.mark.parametrize("spec, gpus", [("cpu", 0), ("cpu:4", 0), ("auto", 0), ("gpu", 1), ("gpu:4", 4)])
def test_learner_asks_ray_for_its_gpus(spec, gpus):
    from impala_rep.learner.ray_learner import learner_gpus

    assert learner_gpus(spec) == gpus
