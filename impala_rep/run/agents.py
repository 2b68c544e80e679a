"""The run's agent: which factory builds it, and what the config wraps around it and its loss.

A run's agent comes from the user (an agent given to `train()`, or `--agent`'s factory) or is
the configured built-in one (`default_agent_factory`, its inputs scaled to the observation
space's bounds when `scale_observations`); `with_extensions` then wraps it and the loss in what
the config turns on (PopArt, random network distillation) and any extensions given.
`prepare` (run/prepare.py) resolves a new run's agent this way once it has checked the user's
code; `agent_factory_for`, the agent a run trained (`impala-rep evaluate`). The factories are
picklable and TensorFlow-free until called: the driver imports no TensorFlow.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from impala_rep.config import AgentConfig, TrainConfig
from impala_rep.config.auto import resolve_auto_settings
from impala_rep.extensions import Extension
from impala_rep.observation_nest import shape_of
from impala_rep.observation_scaling import declared_bounds_normalization

__all__ = [
    "default_agent_factory",
    "builtin_agent_factory",
    "agent_factory_for",
    "with_extensions",
]


def default_agent_factory(
    agent: AgentConfig,
    observation_shape,
    num_actions: int,
    observation_normalization=None,
    action_distribution=None,
) -> Callable[[], Any]:
    """A picklable factory for the configured built-in agent (each process builds its own copy);
    the MLP standardises its inputs with `observation_normalization` ((mean, std) or None);
    it acts with `action_distribution` (None: a softmax over `num_actions`)."""
    from impala_rep.agent_factory import make_agent

    return make_agent(
        observation_shape=shape_of(observation_shape),
        num_actions=num_actions,
        network=agent.network,
        use_lstm=agent.use_lstm,
        hidden_sizes=tuple(agent.hidden_sizes),
        observation_normalization=observation_normalization,
        action_distribution=action_distribution,
        # None (auto) is resolved by `prepare`; unresolved, the agent's own default.
        initial_log_std=0.0 if agent.initial_log_std is None else agent.initial_log_std,
        separate_value_network=agent.separate_value_network,
        value_hidden_sizes=agent.value_hidden_sizes,
    )


def described_env(config: TrainConfig, *, users_agent: bool, saved: TrainConfig | None = None):
    """`(config, env_spec)`: `config` with the settings that shape the env's observations
    (`ENV_AUTO_KEYS`) made concrete (`saved`, `users_agent` as `resolve_auto_settings` takes
    them), and the env described with them."""
    from impala_rep.config.auto import ENV_AUTO_KEYS
    from impala_rep.envs.factory import describe_env

    config = resolve_auto_settings(
        config,
        None,
        continuous_actions=False,
        saved=saved,
        users_agent=users_agent,
        only=ENV_AUTO_KEYS,
    )
    env_spec = describe_env(
        config.env.id,
        observation_keys=config.env.observation_keys,
        observation_nests=config.env.observation_nests,
    )
    return config, env_spec


def agent_factory_for(
    config: TrainConfig, env_spec, *, agent: Callable[[], Any] | None = None
) -> Callable[[], Any]:
    """The run's agent builder: `agent` (given to `train()`) or the `--agent` factory (not
    both), else the configured built-in agent, with what `config` adds to any agent
    (`with_extensions`). `impala-rep evaluate` builds the agent a run trained from its
    config.json; auto settings left None (a hand-made config) are resolved here first."""
    from impala_rep.run.user_code import resolve_agent_and_loss

    config = resolve_auto_settings(
        config, env_spec.observation_shape, continuous_actions=env_spec.continuous_actions
    )

    factory, _ = resolve_agent_and_loss(
        agent_spec=config.agent.factory,
        loss_spec=None,
        agent=agent,
        loss=None,
        observation_shape=env_spec.observation_shape,
        num_actions=env_spec.num_actions,
        action_distribution=env_spec.action_distribution,
    )
    factory = factory if factory is not None else builtin_agent_factory(config, env_spec)
    return with_extensions(config, env_spec, agent_factory=factory, loss=None)[0]


def with_extensions(
    config: TrainConfig,
    env_spec,
    *,
    agent_factory: Callable[[], Any],
    loss: Callable[..., Any] | None,
    extensions: Sequence[Extension] = (),
) -> tuple[Callable[[], Any], Callable[..., Any] | None]:
    """The agent factory and loss with what the config adds to any agent and loss
    (`impala_rep.extensions.extensions_for`: PopArt, then random network distillation), then
    `extensions` (a user's own). `config` is one `resolve_auto_settings` made concrete, as
    `prepare` and a run's config.json give it. Picklable, and TensorFlow-free until built or
    called (the driver imports no TensorFlow)."""
    from impala_rep.extensions import extensions_for, wrap

    chosen = (*extensions_for(config.loss, env_spec), *extensions)
    return wrap(chosen, agent_factory=agent_factory, loss=loss)


def builtin_agent_factory(config: TrainConfig, env_spec) -> Callable[[], Any]:
    """The configured built-in agent for `env_spec`'s observations and actions (the agent of a
    run given none of the user's), without extensions."""
    return default_agent_factory(
        config.agent,
        env_spec.observation_shape,
        env_spec.num_actions,
        _observation_normalization(config, env_spec),
        env_spec.action_distribution,
    )


def _observation_normalization(config: TrainConfig, env_spec) -> Any:
    """The built-in MLP's input scaling: `declared_bounds_normalization` when
    `scale_observations`, else None; None too under running normalisation, which has already
    standardised what the MLP sees (bounds would shrink it again)."""
    if config.loss.normalize_observations or not config.agent.scale_observations:
        return None
    return declared_bounds_normalization(env_spec)
