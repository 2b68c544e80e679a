"""A bounded, thread-safe queue of unrolls between the actors and the learner.

Actors `put` one `Unroll` block of `E` columns at a time (one column per
environment they step); the learner takes batches of exactly `B` columns with
`get_batch`, which concatenates blocks and splits one when `B` is not a sum of
whole blocks. The queue is bounded in blocks: a full queue blocks `put`, which
is the back-pressure that keeps actors from running ahead of the learner (and
keeps policy lag bounded). Nothing is ever dropped.

Accounting, in frames (`T * columns`): `frames_put == frames_got +
frames_queued` at all times; `counts()` reads all of them atomically.
"""

from __future__ import annotations

import collections
import queue
import threading
import time
from typing import NamedTuple

import numpy as np

from impala_rep.config.validation import is_int
from impala_rep.unroll import EpisodeStats, Unroll, concat_unrolls, slice_columns

__all__ = ["UnrollQueue", "QueueClosed", "QueueCounts"]


class QueueClosed(Exception):
    """The UnrollQueue was closed: no more puts, and no batch can be completed."""


class QueueCounts(NamedTuple):
    """One consistent reading of the queue's counters (frames = T * columns)."""

    frames_put: int
    frames_got: int
    frames_queued: int
    size: int


class _Block(NamedTuple):
    unroll: Unroll
    stats: list[EpisodeStats]


def _merge(blocks: list[_Block]) -> _Block:
    """Blocks concatenated along the batch axis, their stats in order."""
    unrolls = [b.unroll for b in blocks]
    unroll = unrolls[0] if len(unrolls) == 1 else concat_unrolls(unrolls)
    return _Block(unroll, [s for b in blocks for s in b.stats])


class UnrollQueue:
    """Bounded FIFO of `Unroll` blocks, read in batches of columns.

    Args:
      capacity: the most unroll blocks held; `put` blocks while that many are
        queued. Must be >= 1.

    A `get_batch` that needs more columns than are queued takes whole blocks out
    as they arrive (freeing room for more puts, so a batch larger than
    `capacity` blocks still fills) and keeps them as a partial batch; frames in
    a partial batch still count as queued. Only one `get_batch` collects at a
    time, so concurrent readers cannot interleave their batches. If it times out
    or the queue closes, the partial batch goes back to the head as one block,
    order preserved.
    """

    def __init__(self, capacity: int):
        if not is_int(capacity) or capacity < 1:
            raise ValueError(f"capacity must be an integer >= 1, got {capacity!r}")
        self._capacity = capacity
        self._blocks: collections.deque[_Block] = collections.deque()
        self._cond = threading.Condition()
        self._closed = False
        self._reading = False  # a get_batch is collecting a batch
        self._unroll_length: int | None = None
        self._frames_put = 0
        self._frames_got = 0
        self._frames_queued = 0

    # --- counters ----------------------------------------------------------------

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def size(self) -> int:
        """Unroll blocks waiting in the queue (a partial remainder counts as one)."""
        with self._cond:
            return len(self._blocks)

    @property
    def frames_put(self) -> int:
        with self._cond:
            return self._frames_put

    @property
    def frames_got(self) -> int:
        with self._cond:
            return self._frames_got

    @property
    def frames_queued(self) -> int:
        """Frames put but not yet returned by `get_batch` (partial batches included)."""
        with self._cond:
            return self._frames_queued

    def counts(self) -> QueueCounts:
        """All counters read under one lock, so the accounting invariant holds in them."""
        with self._cond:
            return QueueCounts(
                self._frames_put, self._frames_got, self._frames_queued, len(self._blocks)
            )

    @property
    def closed(self) -> bool:
        with self._cond:
            return self._closed

    # --- operations --------------------------------------------------------------

    def put(
        self, unroll: Unroll, stats: EpisodeStats | None = None, timeout: float | None = None
    ) -> None:
        """Appends one unroll block, blocking while `capacity` blocks are queued.

        Args:
          unroll: an `Unroll` with `E >= 1` columns and the same `T` as earlier puts.
          stats: episodes the actor finished while recording it; returned with the
            batch that takes the block's first column.
          timeout: seconds to wait for room; None waits forever.

        Raises:
          QueueClosed: the queue is (or gets) closed.
          queue.Full: no room within `timeout`.
          ValueError: `unroll` has no columns or another unroll length.
        """
        shape = np.shape(unroll.actions)
        if len(shape) < 2 or shape[1] < 1:
            raise ValueError(
                f"unroll.actions must be [T, E, *action_shape] with E >= 1, got shape {shape}"
            )
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            if self._unroll_length is None:
                self._unroll_length = shape[0]
            elif shape[0] != self._unroll_length:
                raise ValueError(
                    f"unroll length T={shape[0]} differs from the queue's T={self._unroll_length}"
                )
            while not self._closed and len(self._blocks) >= self._capacity:
                if not self._wait(deadline):
                    raise queue.Full(
                        f"UnrollQueue stayed full ({self._capacity} unrolls) for {timeout} s"
                    )
            if self._closed:
                raise QueueClosed("put on a closed UnrollQueue")
            self._blocks.append(_Block(unroll, [] if stats is None else [stats]))
            frames = shape[0] * shape[1]
            self._frames_put += frames
            self._frames_queued += frames
            self._cond.notify_all()

    def get_batch(
        self, batch_size: int, timeout: float | None = None
    ) -> tuple[Unroll, list[EpisodeStats]]:
        """Removes and returns exactly `batch_size` columns, oldest first.

        Blocks are concatenated along the batch axis; when only part of the head
        block is needed, it is split and the remainder stays at the head.

        Args:
          batch_size: columns to return, >= 1.
          timeout: seconds to wait in total; None waits forever.

        Returns:
          `(batch, stats)`: an `Unroll` with `batch_size` columns and the
          `EpisodeStats` of the blocks it started, in order.

        Raises:
          QueueClosed: the queue is closed and holds too few columns. Whatever it
            holds stays queued.
          queue.Empty: the batch could not be completed within `timeout`.
        """
        if not is_int(batch_size) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._reading:  # another get_batch is collecting: wait for our turn
                if self._closed:
                    raise QueueClosed("UnrollQueue closed while waiting for another get_batch")
                if not self._wait(deadline):
                    raise queue.Empty(f"no batch of {batch_size} columns within {timeout} s")
            if self._closed and self._queued_columns() < batch_size:
                raise QueueClosed(f"UnrollQueue closed with fewer than {batch_size} columns queued")
            self._reading = True
            try:
                return self._collect(batch_size, deadline, timeout)
            finally:
                self._reading = False
                self._cond.notify_all()

    def close(self) -> None:
        """Closes the queue and wakes every waiter.

        Later puts raise `QueueClosed`; gets still return complete batches from
        what is queued, then raise `QueueClosed`.
        """
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    # --- internals (called with the lock held) -----------------------------------

    def _wait(self, deadline: float | None) -> bool:
        """Waits for a notification; False once `deadline` has passed."""
        if deadline is None:
            self._cond.wait()
            return True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        self._cond.wait(remaining)
        return True

    def _queued_columns(self) -> int:
        return sum(block.unroll.num_columns for block in self._blocks)

    def _collect(
        self, batch_size: int, deadline: float | None, timeout: float | None
    ) -> tuple[Unroll, list[EpisodeStats]]:
        taken: list[_Block] = []
        have = 0
        while have < batch_size:
            while not self._blocks:
                failure = None
                if self._closed:
                    failure = QueueClosed(f"UnrollQueue closed before {batch_size} columns arrived")
                elif not self._wait(deadline):
                    failure = queue.Empty(f"no batch of {batch_size} columns within {timeout} s")
                if failure is not None:
                    if taken:
                        # Back to the head as ONE block: order kept, nothing lost, and
                        # the queue (empty at this point) holds a single block.
                        self._blocks.appendleft(_merge(taken))
                    raise failure
            head = self._blocks[0]
            need = batch_size - have
            columns = head.unroll.num_columns
            if columns <= need:
                self._blocks.popleft()
                taken.append(head)
                have += columns
            else:
                # Only the last piece of a batch is ever split; the remainder keeps
                # its place at the head and its stats went with the first part.
                taken.append(_Block(slice_columns(head.unroll, 0, need), head.stats))
                self._blocks[0] = _Block(slice_columns(head.unroll, need, columns), [])
                have += need
            # Room freed: wake blocked puts.
            self._cond.notify_all()

        batch = _merge(taken)
        frames = batch.unroll.num_frames
        self._frames_got += frames
        self._frames_queued -= frames
        return batch.unroll, batch.stats
