"""What `--resume LOGDIR` may continue: a run directory with a checkpoint, under a compatible
config.

A resumed run keeps the saved config and applies only the settings given
again, as {key: value} (the keys of `impala_rep.config`); some settings cannot
change under a checkpoint (`LOCKED_KEYS`: the environment and the whole
`agent` group decide which variables exist and what they mean, the optimizer
which slot variables the checkpoint holds). Everything
else may: actor count, learner devices and hosts (the checkpoint restores onto
any replica count), total frames (the learning-rate schedule then decays over
the new total from the restored step), costs (RND's weight too, but not RND on or off:
its networks are in the checkpoint only when it is on). TensorFlow-free, so the CLI
checks all of this before anything starts.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Mapping
from typing import Any

from impala_rep.config import TrainConfig, config_fields
from impala_rep.config.auto import AUTO_RULES

__all__ = ["LOCKED_KEYS", "RESUME_RULES", "load_run_config", "resumed_config", "check_resumable"]

# The env id and the observation keys kept (the agent's input), every field of the agent
# group (a field added there is locked too), and reward scaling: its running moments are
# part of the checkpoint only when it is on, and the values the agent learned are in its
# units; observation normalisation and PopArt, whose statistics (and PopArt's head) are in the
# checkpoint only when they are on; the optimizer, whose slots the checkpoint holds.
LOCKED_KEYS = (
    ("env", "observation_keys", "observation_nests")
    + tuple(field.key for field in config_fields() if field.group == "agent")
    + ("normalize_rewards", "normalize_observations", "popart", "optimizer")
)

# What `--resume` does with each setting it does not simply take as given: the reference's
# "on resume" column and `--resume`'s help.
RESUME_RULES = {
    **{key: "locked" for key in LOCKED_KEYS},
    "rnd_cost": "on or off is locked; the weight may change",
    "learner_xla": "auto is decided again when the learner's devices or hosts change",
    "learner_process": "auto is decided again for the resumed command",
}

# The file CheckpointManager keeps in LOGDIR/checkpoints, naming the newest checkpoint.
_CHECKPOINT_INDEX = pathlib.Path("checkpoints") / "checkpoint"


def load_run_config(logdir: str, *, purpose: str = "resume") -> TrainConfig:
    """The config saved in `logdir` (nested, or the flat config.json of earlier versions),
    its logdir set to `logdir`; ValueError unless `logdir` is a run with a checkpoint.
    `purpose` ("resume", "evaluate") words the errors: "cannot PURPOSE LOGDIR: ..."."""
    path = pathlib.Path(logdir)
    if not path.is_dir():
        raise ValueError(f"cannot {purpose} {logdir!r}: not a directory")
    config_file = path / "config.json"
    if not config_file.is_file():
        raise ValueError(
            f"cannot {purpose} {logdir!r}: not a run directory (no config.json; "
            "it must be the --logdir of an earlier `impala-rep train`)"
        )
    if not (path / _CHECKPOINT_INDEX).is_file():
        advice = "; start a new run instead" if purpose == "resume" else ""
        raise ValueError(
            f"cannot {purpose} {logdir!r}: it holds no checkpoint (the run stopped "
            f"before its first one){advice}"
        )
    try:
        data = json.loads(config_file.read_text())
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object, got {type(data).__name__}")
        saved = TrainConfig.from_json(data)
    except (ValueError, TypeError) as err:  # JSONDecodeError is a ValueError
        raise ValueError(
            f"cannot {purpose} {logdir!r}: its config.json is not readable ({err})"
        ) from None
    return saved.replace({"logdir": str(logdir)})


def checkpoint_step(logdir: str) -> int:
    """The learner step of the checkpoint `logdir`'s index names as the newest; 0 if none.

    The learner restores the newest *readable* one, which is this one unless its files are
    damaged; the driver needs the step before the learner has built, to seed the actors
    it starts meanwhile (`run/supervisor.py`, `actor_seed`), and any step the run has not
    started from before keeps their episodes new.
    """
    from impala_rep.learner.checkpoint_index import CHECKPOINT_SUBDIR, newest_checkpoint

    newest = newest_checkpoint(pathlib.Path(logdir) / CHECKPOINT_SUBDIR)
    return 0 if newest is None else newest[1]


def resumed_config(saved: TrainConfig, changes: Mapping[str, Any]) -> TrainConfig:
    """`saved` with `changes` ({key: value}) applied; ValueError if a locked key would change,
    or random network distillation would be turned on or off."""
    # A setting left to auto (None) that a resume keeps is the run's own: its checkpoint
    # holds what the run trained with (RND's networks, observation statistics...).
    auto = {rule.key for rule in AUTO_RULES if rule.kept_on_resume}
    changes = {k: v for k, v in changes.items() if not (k in auto and v is None)}
    for key in LOCKED_KEYS:
        if key in changes and changes[key] != saved.get(key):
            raise ValueError(
                f"cannot resume with {key} {changes[key]!r}: the checkpoint was trained with "
                f"{key} {saved.get(key)!r}, and {', '.join(LOCKED_KEYS)} cannot change on resume"
            )
    # RND's networks are in the checkpoint only when it is on; its weight may change.
    if "rnd_cost" in changes and bool(changes["rnd_cost"]) != bool(saved.get("rnd_cost")):
        raise ValueError(
            f"cannot resume with rnd_cost {changes['rnd_cost']!r}: the checkpoint was trained with "
            f"rnd_cost {saved.get('rnd_cost')!r}, and the novelty bonus cannot be turned on or off "
            "on resume (its weight may change)"
        )
    # XLA is a compile choice the checkpoint does not depend on, and it takes one device: a
    # resume onto other learner devices or hosts decides it again (auto) unless it is given.
    moved = any(
        key in changes and changes[key] != saved.get(key)
        for key in ("learner_devices", "learner_hosts")
    )
    if moved and "learner_xla" not in changes:
        changes = {**changes, "learner_xla": None}
    # Where the learner runs is the resumed command's layout, not the checkpoint's.
    return saved.replace({"learner_process": None, **changes})


def check_resumable(config: TrainConfig) -> TrainConfig:
    """The config of the run in `config.run.logdir`; ValueError unless `config` can continue it."""
    if config.run.logdir is None:
        raise ValueError("resuming needs the run's logdir; got none")
    saved = load_run_config(config.run.logdir)
    resumed_config(saved, {key: config.get(key) for key in (*LOCKED_KEYS, "rnd_cost")})
    return saved
