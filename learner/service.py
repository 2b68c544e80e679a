"""The learner as a service: a bounded unroll queue feeding a training thread.

`LearnerService` runs without Ray: actors hand it unrolls through `enqueue`
(which blocks while the queue is full: back-pressure, nothing dropped), a
background thread takes batches of `batch_size` unrolls and runs
`Learner.step`, and after every step the new weights are published through the
injected `publish` function (identity without Ray; `ray.put` under Ray, so every
actor fetches one shared copy from the object store). `learner/ray_learner.py`
wraps it as a Ray actor.
"""

from __future__ import annotations

import threading
import time
import traceback
from typing import Any, Callable

import numpy as np

from impala_rep.learner.unroll_queue import QueueClosed, UnrollQueue
from impala_rep.unroll import EpisodeStats, Unroll

__all__ = ["LearnerService"]


class LearnerService:
    """Owns a `Learner` and its queue; trains until `total_frames` have been consumed.

    Args:
      learner: a `Learner` (step, get_weights, num_steps).
      batch_size: unrolls (env columns) per learner step.
      total_frames: stop after consuming this many frames, counted as the queue
        counts them (agent steps: T * columns).
      queue_capacity: unroll blocks held before `enqueue` blocks.
      publish: turns the weight list into what actors receive (`ray.put` under Ray).
    """

    def __init__(self, *, learner, batch_size: int, total_frames: int, queue_capacity: int,
                 publish: Callable[[list[np.ndarray]], Any] = lambda weights: weights):
        self._learner = learner
        self._batch_size = batch_size
        self._total_frames = total_frames
        self._publish = publish
        self._queue = UnrollQueue(queue_capacity)
        self._lock = threading.Lock()
        self._episodes: list[EpisodeStats] = []
        self._metrics: dict[str, float] = {}
        self._busy_s = 0.0
        self._step_started: float | None = None  # set while a step runs
        self._error: str | None = None
        self._done = threading.Event()
        version, weights = learner.get_weights()
        # Actors hold the published object inside a list so that Ray passes the
        # reference through instead of resolving it on every reply.
        self._published = (version, [publish(weights)])
        self._thread = threading.Thread(target=self._train_loop, name="learner", daemon=True)
        self._thread.start()

    # --- called by actors -----------------------------------------------------------
    def enqueue(self, unroll: Unroll, stats: EpisodeStats | None = None) -> tuple[bool, int, list]:
        """Queues one unroll (blocking while full); replies (stop, version, [weights])."""
        if not self._done.is_set():
            try:
                self._queue.put(unroll, stats)
            except QueueClosed:
                pass
        version, weights = self._published
        return self._done.is_set(), version, weights

    def latest_weights(self) -> tuple[int, list]:
        return self._published

    # --- called by the driver -------------------------------------------------------
    def report(self) -> dict[str, Any]:
        """Counters, latest step metrics and the episodes finished since the last report."""
        with self._lock:
            episodes, self._episodes = self._episodes, []
            metrics = dict(self._metrics)
            # Count a step in progress up to now, so each report gets the busy time
            # that fell inside it (a long step, e.g. the first one with tracing,
            # would otherwise land whole in one report and exceed 100%).
            busy_s = self._busy_s
            if self._step_started is not None:
                busy_s += time.monotonic() - self._step_started
        # One locked read, so produced == consumed + queued holds in every report.
        counts = self._queue.counts()
        returns = np.concatenate([e.returns for e in episodes]) if episodes else np.zeros(0)
        lengths = np.concatenate([e.lengths for e in episodes]) if episodes else np.zeros(0)
        return {
            "learner_steps": self._learner.num_steps,
            "frames_produced": counts.frames_put,
            "frames_consumed": counts.frames_got,
            "frames_queued": counts.frames_queued,
            "queue_size": counts.size,
            "learner_busy_s": busy_s,
            "episode_returns": returns.tolist(),
            "episode_lengths": lengths.tolist(),
            "metrics": metrics,
            "done": self._done.is_set(),
            "error": self._error,
        }

    def stop(self) -> None:
        self._done.set()
        self._queue.close()
        self._thread.join(timeout=30)

    def get_weights(self) -> tuple[int, list[np.ndarray]]:
        return self._learner.get_weights()

    def save(self, directory: str) -> str:
        return self._learner.save(directory)

    # --- the training thread --------------------------------------------------------
    def _train_loop(self) -> None:
        try:
            while self._queue.frames_got < self._total_frames and not self._done.is_set():
                batch, stats = self._queue.get_batch(self._batch_size)
                with self._lock:
                    self._step_started = time.monotonic()
                metrics = self._learner.step(batch)
                version, weights = self._learner.get_weights()
                self._published = (version, [self._publish(weights)])
                with self._lock:
                    self._busy_s += time.monotonic() - self._step_started
                    self._step_started = None
                    self._metrics = metrics
                    self._episodes.extend(s for s in stats if s is not None)
        except QueueClosed:
            pass
        except Exception:  # surfaced to the driver through report()
            self._error = traceback.format_exc()
        finally:
            self._done.set()
            self._queue.close()
