"""What keeps the hosts of a multi-host learner in lock-step (TensorFlow, Ray-free).

Under `MultiWorkerMirroredStrategy` every step's collectives block until every
host joins them, so all hosts must run the same steps in the same order and take
every decision to stop or to checkpoint together. `HostSync.agree` is that
decision: one small all-reduce through the Replicator before each step.
`ScratchCheckpoint` is how a non-chief host takes part in a checkpoint.
"""

from __future__ import annotations

import shutil
import tempfile

import numpy as np

from impala_rep.learner.replicator import Replicator, all_gather, all_reduce

__all__ = ["HostSync", "ScratchCheckpoint"]


def _min_over_replicas(flags):
    return all_reduce(flags, op="min")


def _gather_over_replicas(values):
    return all_gather(values, axis=0)


class HostSync:
    """`agree(ready=, checkpoint=)` -> (every host is ready, some host wants a checkpoint).

    A collective: it returns only once every host has called it, which is what
    makes a host that stops (or has no batch after its queue closed) release the
    others instead of leaving them blocked in the next step's all-reduce.
    """

    def __init__(self, replicator: Replicator):
        self._replicator = replicator

    def agree(self, *, ready: bool, checkpoint: bool) -> tuple[bool, bool]:
        # min over [ready, not checkpoint]: all ready, and not (any wants a checkpoint).
        flags = np.array([[float(ready), 1.0 - float(checkpoint)]], np.float32)
        flags = np.repeat(flags, self._replicator.num_local_replicas, axis=0)
        agreed = np.asarray(self._replicator.run(_min_over_replicas, flags)[0]).reshape(-1)
        return bool(agreed[0] > 0.5), bool(agreed[1] < 0.5)

    def total(self, count: int) -> int:
        """The sum of every host's `count` (a collective, like `agree`)."""
        # Gathered, then summed here in Python ints: exact, where a float32 all-reduce
        # would round counts past 2**24. Each count travels as two float32 halves
        # (exact below 2**24 each); a host's other local replicas send zeros.
        values = np.zeros((self._replicator.num_local_replicas, 2), np.float32)
        values[0] = divmod(int(count), 1 << 12)
        gathered = np.asarray(self._replicator.run(_gather_over_replicas, values)[0])
        high, low = np.rint(gathered.reshape(-1, 2)).astype(np.int64).sum(axis=0)
        return int(high) * (1 << 12) + int(low)

    def gather(self, values) -> np.ndarray:
        """Every host's `values` (a float vector of one length on all hosts), `[hosts, k]` in
        host order (a collective, like `agree`)."""
        values = np.asarray(values, np.float32).reshape(1, -1)
        local = np.zeros((self._replicator.num_local_replicas, values.shape[1]), np.float32)
        local[0] = values[0]  # a host's other local replicas send zeros, dropped below
        gathered = np.asarray(self._replicator.run(_gather_over_replicas, local)[0])
        return gathered[:: self._replicator.num_local_replicas]


class ScratchCheckpoint:
    """A non-chief host's part in a checkpoint: the same save, into a temporary directory
    that is deleted right after.

    TensorFlow's multi-worker guide has every worker save, because the save may
    involve collectives, and non-chief workers write to a temporary directory
    so that they do not clobber the chief's files. Only the chief's checkpoint
    (`RunCheckpoint` in LOGDIR/checkpoints) is kept, and a resumed host restores
    from it (`restore_from`), so that every host starts from the same state.
    """

    def __init__(self, *, learner, restore_from: str | None = None, extension_states=None):
        self._learner = learner
        self._extension_states = dict(extension_states or {})  # as the chief's RunCheckpoint
        self._restore_from = restore_from

    def save(self, counters) -> str:
        from impala_rep.learner.checkpointing import RunCheckpoint

        directory = tempfile.mkdtemp(prefix="impala-rep-host-checkpoint-")
        try:
            RunCheckpoint(
                learner=self._learner, directory=directory, extension_states=self._extension_states
            ).save(counters)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        return ""

    def restore(self):
        """The chief's newest readable checkpoint, read only: (path, counters)."""
        from impala_rep.learner.checkpointing import RunCheckpoint

        if self._restore_from is None:
            raise FileNotFoundError("this learner host was given no checkpoint to restore")
        return RunCheckpoint(
            learner=self._learner,
            directory=self._restore_from,
            extension_states=self._extension_states,
        ).restore()
