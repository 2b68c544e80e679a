"""What `--resume LOGDIR` may continue: a run directory with a checkpoint, under a compatible config.

A resumed run keeps the saved config and applies only the settings given
again; some settings cannot change under a checkpoint (`LOCKED_FIELDS`: the
environment and the agent's architecture decide which variables exist and
what they mean). Everything else may: actor count, learner devices (the
checkpoint restores onto any replica count), total frames (the learning-rate
schedule then decays over the new total from the restored step), costs.
TensorFlow-free, so the CLI checks all of this before anything starts.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from typing import Any

from impala_rep.config import TrainConfig

__all__ = ["LOCKED_FIELDS", "load_run_config", "resumed_config", "check_resumable"]

LOCKED_FIELDS = ("env", "network", "use_lstm", "hidden_sizes", "agent")

# The file CheckpointManager keeps in LOGDIR/checkpoints, naming the newest checkpoint.
_CHECKPOINT_INDEX = pathlib.Path("checkpoints") / "checkpoint"


def load_run_config(logdir: str) -> TrainConfig:
    """The config saved in `logdir`; ValueError unless `logdir` is a run with a checkpoint."""
    path = pathlib.Path(logdir)
    if not path.is_dir():
        raise ValueError(f"cannot resume {logdir!r}: not a directory")
    config_file = path / "config.json"
    if not config_file.is_file():
        raise ValueError(f"cannot resume {logdir!r}: not a run directory (no config.json; "
                         "it must be the --logdir of an earlier `impala-rep train`)")
    if not (path / _CHECKPOINT_INDEX).is_file():
        raise ValueError(f"cannot resume {logdir!r}: it holds no checkpoint (the run stopped "
                         "before its first one); start a new run instead")
    try:
        saved = TrainConfig.from_json(json.loads(config_file.read_text()))
    except (ValueError, TypeError) as err:  # JSONDecodeError is a ValueError
        raise ValueError(f"cannot resume {logdir!r}: its config.json is not readable ({err})") from None
    return dataclasses.replace(saved, logdir=str(logdir))


def resumed_config(saved: TrainConfig, changes: dict[str, Any]) -> TrainConfig:
    """`saved` with `changes` applied; ValueError if a locked field would change."""
    for name in LOCKED_FIELDS:
        if name in changes and changes[name] != getattr(saved, name):
            raise ValueError(
                f"cannot resume with {name} {changes[name]!r}: the checkpoint was trained with "
                f"{name} {getattr(saved, name)!r}, and {', '.join(LOCKED_FIELDS)} cannot change "
                "on resume")
    return dataclasses.replace(saved, **changes)


def check_resumable(config: TrainConfig) -> None:
    """ValueError unless `config.logdir` is a run that `config` can continue."""
    if config.logdir is None:
        raise ValueError("resuming needs the run's logdir; got none")
    if config.learner_hosts > 1:
        # Restoring would need every host to load the same checkpoint, which only
        # host 0's node is sure to see; a one-host learner restores any of them.
        raise ValueError(f"cannot resume with learner_hosts {config.learner_hosts}: a multi-host "
                         "learner only starts fresh runs; resume with --learner-hosts 1")
    saved = load_run_config(config.logdir)
    resumed_config(saved, {name: getattr(config, name) for name in LOCKED_FIELDS})

