"""Observations as one array or as a nest of them, in numpy (actors import no TensorFlow).

Most environments give one array per step: a vector `[D]` or an image `[H, W, C]`, and an
observation's shape is a tuple. A `Dict` or `Tuple` observation with an image among other
parts travels as a nest instead: a dict `{key: array}` (a Tuple's parts under the keys "0",
"1", ...), each part a vector or an image, from the actors' unrolls through the learner's
queue and staging to the agent, which encodes each part by its kind (a CNN for an image).
Its shape is then a dict `{key: shape}` and its dtype a dict `{key: dtype}`.

Keys are strings, kept sorted: the order in which `tf.nest` takes a dict's, so the leaves of
a nest line up wherever they are flattened.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

# One observation's shape: a tuple, or for a nest a dict of tuples.
Shape = tuple[int, ...] | dict[str, tuple[int, ...]]


def is_nest(value: Any) -> bool:
    """Whether `value` (an observation, a batch of them, a shape or a dtype) is a nest."""
    return isinstance(value, Mapping)


def shape_of(shape: Sequence[int] | Mapping[str, Sequence[int]]) -> Shape:
    """`shape` in its one form: a tuple of ints, or a dict of them with sorted keys (from
    lists, numpy ints, a JSON round trip or a Ray transfer)."""
    if is_nest(shape):
        return {str(key): shape_of(shape[key]) for key in sorted(shape)}
    return tuple(int(d) for d in shape)


def dtype_of(dtype: Any, shape: Shape) -> np.dtype | dict[str, np.dtype]:
    """`dtype` as numpy dtypes: one for an array, a dict like `shape`'s for a nest."""
    if is_nest(shape):
        if not is_nest(dtype) or sorted(dtype) != list(shape):
            raise ValueError(
                f"observation dtypes {dtype!r} do not match the nest {shape!r}: a nest's "
                "dtypes are a dict with its keys"
            )
        return {key: np.dtype(dtype[key]) for key in shape}
    return np.dtype(dtype)


def leaves(value: Any) -> list[Any]:
    """The leaves of one observation, shape or nest of statistics, in key order (the order
    `tf.nest` flattens a dict in); one that is no nest is its own single leaf."""
    return [value[key] for key in sorted(value)] if is_nest(value) else [value]


def is_vectors(shape: Shape) -> bool:
    """Whether `shape` is a vector's `(D,)` or a nest of them only."""
    return all(len(part) == 1 for part in leaves(shape))


def map_leaves(fn: Callable[..., Any], *values: Any) -> Any:
    """`fn` over the leaves of one or more observations of the same structure: on the
    arrays themselves when they are no nest, key by key when they are."""
    if is_nest(values[0]):
        return {key: fn(*(value[key] for value in values)) for key in sorted(values[0])}
    return fn(*values)


def rows(observation: Any, index: Any) -> Any:
    """`observation[index]` leaf by leaf: one env's observation of a batch, or some rows."""
    return map_leaves(lambda leaf: leaf[index], observation)


def set_rows(target: Any, index: Any, value: Any) -> None:
    """`target[index] = value` leaf by leaf (writes into `target`'s arrays)."""
    if is_nest(target):
        for key in target:
            target[key][index] = value[key]
    else:
        target[index] = value


def of_space(space: Any) -> tuple[Shape, Any]:
    """The shape and dtype of a gymnasium space's observations: a nest's for a `Dict` of
    parts (the env factory's nests), an array's for anything else."""
    parts = getattr(space, "spaces", None)
    if isinstance(parts, Mapping):
        return (
            shape_of({key: part.shape for key, part in parts.items()}),
            {str(key): np.dtype(part.dtype) for key, part in parts.items()},
        )
    if getattr(space, "shape", None) is None:
        raise ValueError(
            f"observation space {space} has no fixed shape; the actors take a Box, or a Dict "
            "of Boxes (the env factory's nests)"
        )
    return shape_of(space.shape), np.dtype(space.dtype)


def describe(shape: Shape, dtype: Any) -> str:
    """`[4] float32`, or for a nest `{image: [7, 7, 21] uint8, direction: [4] uint8}`."""
    shape = shape_of(shape)
    dtype = dtype_of(dtype, shape)
    if is_nest(shape):
        parts = (f"{key}: {list(shape[key])} {dtype[key].name}" for key in shape)
        return "{" + ", ".join(parts) + "}"
    return f"{list(shape)} {dtype.name}"
