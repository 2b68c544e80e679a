"""A host batch reaches the compiled step packed into one buffer (learner/host_batch.py):
every leaf arrives bit for bit with its dtype and shape, each input layout is traced once,
and inputs that cannot be packed take the leaf-by-leaf path."""

import numpy as np
import pytest
import tensorflow as tf

from impala_rep import Replicator
from impala_rep.learner.host_batch import pack, packable, unpack


def _leaves(rng):
    return {
        "bool": rng.random((4, 3)) > 0.5,
        "uint8": rng.integers(0, 256, (4, 3), dtype=np.uint8),
        "int8": rng.integers(-128, 128, (4, 3), dtype=np.int8),
        "int32": rng.integers(-(2**31), 2**31, (4, 3, 2), dtype=np.int32),
        "int64": rng.integers(-(2**62), 2**62, (4,), dtype=np.int64),
        "uint16": rng.integers(0, 2**16, (4, 1), dtype=np.uint16),
        "float16": rng.normal(size=(4, 2)).astype(np.float16),
        "float32": rng.normal(size=(4, 6)).astype(np.float32)[:, ::2],  # not contiguous
        "float64": np.array([np.inf, -0.0, np.nan, 1e300]),
        "empty": np.zeros((4, 0, 5), np.float32),
        "state": (),
    }


def _bytes(x):
    return np.ascontiguousarray(x).reshape(-1).view(np.uint8)


@pytest.mark.parametrize("jit_compile", [False, True], ids=["graph", "xla"])
def test_every_leaf_arrives_bit_for_bit(jit_compile):
    inputs = _leaves(np.random.default_rng(0))
    assert all(packable(x) for x in tf.nest.flatten(inputs))
    out = Replicator("cpu", jit_compile=jit_compile).run(lambda batch: batch, inputs)[0]
    assert out["state"] == ()
    for name, value in inputs.items():
        if name == "state":
            continue
        assert out[name].dtype == tf.as_dtype(value.dtype), name
        assert out[name].shape == value.shape, name
        # Bit patterns, so NaN and -0.0 count too.
        np.testing.assert_array_equal(_bytes(out[name].numpy()), _bytes(value))


def test_unpack_inverts_pack_in_a_graph():
    leaves = [
        np.arange(6, dtype=np.int16).reshape(2, 3),
        np.array([True, False]),
        np.float32(2.5) * np.ones((), np.float32),
    ]
    layout = [(x.shape, tf.as_dtype(x.dtype)) for x in leaves]
    buffer = pack(leaves)
    assert buffer.dtype == np.uint8 and buffer.size == sum(x.nbytes for x in leaves)
    back = tf.function(lambda b: unpack(b, layout))(tf.constant(buffer))
    for got, want in zip(back, leaves):
        np.testing.assert_array_equal(got.numpy(), want)


def test_each_layout_is_traced_once():
    traces = []

    def step_fn(batch):
        traces.append(None)  # Python runs only while tracing
        return batch["x"] * 2

    replicator = Replicator("cpu")
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    for _ in range(3):
        np.testing.assert_array_equal(replicator.run(step_fn, {"x": x})[0], x * 2)
    assert len(traces) == 1
    replicator.run(step_fn, {"x": np.ones((5, 2), np.float32)})  # another shape
    replicator.run(step_fn, {"x": x})  # the first layout again: its trace is kept
    assert len(traces) == 2
    replicator.repeat(step_fn, {"x": x}, times=3)  # its own loop: traced anew
    traced = len(traces)
    results, done = replicator.repeat(step_fn, {"x": x}, times=2)
    assert done == 2 and len(traces) == traced > 2
    np.testing.assert_array_equal(results[0], x * 2)


def test_same_layout_with_another_structure_is_traced_again():
    replicator = Replicator("cpu")
    a, b = np.zeros((2, 1), np.float32), np.ones((2, 1), np.float32)
    assert sorted(replicator.run(lambda batch: batch, {"p": a, "q": b})[0]) == ["p", "q"]
    out = replicator.run(lambda batch: batch, {"p": a, "r": b})[0]
    assert sorted(out) == ["p", "r"]
    np.testing.assert_array_equal(out["r"], b)


def test_inputs_that_cannot_be_packed_go_leaf_by_leaf():
    replicator = Replicator("cpu")
    words = np.array([b"a", b"bbb"])  # bytes: not packable
    complex_ = np.array([100 + 1j, 200 + 2j])  # complex: not packable
    assert not any(map(packable, [words, complex_, tf.ones([2]), 1.0]))
    total = replicator.run(
        lambda batch: (
            tf.strings.length(batch["w"])
            + tf.cast(batch["t"], tf.int32)
            + tf.cast(tf.math.real(batch["c"]), tf.int32)
        ),
        {"w": words, "t": tf.constant([10.0, 20.0]), "c": complex_},
    )[0]
    assert total.numpy().tolist() == [111, 223]


def test_the_traced_layouts_are_bounded():
    """Shapes that change from call to call are traced anew each time, with at most
    LAYOUT_CACHE_SIZE traces kept per step and a warning once that many are."""
    from impala_rep.learner.host_batch import LAYOUT_CACHE_SIZE

    traces = []

    def step_fn(batch):
        traces.append(None)  # Python runs only while tracing
        return batch["x"] + 1

    replicator = Replicator("cpu")
    shapes = [(rows, 1) for rows in range(1, LAYOUT_CACHE_SIZE + 3)]
    with pytest.warns(RuntimeWarning, match="change from call to call") as caught:
        for shape in shapes:
            np.testing.assert_array_equal(replicator.run(step_fn, {"x": np.zeros(shape)})[0], 1)
        replicator.run(step_fn, {"x": np.zeros(shapes[0])})  # dropped: traced again
    assert len(traces) == len(shapes) + 1
    assert len(replicator._compiled.get(step_fn)._traced) == LAYOUT_CACHE_SIZE
    assert len(caught) == 3 and all(w.filename == __file__ for w in caught)
    replicator.run(step_fn, {"x": np.zeros(shapes[-1])})  # a recent layout: kept
    assert len(traces) == len(shapes) + 1
