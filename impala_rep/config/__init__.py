"""The run configuration: what a run is made of, checked without TensorFlow, gymnasium or Ray.

Modules, by responsibility and in dependency order (each imports only those before it, and
`impala_rep.devices`):

- `validation`: the checks a value goes through (`is_int`, `is_seed`, `require`, ...) and how
  a config group declares a field (`field`, `ConfigField`);
- `code_specs`: the syntax of a user-code spec (`--agent`, `--loss`);
- `legacy`: reading a config.json of any earlier layout;
- `schema`: the frozen dataclasses (`TrainConfig` and its groups), their fields and flat keys;
- `auto`: the one resolver of settings left to `auto` (`AUTO_RULES`, `resolve_auto_settings`);
- `presets`: the named settings of `--preset`.

This package re-exports the configuration's classes and field helpers from `schema`.
"""

from impala_rep.config.schema import (
    LAUNCHERS,
    NETWORKS,
    OPTIMIZERS,
    REWARD_CLIPPING,
    ActorConfig,
    AgentConfig,
    EnvConfig,
    LearnerConfig,
    LossConfig,
    OptimizerConfig,
    RunConfig,
    TrainConfig,
    config_fields,
    field_for,
)
from impala_rep.config.validation import ConfigField

__all__ = [
    "TrainConfig",
    "EnvConfig",
    "AgentConfig",
    "ActorConfig",
    "LearnerConfig",
    "LossConfig",
    "OptimizerConfig",
    "RunConfig",
    "NETWORKS",
    "REWARD_CLIPPING",
    "LAUNCHERS",
    "OPTIMIZERS",
    "ConfigField",
    "config_fields",
    "field_for",
]
