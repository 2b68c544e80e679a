"""A run's checkpoints: learner state plus the run's counters, in `LOGDIR/checkpoints`.

What a checkpoint holds (TensorFlow checkpoint format, no pickle):
  - `learner`: the agent's weights, the optimizer's state (its step counter is
    the learning-rate schedule's position) and the learner step;
  - `frames`: agent steps the learner has consumed (the driver multiplies by
    the env's frame skip for env frames);
  - `episodes`: episodes finished in the consumed unrolls;
  - `recent_returns` / `num_recent`: the returns of the last `window` episodes,
    so the mean return a resumed run reports continues where it stopped.

Atomicity comes from `tf.train.CheckpointManager`: the data files are written
under a temporary name and renamed, and only then does the `checkpoint` index
file, itself written atomically, point at them. A crash mid-write therefore
leaves the previous checkpoint in force. `restore_newest_readable` also falls
back to an older checkpoint if the newest one is unreadable (e.g. a truncated
file after a disk fault).
"""

from __future__ import annotations

import logging
import os
import types
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf

# Re-exported: what the index names, read without TensorFlow (the driver reads it).
from impala_rep.learner.checkpoint_index import CHECKPOINT_SUBDIR, newest_checkpoint

__all__ = [
    "RunCheckpoint",
    "RunCounters",
    "restore_newest_readable",
    "newest_checkpoint",
    "agent_trackables",
    "restore_agent",
    "CHECKPOINT_SUBDIR",
]


_log = logging.getLogger(__name__)


def agent_trackables(agent) -> dict:
    """How a learner's checkpoint holds its agent (the `Learner.checkpoint` keys `agent` and
    `agent_state`): one place, so that `impala-rep evaluate` reads back what the learner wrote.

    Non-trainable agent state (an agent's optional `non_trainable_variables`, e.g.
    batch-norm moving statistics) is saved under its own key, and only when there is
    some: checkpoints of agents without such state keep their layout."""
    agent_state = list(getattr(agent, "non_trainable_variables", ()))
    return {
        "agent": list(agent.trainable_variables),
        **({"agent_state": agent_state} if agent_state else {}),
    }


class RunCounters(NamedTuple):
    """The run's progress, as saved with the learner state."""

    frames: int  # agent steps consumed by the learner
    episodes: int
    recent_returns: tuple[float, ...]  # oldest first, at most `window`
    # The extensions' batch transforms' states by `checkpoint_key` (reward scaling's
    # `return_moments`: the discounted returns' count, mean and variance).
    extension_states: Mapping[str, tuple[float, ...]] = types.MappingProxyType({})


def restore_newest_readable(
    checkpoint: tf.train.Checkpoint, directory: str | os.PathLike, *, partial: bool = False
) -> str:
    """Restores the newest checkpoint in `directory` that reads back whole; returns its path.

    `partial`: `checkpoint` holds only part of what was saved (e.g. an agent's weights
    without the optimizer's slots); what it holds must still match.

    Checkpoints listed in the directory's index are tried newest first; one that
    fails to read (a missing, truncated or corrupt file) is skipped with a warning.
    A checkpoint that reads but does not match the objects (another architecture)
    raises AssertionError: falling back would hide a real mismatch.

    Raises:
      FileNotFoundError: no checkpoint in `directory`, or none readable.
    """
    directory = os.fspath(directory)
    state = tf.train.get_checkpoint_state(directory)
    paths = list(state.all_model_checkpoint_paths) if state is not None else []
    if state is not None and state.model_checkpoint_path not in paths:
        paths.append(state.model_checkpoint_path)
    if not paths:
        raise FileNotFoundError(f"no checkpoint in {directory!r}")
    failures = []
    for path in reversed(paths):
        try:
            status = checkpoint.restore(path)
        except Exception as err:  # noqa: BLE001 - see below
            # Damaged files fail in many ways: tf.errors.DataLossError/NotFoundError
            # from the reader, IndexError or a protobuf DecodeError from a mangled
            # object graph. Every variable is assigned again by the next restore
            # that succeeds, so a partial read leaves nothing behind.
            first_line = (str(err).splitlines() or [""])[0]
            _log.warning(
                "checkpoint %s is unreadable (%s: %s); trying an older one",
                path,
                type(err).__name__,
                first_line,
            )
            failures.append(f"{os.path.basename(path)}: {type(err).__name__}")
            continue
        # Outside the try: a checkpoint that reads but does not match is a real error.
        status.assert_existing_objects_matched()
        if partial:
            status.expect_partial()  # no warnings about the saved values left unread
        return path
    raise FileNotFoundError(f"no readable checkpoint in {directory!r} ({'; '.join(failures)})")


def _run_checkpoint(*, learner: tf.train.Checkpoint, frames: tf.Variable, **more) -> Any:
    """The layout of a run's checkpoint, written by `RunCheckpoint` and read in part by
    `restore_agent`: the learner's state under `learner`, the counters beside it."""
    return tf.train.Checkpoint(learner=learner, frames=frames, **more)


def restore_agent(agent, directory: str | os.PathLike) -> tuple[str, int]:
    """Restores a built `agent`'s weights from the newest readable run checkpoint in
    `directory` (as `impala-rep evaluate` does): only the agent and the frames trained, not the
    optimizer's slots. Returns the checkpoint's path and the frames (agent steps) trained."""
    frames = tf.Variable(0, dtype=tf.int64)
    layout = _run_checkpoint(learner=tf.train.Checkpoint(**agent_trackables(agent)), frames=frames)
    path = restore_newest_readable(layout, directory, partial=True)
    return path, int(frames.numpy())


class RunCheckpoint:
    """Saves and restores a `Learner`'s state with the run's counters.

    Args:
      learner: a `Learner`; its `checkpoint` (weights, optimizer, step) is embedded.
      directory: where checkpoints go (normally `LOGDIR/checkpoints`).
      window: how many recent episode returns are kept.
      max_to_keep: checkpoints kept on disk; older ones are deleted. More than one,
        so that an unreadable newest checkpoint still leaves one to fall back to.
      extension_states: `{checkpoint_key: state_size}` of the extensions' batch transforms
        (`impala_rep.extensions.BatchTransform`), each held under its key: reward scaling's
        `return_moments` (3). Only those given, so that checkpoints of runs without them keep
        their layout.
    """

    def __init__(
        self,
        *,
        learner,
        directory: str | os.PathLike,
        window: int = 100,
        max_to_keep: int = 3,
        extension_states: Mapping[str, int] = types.MappingProxyType({}),
    ):
        if max_to_keep < 2:
            raise ValueError(f"max_to_keep must be >= 2 (one to fall back to), got {max_to_keep}")
        self._window = window
        self._frames = tf.Variable(0, dtype=tf.int64, trainable=False)
        self._episodes = tf.Variable(0, dtype=tf.int64, trainable=False)
        self._returns = tf.Variable(np.zeros(window), dtype=tf.float64, trainable=False)
        self._num_returns = tf.Variable(0, dtype=tf.int64, trainable=False)
        self._states = {
            key: tf.Variable(np.zeros(size), dtype=tf.float64, trainable=False)
            for key, size in extension_states.items()
        }
        self._checkpoint = _run_checkpoint(
            learner=learner.checkpoint,
            frames=self._frames,
            episodes=self._episodes,
            recent_returns=self._returns,
            num_recent=self._num_returns,
            **self._states,
        )
        self.directory = os.fspath(directory)
        self._manager = tf.train.CheckpointManager(
            self._checkpoint, self.directory, max_to_keep=max_to_keep
        )
        self._learner = learner

    def save(self, counters: RunCounters) -> str:
        """Writes a checkpoint numbered by the learner step; returns its path."""
        recent = np.asarray(counters.recent_returns[-self._window :], dtype=np.float64)
        padded = np.zeros(self._window)
        padded[: len(recent)] = recent
        self._frames.assign(counters.frames)
        self._episodes.assign(counters.episodes)
        self._returns.assign(padded)
        self._num_returns.assign(len(recent))
        for key, variable in self._states.items():
            if key in counters.extension_states:
                variable.assign(np.asarray(counters.extension_states[key], np.float64))
        return self._manager.save(checkpoint_number=self._learner.num_steps)

    def restore(self) -> tuple[str, RunCounters]:
        """Restores the newest readable checkpoint; returns its path and the counters.

        Raises:
          FileNotFoundError: there is no readable checkpoint.
        """
        path = restore_newest_readable(self._checkpoint, self.directory)
        count = int(self._num_returns.numpy())
        return path, RunCounters(
            frames=int(self._frames.numpy()),
            episodes=int(self._episodes.numpy()),
            recent_returns=tuple(self._returns.numpy()[:count].tolist()),
            extension_states={
                key: tuple(float(v) for v in variable.numpy())
                for key, variable in self._states.items()
            },
        )

    @property
    def checkpoints(self) -> Sequence[str]:
        """Paths of the checkpoints on disk, oldest first."""
        return list(self._manager.checkpoints)
