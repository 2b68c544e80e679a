"""Which checkpoint of a run is the newest, read from its index without TensorFlow.

`tf.train.CheckpointManager` keeps `LOGDIR/checkpoints/checkpoint`, a text-format
`CheckpointState` proto whose `model_checkpoint_path` names the newest checkpoint;
`RunCheckpoint` numbers them by learner step (`ckpt-<step>`). The driver reads it
(where a stopped or failed run can be resumed from; the step a resumed run starts
at) in a process that imports no TensorFlow under Ray: importing it there would add
seconds of CPU and its start-up notes to the end of every run.
"""

from __future__ import annotations

import os
import pathlib
import re

__all__ = ["CHECKPOINT_SUBDIR", "newest_checkpoint"]

CHECKPOINT_SUBDIR = "checkpoints"
_INDEX = "checkpoint"
_NEWEST = re.compile(r'^model_checkpoint_path:\s*"((?:[^"\\]|\\.)*)"', re.MULTILINE)


def newest_checkpoint(directory: str | os.PathLike) -> tuple[str, int] | None:
    """(path, learner step) of the checkpoint `directory`'s index names as the newest, or
    None (no readable index, or one that names no `ckpt-<step>`). A relative path is taken
    relative to `directory`, as `tf.train.get_checkpoint_state` does.

    Read from disk rather than from the learner's last report, so that a checkpoint
    written just before the learner died is still found.
    """
    try:
        text = (pathlib.Path(directory) / _INDEX).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):  # none, or not one TensorFlow wrote
        return None
    match = _NEWEST.search(text)
    if match is None or not match.group(1):
        return None
    # The text format writes bytes outside printable ASCII as C escapes (\303\251 for é).
    path = (
        match.group(1)
        .encode("latin-1", "backslashreplace")
        .decode("unicode_escape")
        .encode("latin-1")
        .decode("utf-8")
    )
    if not os.path.isabs(path):
        path = os.path.join(os.fspath(directory), path)
    step = os.path.basename(path).rsplit("-", 1)[-1]
    return (path, int(step)) if step.isdigit() else None  # not a RunCheckpoint's ckpt-<step>
