"""Run configuration: frozen dataclasses validated on construction.

The command line builds a `TrainConfig` once; everything below the entry point
receives it (or the parts it needs) and never reads flags. Each check says what
is allowed, so a bad value fails before anything starts or is written.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from impala_rep.learner.device_spec import parse_devices

__all__ = ["TrainConfig"]


def _require(condition: bool, field: str, value: Any, allowed: str) -> None:
    if not condition:
        raise ValueError(f"bad {field} {value!r}: {allowed}")


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Everything a training run needs. Defaults are good CartPole settings."""

    env: str = "CartPole-v1"
    num_actors: int = 2
    envs_per_actor: int = 64          # many envs per policy call: one call costs ~0.5 ms whatever the batch
    unroll_length: int = 20           # T
    batch_size: int = 32              # B, in unrolls (env columns) per learner step
    learner_devices: str = "cpu"      # the Replicator's device spec
    total_frames: int = 1_000_000     # env frames to train on (learner-consumed)
    seed: int = 0
    logdir: str | None = None
    ray_address: str | None = None    # None: start an embedded local Ray on loopback
    # IMPALA hyperparameters (RMSProp and clipping as in the paper).
    learning_rate: float = 5e-3       # CartPole; the paper's Atari value is 6e-4
    entropy_cost: float = 0.01
    baseline_cost: float = 0.5
    discount: float = 0.99
    clip_rho_threshold: float = 1.0
    clip_pg_rho_threshold: float = 1.0
    rmsprop_decay: float = 0.99
    rmsprop_epsilon: float = 0.01
    max_grad_norm: float = 40.0
    reward_clipping: str = "abs_one"
    hidden_sizes: tuple[int, ...] = (64, 64)
    queue_capacity: int = 1           # unroll blocks queued before actors wait; a deeper queue only adds policy lag
    report_every_s: float = 2.0

    def __post_init__(self):
        for name in ("num_actors", "envs_per_actor", "unroll_length", "batch_size", "total_frames",
                     "queue_capacity"):
            value = getattr(self, name)
            _require(isinstance(value, int) and value >= 1, name, value, "must be a positive integer")
        _require(isinstance(self.env, str) and bool(self.env), "env", self.env, "must be a gymnasium id")
        parse_devices(self.learner_devices)  # raises naming the spec and what is allowed
        replicas = parse_devices(self.learner_devices).count
        if replicas:
            _require(self.batch_size % replicas == 0, "batch_size", self.batch_size,
                     f"must split evenly over the {replicas} learner replicas of "
                     f"{self.learner_devices!r}; use a multiple of {replicas}")
        for name in ("learning_rate", "rmsprop_epsilon", "max_grad_norm", "report_every_s"):
            value = getattr(self, name)
            _require(math.isfinite(value) and value > 0, name, value, "must be a positive number")
        for name in ("entropy_cost", "baseline_cost"):
            value = getattr(self, name)
            _require(math.isfinite(value) and value >= 0, name, value, "must be >= 0")
        _require(0.0 <= self.discount <= 1.0, "discount", self.discount, "must be in [0, 1]")
        _require(0.0 <= self.rmsprop_decay < 1.0, "rmsprop_decay", self.rmsprop_decay, "must be in [0, 1)")
        for name in ("clip_rho_threshold", "clip_pg_rho_threshold"):
            value = getattr(self, name)
            _require(value > 0, name, value, "must be > 0")
        _require(self.reward_clipping in ("abs_one", "none"), "reward_clipping", self.reward_clipping,
                 "must be 'abs_one' or 'none'")
        _require(len(self.hidden_sizes) >= 1 and all(h >= 1 for h in self.hidden_sizes),
                 "hidden_sizes", self.hidden_sizes, "must be one or more positive layer sizes")

    @property
    def frames_per_step(self) -> int:
        """Env frames the learner consumes per step: T * B."""
        return self.unroll_length * self.batch_size

    @property
    def total_learner_steps(self) -> int:
        """Learner steps in the run, over which the learning rate decays to 0."""
        return max(1, -(-self.total_frames // self.frames_per_step))

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
