"""Static shape checks for time-major tensors.

Shapes are described with tuples whose entries are

* a symbolic letter such as ``"T"`` (unroll length), ``"B"`` (batch) or
  ``"A"`` (number of actions): every tensor checked against the same ``dims``
  dict must use the same size for that letter;
* an ``int``: the dimension must have exactly this size;
* ``None``: any size.

Only static shapes (``tf.TensorShape``) are inspected, so the checks cost
nothing at run time and work unchanged inside ``tf.function``.  A dimension
that is unknown statically (``None`` in the shape) is skipped, and a tensor of
unknown rank is not checked at all.

Example::

    dims = {}
    assert_shape("values", values, ("T", "B"), dims=dims)
    assert_shape("bootstrap_value", bootstrap_value, ("B",), dims=dims)
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

__all__ = ["assert_shape"]


def _describe(expected: tuple[str | int | None, ...]) -> str:
    """Renders ``("T", "B", None)`` as ``"[T, B, ?]"`` for error messages."""
    parts = ["?" if d is None else str(d) for d in expected]
    return "[" + ", ".join(parts) + "]"


def assert_shape(
    name: str,
    tensor: Any,
    expected: tuple[str | int | None, ...],
    *,
    dims: dict[str, tuple[int, str]] | None = None,
) -> None:
    """Raises ``ValueError`` unless ``tensor``'s static shape matches ``expected``.

    Args:
      name: argument name, used in the error message.
      tensor: anything with a ``.shape`` (``tf.Tensor``, ``np.ndarray``, ...).
      expected: one entry per dimension: a letter (bound via ``dims``), an
        ``int`` or ``None`` (any size).
      dims: the check group.  Pass the same dict (initially empty) to every
        call whose letters must agree; ``assert_shape`` records in it, for
        each letter, the size seen first and the argument it came from.
        Without it each call is checked on its own.

    Raises:
      ValueError: e.g. ``"log_rhos must have shape [T, B]; got (5,)"``.
    """
    shape = tf.TensorShape(tensor.shape)
    if shape.rank is None:
        return
    got = tuple(shape.as_list())
    want = _describe(expected)
    if shape.rank != len(expected):
        raise ValueError(f"{name} must have shape {want}; got {got}")
    if dims is None:
        dims = {}
    for axis, (size, spec) in enumerate(zip(got, expected)):
        if size is None or spec is None:
            continue
        if isinstance(spec, int):
            if size != spec:
                raise ValueError(
                    f"{name} must have shape {want}; got {got} (dimension {axis} must be {spec})"
                )
            continue
        if spec not in dims:
            dims[spec] = (size, name)
            continue
        bound_size, bound_by = dims[spec]
        if size != bound_size:
            raise ValueError(
                f"{name} must have shape {want}; got {got} ({spec}={bound_size} from {bound_by})"
            )
