"""Converting numpy arrays, Python scalars and tensors to float tensors.

The algorithm functions accept numpy or TensorFlow input and compute in the
float dtype of their main argument, so float64 input stays float64 (the tests
compare against float64 references) and float32 stays float32.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

__all__ = ["float_tensor", "cast_to"]


def float_tensor(x: Any) -> tf.Tensor:
    """Converts to a tensor, keeping float dtypes and mapping others to float32."""
    # No dtype_hint here: with dtype_hint=tf.float32, convert_to_tensor
    # silently narrows a float64 numpy array to float32.  Python floats become
    # float32 by default anyway.
    x = tf.convert_to_tensor(x)
    if not x.dtype.is_floating:
        x = tf.cast(x, tf.float32)
    return x


def cast_to(x: Any, dtype: tf.DType) -> tf.Tensor:
    """Converts ``x`` to ``dtype``; Python scalars are converted exactly."""
    # tf.cast(0.7, tf.float64) would round 0.7 through float32 first.
    return tf.cast(tf.convert_to_tensor(x, dtype_hint=dtype), dtype)
