"""What a run leaves in its logdir: config.json, metrics.jsonl, events.jsonl and TensorBoard
events; and whether a directory can become a new run's logdir (`check_logdir`)."""

from __future__ import annotations

import json
import math
import os
import pathlib
import socket
import time
from typing import Any

__all__ = ["RunLog", "check_logdir", "write_json_atomically", "read_metrics"]


def check_logdir(logdir: str | None) -> None:
    """Raises ValueError unless `logdir` can become this run's directory; writes nothing."""
    if logdir is None:
        return
    path = pathlib.Path(logdir)
    if path.exists():
        if not path.is_dir():
            raise ValueError(f"logdir {logdir!r} exists and is not a directory")
        if any(path.iterdir()):
            raise ValueError(f"logdir {logdir!r} is not empty; choose a new directory")
        if not os.access(path, os.W_OK):
            raise ValueError(f"logdir {logdir!r} is not writable")
        return
    ancestor = path.absolute().parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir() or not os.access(ancestor, os.W_OK):
        raise ValueError(
            f"logdir {logdir!r} cannot be created: {ancestor} is not a writable directory"
        )


def write_json_atomically(path: pathlib.Path, data: Any) -> None:
    """Writes via a temporary file and rename, so a crash never leaves half a file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def _finite_or_none(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class RunLog:
    """Appends one JSON object per report to metrics.jsonl and mirrors scalars to TensorBoard."""

    def __init__(self, logdir: str | os.PathLike, *, resumed_frames: int | None = None):
        """`resumed_frames`: the frames of the checkpoint a resumed run restored. Records past
        it (trained after that checkpoint, then lost with the process) are dropped, so that
        frames and episodes in metrics.jsonl never go backwards; `dropped` says how many."""
        from tensorboard.compat.proto import event_pb2
        from tensorboard.summary.writer.record_writer import RecordWriter

        self.logdir = pathlib.Path(logdir)
        self.dropped = 0
        if resumed_frames is not None:
            self.dropped = _drop_records_past(self.logdir / "metrics.jsonl", resumed_frames)
        # Appending: a resumed run continues the same files.
        self._jsonl = open(self.logdir / "metrics.jsonl", "a", buffering=1)
        self._events = None  # events.jsonl, opened at the first event
        # TensorBoard's own record writer and protos on a local file, not tf.summary (nor
        # TensorBoard's EventFileWriter, which imports TensorFlow for its file system): the
        # driver then imports no TensorFlow, seconds of its start-up. A new file per
        # process, as TensorBoard names them ("tfevents" is what it looks for).
        directory = self.logdir / "tensorboard"
        directory.mkdir(exist_ok=True)
        name = f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}"
        self._writer = RecordWriter(open(directory / name, "wb"))
        self._writer.write(
            event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2").SerializeToString()
        )

    def write(self, record: dict[str, Any]) -> None:
        """One metrics.jsonl line; every number but `frames` as a TensorBoard scalar at step
        `frames`, but an evaluation's (`eval_*`) at step `eval_frames`, the frames its weights
        had trained on."""
        self._jsonl.write(json.dumps({k: _finite_or_none(v) for k, v in record.items()}) + "\n")
        numbers = {k: v for k, v in record.items() if isinstance(v, (int, float))}
        evaluation = {k: v for k, v in numbers.items() if k.startswith("eval_")}
        self._scalars(record["frames"], {k: v for k, v in numbers.items() if k not in evaluation})
        if "eval_frames" in evaluation:
            self._scalars(evaluation.pop("eval_frames"), evaluation)
        self._writer.flush()  # a report every few seconds: TensorBoard shows a run as it goes

    def _scalars(self, step: int, values: dict[str, float]) -> None:
        from tensorboard.compat.proto import event_pb2, summary_pb2

        values.pop("frames", None)
        summary = summary_pb2.Summary(
            value=[
                summary_pb2.Summary.Value(tag=key, simple_value=float(value))
                for key, value in values.items()
            ]
        )
        self._writer.write(
            event_pb2.Event(
                wall_time=time.time(), step=int(step), summary=summary
            ).SerializeToString()
        )

    def event(self, record: dict[str, Any]) -> None:
        """Appends one event (an actor restart, ...) to events.jsonl."""
        if self._events is None:
            self._events = open(self.logdir / "events.jsonl", "a", buffering=1)
        self._events.write(json.dumps(record) + "\n")

    def close(self) -> None:
        self._jsonl.close()
        if self._events is not None:
            self._events.close()
        self._writer.close()


def _drop_records_past(path: pathlib.Path, frames: int) -> int:
    """Rewrites `path` (atomically) without the records whose frames exceed `frames`."""
    if not path.is_file():
        return 0
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    kept = [line for line in lines if json.loads(line)["frames"] <= frames]
    if len(kept) < len(lines):
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("".join(line + "\n" for line in kept))
        os.replace(tmp, path)
    return len(lines) - len(kept)


def read_metrics(logdir: str | os.PathLike) -> list[dict[str, Any]]:
    path = pathlib.Path(logdir) / "metrics.jsonl"
    if not path.is_file():
        raise ValueError(f"{logdir} is not a run directory: no metrics.jsonl in it")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
