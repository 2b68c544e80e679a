"""Transforms of an already all-reduced gradient list: global-norm clipping and zeroing.

Entries may be dense tensors, `tf.IndexedSlices` (e.g. from an embedding
lookup) or `None` (a variable the loss does not reach), and keep their kind.
The Learner applies them after `all_reduce_gradients`, when every replica holds
the same global gradient, so every replica takes the same decisions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tensorflow as tf

__all__ = ["clip_by_global_norm", "zero_unless"]


def clip_by_global_norm(
    grads: Sequence[Any], max_norm: float | None
) -> tuple[list[Any], tf.Tensor]:
    """`(grads scaled to a global norm of at most max_norm, the global norm before)`.

    `max_norm=None` leaves the gradients alone (the norm is still returned).
    """
    grads = list(grads)
    norm = tf.linalg.global_norm([g for g in grads if g is not None])
    if max_norm is None:
        return grads, norm
    # norm 0 gives max_norm / 0 = inf -> scale 1.
    scale = tf.minimum(tf.ones_like(norm), tf.constant(max_norm, norm.dtype) / norm)
    return [_map_values(g, lambda v: v * tf.cast(scale, v.dtype)) for g in grads], norm


def zero_unless(condition: tf.Tensor, grads: Sequence[Any]) -> list[Any]:
    """`grads` if the scalar bool `condition`, else zeros of their shapes.

    A select rather than a multiplication: NaN * 0 would stay NaN.
    """
    return [_map_values(g, lambda v: tf.where(condition, v, tf.zeros_like(v))) for g in grads]


def _map_values(grad: Any, fn) -> Any:
    if grad is None:
        return None
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(fn(grad.values), grad.indices, grad.dense_shape)
    return fn(grad)
