"""A host batch on its way into a compiled step: one buffer, one traced call per layout.

`Replicator.run` and `repeat` take a nest of host arrays at every step. Handed to a
`tf.function` as they are, each leaf becomes a tensor on its own and the function matches
the whole nest against its traces on every call: for a small network's batch (the CartPole
learner's has 11 arrays) that is a sizeable share of the calling thread's CPU a step
(docs/notebook.md, "Where the CPU goes"). So a nest of numpy arrays travels as ONE
uint8 buffer (one conversion, one transfer to the device), sliced and bitcast back into
its leaves inside the graph, and each input layout is traced once into a concrete function
that later calls use directly. Anything else (tensors, strings, Python numbers) goes leaf
by leaf, as `tf.function` would take it, through the same per-layout cache.

That cache is bounded: a `TracedCalls` keeps the concrete functions of its
`LAYOUT_CACHE_SIZE` most recently used layouts (a `BoundedCache`), and warns when it drops
one that served a single call, the mark of a batch whose shapes change from call to call.
"""

from __future__ import annotations

import collections
import math
import threading
import warnings
from collections.abc import Callable, Hashable, Sequence
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf

__all__ = [
    "BoundedCache",
    "HostFeed",
    "LAYOUT_CACHE_SIZE",
    "TracedCalls",
    "feed",
    "pack",
    "packable",
    "unpack",
]

# Input layouts one TracedCalls keeps traced. A training loop feeds one layout (two with a
# short last batch); more than this means shapes that change from call to call.
LAYOUT_CACHE_SIZE = 8


def packable(x: Any) -> bool:
    """Whether `x` can travel in a packed buffer: a numpy array whose bytes TensorFlow
    reads the same way (booleans, signed and unsigned integers, floats)."""
    return isinstance(x, np.ndarray) and x.dtype.kind in "biuf"


Layout = Sequence[tuple[tuple[int, ...], tf.DType]]


def _nbytes(shape: tuple[int, ...], dtype: tf.DType) -> int:
    return dtype.size * math.prod(shape)


def pack(leaves: Sequence[np.ndarray]) -> np.ndarray:
    """The leaves' bytes, C order, one after the other, as one 1-D uint8 array."""
    return np.concatenate([np.ascontiguousarray(x).reshape(-1).view(np.uint8) for x in leaves])


def unpack(buffer: tf.Tensor, layout: Layout) -> list[tf.Tensor]:
    """Inverse of `pack` inside a graph: `buffer` `[bytes]` uint8 -> one tensor per
    `(shape, dtype)` of `layout`."""
    leaves, offset = [], 0
    for shape, dtype in layout:
        size = _nbytes(shape, dtype)
        piece = buffer[offset : offset + size]
        offset += size
        if dtype == tf.bool:  # no bitcast to bool; numpy stores it as one 0/1 byte
            value = tf.not_equal(piece, 0)
        elif dtype == tf.uint8:
            value = piece
        elif dtype.size == 1:
            value = tf.bitcast(piece, dtype)
        else:
            value = tf.bitcast(tf.reshape(piece, [-1, dtype.size]), dtype)
        leaves.append(tf.reshape(value, shape))
    return leaves


class HostFeed(NamedTuple):
    """A host batch made ready for a `TracedCalls` call: what `feed` returns.

    `inputs` is the nest (for its structure), `layout` the leaves' (shape, dtype),
    `packed` whether `tensors` is the one packed buffer (else the leaves themselves)."""

    inputs: Any
    layout: tuple
    packed: bool
    tensors: list


def feed(inputs: Any, leaves: Sequence[Any]) -> HostFeed:
    """`inputs` (a nest whose `tf.nest.flatten` is `leaves`) made ready for a call: packed
    into one buffer and converted to a tensor when every leaf is packable.

    The conversion is the host's part of a step. It needs no traced function, so a thread
    can feed the next batch while the step before runs (`Replicator.stage`)."""
    packed = all(map(packable, leaves))
    # numpy or TensorFlow dtypes as the leaves have them (both hashable): converted
    # only when a layout is first traced, not on every call.
    layout = tuple((tuple(x.shape), x.dtype) for x in leaves)
    tensors = [tf.convert_to_tensor(pack(leaves))] if packed else list(leaves)
    return HostFeed(inputs, layout, packed, tensors)


class BoundedCache:
    """A mapping of at most `size` entries that drops the least recently used one first.

    Thread-safe (the lock guards the bookkeeping, not the values).
    """

    def __init__(self, size: int):
        if size < 1:
            raise ValueError(f"a BoundedCache needs a size >= 1, got {size}")
        self.size = size
        # key -> [value, the times `get` found it]
        self._entries: collections.OrderedDict[Hashable, list] = collections.OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable) -> Any:
        """The value for `key` (now the most recently used entry), or None."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            self._entries.move_to_end(key)
            entry[1] += 1
            return entry[0]

    def put(self, key: Hashable, value: Any) -> int | None:
        """Stores `value` for `key` as the most recently used entry. Returns None, or, if
        the least recently used entry was dropped to make room, the times `get` found it:
        0 for a value that served only the call that stored it."""
        with self._lock:
            self._entries[key] = [value, 0]
            self._entries.move_to_end(key)
            if len(self._entries) <= self.size:
                return None
            return self._entries.popitem(last=False)[1][1]


class TracedCalls:
    """`body(inputs, static, *args)` compiled once per input layout, called with host batches.

    The concrete functions of the `LAYOUT_CACHE_SIZE` most recently used layouts are kept;
    tracing one more drops the least recently used (traced again if it comes back), with a
    `RuntimeWarning` if that one served a single call.

    Args:
      body: the function to trace; `inputs` reaches it as a nest of tensors with the
        caller's structure.
      jit_compile: compile with XLA (`tf.function(jit_compile=...)`).
    """

    def __init__(self, body: Callable[..., Any], *, jit_compile: bool):
        self._body = body
        self._jit_compile = jit_compile
        self._traced = BoundedCache(LAYOUT_CACHE_SIZE)  # key -> (structure, concrete function)

    def __call__(self, fed: HostFeed, static: Hashable, *args: tf.Tensor) -> Any:
        """Calls the concrete function for `fed`'s layout (tracing it at its first call).

        Args:
          fed: the host batch, as `feed` made it (possibly in another thread, ahead of time).
          static: a hashable Python value the body is traced with (one trace per value).
          args: further tensors, traced by their shape and dtype.
        """
        key = (fed.packed, static, fed.layout, tuple((a.shape, a.dtype) for a in args))
        entry = self._traced.get(key)
        # Two nests can share the leaves' layout and differ in structure (dict keys).
        if entry is None or not _same_structure(entry[0], fed.inputs):
            # The structure alone (None leaves) is kept, only when a layout is first traced.
            structure = tf.nest.map_structure(lambda _: None, fed.inputs)
            entry = (
                structure,
                self._trace(
                    structure,
                    [(s, tf.as_dtype(d)) for s, d in fed.layout],
                    fed.packed,
                    static,
                    args,
                ),
            )
            if self._traced.put(key, entry) == 0:
                warnings.warn(
                    "Replicator: tracing a step for a new input layout dropped the least "
                    f"recently used of the {self._traced.size} layouts it keeps, traced for "
                    "a single call. A batch whose shapes, dtypes or structure change from "
                    "call to call is traced anew at every call: keep them fixed",
                    RuntimeWarning,
                    stacklevel=3,  # the caller of Replicator.run or repeat
                )
        return entry[1](*fed.tensors, *args)

    def _trace(
        self,
        structure: Any,
        layout: Layout,
        packed: bool,
        static: Hashable,
        args: Sequence[tf.Tensor],
    ) -> Callable:
        fed = 1 if packed else len(layout)

        def traced(*tensors):
            leaves = unpack(tensors[0], layout) if packed else list(tensors[:fed])
            return self._body(tf.nest.pack_sequence_as(structure, leaves), static, *tensors[fed:])

        specs = (
            [tf.TensorSpec([sum(_nbytes(s, d) for s, d in layout)], tf.uint8)]
            if packed
            else [tf.TensorSpec(s, d) for s, d in layout]
        )
        specs += [tf.TensorSpec(a.shape, a.dtype) for a in args]
        return tf.function(
            traced, jit_compile=self._jit_compile, autograph=False
        ).get_concrete_function(*specs)


def _same_structure(a: Any, b: Any) -> bool:
    try:
        tf.nest.assert_same_structure(a, b)
    except (ValueError, TypeError):
        return False
    return True
