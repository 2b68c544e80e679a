"""The learner's staging area: the next batch taken and made ready while a step runs.

A learner step has a host part (take `B` columns from the unroll queue, scale the
rewards, cast and pack the arrays into one buffer, convert it to a tensor) and the
compiled update. Done one after the other, the host part left the compiled update
idle: ~14% of the CartPole learner thread in py-spy. The IMPALA learner (Espeholt et
al. 2018) overlaps them with a staging area, TorchBeast with batching threads; here a
`BatchStager` thread does the host part of batch N+1 while the training thread runs
the update on batch N (the compiled call releases the GIL). One batch is staged at a
time: the stager takes batch N+1 only once the step has taken batch N, so the policy lag
grows by at most one batch.

`device_batch` is the part of an `Unroll` that goes to the devices; `Learner.prepare`
stages it (`StagedBatch`), and `Learner.step` takes either. `StagedBatches` is what
`LearnerService` takes its batches from.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf

from impala_rep.learner.replicator import StagedInputs
from impala_rep.learner.unroll_queue import QueueClosed
from impala_rep.observation_nest import map_leaves
from impala_rep.unroll import TIME_MAJOR_DTYPES, Unroll

__all__ = ["BatchStager", "Staged", "StagedBatch", "StagedBatches", "device_batch"]


class StagedBatch(NamedTuple):
    """A batch made ready for `Learner.step` by `Learner.prepare`."""

    inputs: StagedInputs  # the device part, checked, packed and converted
    policy_version: np.ndarray  # [B] int64: kept on the host (policy lag)


def device_batch(batch: Unroll) -> dict[str, Any]:
    """The part of `batch` that goes to the devices, splittable along axis 1."""
    device = {}
    # Cast to the layout's dtypes on the host, so every batch reaches the compiled
    # step with the same signature (no retracing because an actor sent float64
    # rewards). Observations keep the environment's dtype (e.g. uint8 frames).
    for name, dtype in TIME_MAJOR_DTYPES.items():
        value = map_leaves(np.asarray, getattr(batch, name))  # a nest of observations too
        device[name] = value if dtype is None else value.astype(dtype, copy=False)
    # [B, ...] -> [1, B, ...] so that Replicator.run's single batch_axis=1 also splits
    # the recurrent state by column; `()` (feed-forward agents) has no leaves.
    device["initial_state"] = tf.nest.map_structure(
        lambda x: np.expand_dims(np.asarray(x), 0), batch.initial_state
    )
    return device


class _Failed(NamedTuple):
    error: BaseException


class BatchStager:
    """A thread that keeps the next batch ready: `take()`, then `prepare(taken)`.

    Args:
      take: returns the next `taken` item (blocking while none is there), or None when
        there will be no more (the stager then ends).
      prepare: turns a `taken` item into what `get` returns, in the stager's thread.

    `get` returns the prepared items in order, then None once `take` returned None; an
    exception raised by `take` or `prepare` is raised by `get`. Call `get` no more after
    `close`.
    """

    def __init__(self, *, take: Callable[[], Any], prepare: Callable[[Any], Any]):
        self._take, self._prepare = take, prepare
        # One item in the stager's hands at a time, taken or prepared: the thread takes the
        # next only once `get` has handed the last one out, so the batch a step trains on
        # was taken at most one step before (the policy lag grows by at most one batch).
        self._free = threading.Semaphore(1)
        self._ready: queue.SimpleQueue = queue.SimpleQueue()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="learner-stager", daemon=True)
        self._thread.start()

    def get(self) -> Any:
        """The next prepared item (blocking until the stager has it), or None: no more."""
        item = self._ready.get()
        self._free.release()
        if isinstance(item, _Failed):
            raise item.error
        return item

    def close(self, timeout_s: float = 10.0) -> None:
        """Stops the thread after its current `take` returns (make `take` return, e.g. by
        closing its queue, for a prompt stop); a staged item is dropped."""
        self._closed.set()
        self._free.release()  # wakes the thread if it waits for `get`
        self._thread.join(timeout_s)

    def _run(self) -> None:
        try:
            while True:
                self._free.acquire()
                if self._closed.is_set():
                    return
                taken = self._take()
                item = None if taken is None else self._prepare(taken)
                self._ready.put(item)
                if item is None:
                    return
        except BaseException as error:  # surfaced by `get`, in the training thread
            self._ready.put(_Failed(error))


class Staged(NamedTuple):
    """A batch taken for the learner: `prepared` for `Learner.step` (None until a group's
    hosts have merged its parts together, `StagedBatches.transformed`), with the metrics of
    the batch transforms that made it and their states then (`{checkpoint_key: state}`)."""

    batch: Unroll
    stats: list
    prepared: StagedBatch | None
    metrics: dict
    states: dict


class StagedBatches:
    """A `LearnerService`'s batches: taken from its `UnrollQueue` and prepared one ahead.

    Args:
      queue: the service's `UnrollQueue`.
      batch_size: columns per batch.
      frames: the most frames to take (the run's, less what a resumed run had trained).
      learner: prepares each batch (`Learner.prepare`).
      transforms: the extensions' `BatchTransform`s, applied in order to each batch before
        `prepare`, each fed the batch's part first.
      sync: a multi-host group's agreement (`HostSync`), or None. With transforms, a group's
        hosts merge every host's parts in step, after agreeing on it: their batches come
        untransformed and unprepared, and the training thread calls `transformed`.
    """

    def __init__(self, *, queue, batch_size: int, frames: int, learner, transforms, sync):
        self._queue, self._batch_size, self._frames = queue, batch_size, frames
        self._learner, self._transforms, self._sync = learner, tuple(transforms), sync
        self._stager = BatchStager(take=self._take, prepare=self._stage)

    def get(self) -> Staged | None:
        """The next batch; None once the queue closed (a stop) or `frames` were taken."""
        return self._stager.get()

    def transformed(self, staged: Staged) -> Staged:
        """For a host of a group: every host merges every host's parts in host order, so all
        of them transform their shares alike (collectives: all hosts call it)."""
        parts = [self._sync.gather(t.part(staged.stats)) for t in self._transforms]
        return self._transformed(staged.batch, staged.stats, parts)

    def close(self) -> None:
        """Ends the stager (close the queue first, so that a waiting take returns)."""
        self._stager.close()

    def _take(self):
        if self._queue.frames_got >= self._frames:
            return None
        try:
            return self._queue.get_batch(self._batch_size)
        except QueueClosed:
            return None

    def _stage(self, taken) -> Staged:
        batch, stats = taken
        if self._transforms and self._sync is not None:
            return Staged(batch, stats, None, {}, {})
        return self._transformed(batch, stats, [[t.part(stats)] for t in self._transforms])

    def _transformed(self, batch, stats, parts) -> Staged:
        """`batch` transformed and prepared, once each transform has merged its `parts` (one
        per host)."""
        metrics, states = {}, {}
        for transform, its_parts in zip(self._transforms, parts):
            for part in its_parts:
                transform.merge(part)
            batch = transform.apply(batch)
            metrics.update(transform.metrics())
            states[transform.checkpoint_key] = tuple(transform.state)
        return Staged(batch, stats, self._learner.prepare(batch), metrics, states)
