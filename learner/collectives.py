"""The Replicator's cross-replica primitives, callable inside a `step_fn`.

`all_reduce`, `all_gather`, `broadcast`, `replica_id`, `num_replicas`, the gradient
reduction every optimizer step goes through, and `CrossReplicaBatchNorm`. All of them go
through `tf.distribute`'s replica context; `impala_rep.learner.replicator` re-exports
them, beside the `Replicator` that runs the step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tensorflow as tf

__all__ = [
    "CrossReplicaBatchNorm",
    "all_gather",
    "all_reduce",
    "all_reduce_gradients",
    "broadcast",
    "num_replicas",
    "replica_id",
]


def all_reduce_gradients(grads: Sequence[Any]) -> list[Any]:
    """The one place gradients are all-reduced: MEAN over replicas, `None` passed through."""
    present = [g for g in grads if g is not None]
    if not present:
        return list(grads)
    reduced = iter(all_reduce(present, op="mean"))
    return [None if g is None else next(reduced) for g in grads]


_REDUCE_OPS = ("sum", "mean", "max", "min")


def _context(primitive: str) -> tf.distribute.ReplicaContext:
    context = tf.distribute.get_replica_context()
    if context is None:
        raise RuntimeError(
            f"{primitive}() must be called inside a step_fn run by Replicator.run "
            "(a replica context), not in cross-replica code"
        )
    return context


def all_reduce(value: Any, op: str = "mean") -> Any:
    """Reduces `value` (a tensor or nested structure) over all replicas.

    Every replica receives the result. `op` is "sum", "mean", "max" or "min".
    """
    if op not in _REDUCE_OPS:
        raise ValueError(f"bad all_reduce op {op!r}: expected one of {', '.join(_REDUCE_OPS)}")
    context = _context("all_reduce")
    if op in ("sum", "mean"):
        reduce_op = tf.distribute.ReduceOp.SUM if op == "sum" else tf.distribute.ReduceOp.MEAN
        return context.all_reduce(reduce_op, _placed(value))
    # tf.distribute reduces only by sum and mean; max and min gather every replica's
    # value along a new leading axis and reduce that locally.
    reducer = tf.reduce_max if op == "max" else tf.reduce_min
    return tf.nest.map_structure(
        lambda x: reducer(context.all_gather(tf.expand_dims(x, 0), axis=0), axis=0), value
    )


def all_gather(value: Any, axis: int = 0) -> Any:
    """Concatenates every replica's `value` along `axis`, in replica order."""
    return _context("all_gather").all_gather(_placed(value), axis=axis)


def _placed(value: Any) -> Any:
    """`value` as tensors made inside this replica: under MultiWorkerMirroredStrategy a
    step_fn's raw input shard has no device, and collectives on it then fail
    ("destinations can not be empty"); an identity op made here takes the replica's."""
    return tf.nest.map_structure(tf.identity, value)


def broadcast(value: Any, source: int = 0) -> Any:
    """Returns replica `source`'s `value` on every replica (bit-exact, any dtype)."""
    context = _context("broadcast")
    if not 0 <= source < context.num_replicas_in_sync:
        raise ValueError(
            f"bad broadcast source {source}: expected 0..{context.num_replicas_in_sync - 1}"
        )
    return tf.nest.map_structure(
        lambda x: context.all_gather(tf.expand_dims(x, 0), axis=0)[source], value
    )


def replica_id() -> tf.Tensor:
    """This replica's index in 0..num_replicas()-1, as an int32 tensor."""
    return tf.cast(_context("replica_id").replica_id_in_sync_group, tf.int32)


def num_replicas() -> int:
    """The number of replicas taking part in this step, across all hosts."""
    return _context("num_replicas").num_replicas_in_sync


class CrossReplicaBatchNorm(tf.keras.layers.BatchNormalization):
    """Batch normalisation whose batch statistics are those of the global batch.

    Keras' `BatchNormalization(synchronized=True)` all-reduces the per-replica sums
    through `tf.distribute`, which is exactly cross-replica batch norm; this class
    only fixes that flag so agent code states its intent by name. Build it (call it
    once or `build(shape)`) inside `Replicator.scope()`.
    """

    def __init__(self, **kwargs):
        if kwargs.pop("synchronized", True) is not True:
            raise ValueError(
                "CrossReplicaBatchNorm is always synchronized; use "
                "tf.keras.layers.BatchNormalization for per-replica statistics"
            )
        super().__init__(synchronized=True, **kwargs)
