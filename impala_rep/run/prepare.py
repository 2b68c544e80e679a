"""Preparing a run: every check that can be made before anything starts or is written.

`prepare` reads the environment's spaces, checks the logdir (or that the run
to resume can be continued), resolves the user's agent and loss, and returns a
`RunPlan` with everything a launcher needs. On a machine of its own (no
`--ray-address`) it also checks the learner's devices and that the unroll
buffers fit in memory (`run/resources.py`). It starts no process and writes
nothing; every failure is a `SetupError` with one line naming the value and
what is allowed.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from collections.abc import Callable, Sequence
from typing import Any

from impala_rep.config import AgentConfig, TrainConfig
from impala_rep.config.auto import AUTO_KL_COST, AUTO_RND_COST, resolve_auto_settings
from impala_rep.extensions import Extension
from impala_rep.observation_scaling import declared_bounds_normalization
from impala_rep.run.errors import SetupError

__all__ = [
    "RunPlan",
    "prepare",
    "check_logdir",
    "default_agent_factory",
    "agent_factory_for",
    "resolve_auto_settings",
    "with_extensions",
    "AUTO_RND_COST",
    "AUTO_KL_COST",
]


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """A checked run: its config and what was resolved from it."""

    config: TrainConfig
    observation_shape: tuple[int, ...]
    num_actions: int
    frame_skip: int  # env frames per agent step (4 on Atari); users see env frames
    agent_factory: Callable[[], Any]
    loss_fn: Callable[..., Any] | None  # None: the IMPALA loss
    resume: bool
    start_step: int = 0  # the learner step a resumed run continues from (0: a new run)


def default_agent_factory(
    agent: AgentConfig, observation_shape, num_actions: int, observation_normalization=None
) -> Callable[[], Any]:
    """A picklable factory for the configured built-in agent (each process builds its own copy);
    the MLP standardises its inputs with `observation_normalization` ((mean, std) or None)."""
    from impala_rep.agent_factory import make_agent

    return make_agent(
        observation_shape=tuple(observation_shape),
        num_actions=num_actions,
        network=agent.network,
        use_lstm=agent.use_lstm,
        hidden_sizes=tuple(agent.hidden_sizes),
        observation_normalization=observation_normalization,
    )


def agent_factory_for(
    config: TrainConfig, env_spec, *, agent: Callable[[], Any] | None = None
) -> Callable[[], Any]:
    """The run's agent builder: `agent` (given to `train()`) or the `--agent` factory (not
    both), else the configured built-in agent, with what `config` adds to any agent
    (`with_extensions`). `impala-rep evaluate` builds the agent a run trained from its
    config.json; auto settings left None (a hand-made config) are resolved here first."""
    from impala_rep.run.user_code import resolve_agent_and_loss

    config = resolve_auto_settings(config, env_spec.observation_shape)

    factory, _ = resolve_agent_and_loss(
        agent_spec=config.agent.factory,
        loss_spec=None,
        agent=agent,
        loss=None,
        observation_shape=env_spec.observation_shape,
        num_actions=env_spec.num_actions,
    )
    factory = factory if factory is not None else _builtin_agent_factory(config, env_spec)
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


def _builtin_agent_factory(config: TrainConfig, env_spec) -> Callable[[], Any]:
    return default_agent_factory(
        config.agent,
        env_spec.observation_shape,
        env_spec.num_actions,
        _observation_normalization(config, env_spec),
    )


def _observation_normalization(config: TrainConfig, env_spec) -> Any:
    """The built-in MLP's input scaling: `_declared_bounds_normalization` when
    `scale_observations`, else None."""
    return declared_bounds_normalization(env_spec) if config.agent.scale_observations else None


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


def prepare(
    config: TrainConfig,
    *,
    agent: Callable[[], Any] | None = None,
    loss: Callable[..., Any] | None = None,
    resume: bool = False,
) -> RunPlan:
    """Checks `config` (and the agent and loss objects, if given) against this machine.

    Raises:
      SetupError: one line naming the bad value and what is allowed.
    """
    from impala_rep.envs.factory import check_env_options, describe_env
    from impala_rep.run.code_check import check_user_code
    from impala_rep.run.resources import check_devices, check_memory
    from impala_rep.run.resume import check_resumable, checkpoint_step
    from impala_rep.run.user_code import resolve_agent_and_loss

    # This machine's devices and memory: only where the run's processes will run (the
    # embedded Ray or --launcher local); a cluster's nodes cannot be seen before connecting.
    on_this_machine = not config.run.ray_address
    try:
        if on_this_machine:
            check_devices(config)
        check_env_options(
            config.env.id,
            sticky_actions=config.env.sticky_actions,
            episodic_life=config.env.episodic_life,
            max_episode_steps=config.env.max_episode_steps,
        )
        env_spec = describe_env(config.env.id)
        saved = check_resumable(config) if resume else None
        config = resolve_auto_settings(
            config,
            env_spec.observation_shape,
            saved=saved,
            users_code=agent is not None or loss is not None,
        )
        if on_this_machine:
            check_memory(
                config, env_spec.observation_shape, env_spec.observation_dtype, env_spec.num_actions
            )
        start_step = 0
        if resume:
            start_step = checkpoint_step(config.run.logdir)
        else:
            check_logdir(config.run.logdir)
        agent_factory, loss = resolve_agent_and_loss(
            agent_spec=config.agent.factory,
            loss_spec=config.loss.function,
            agent=agent,
            loss=loss,
            observation_shape=env_spec.observation_shape,
            num_actions=env_spec.num_actions,
        )
        users_agent = agent_factory is not None
        if agent_factory is None:  # e.g. a network that does not fit the observation
            agent_factory = _builtin_agent_factory(config, env_spec)
        if users_agent or loss is not None:
            # The user's loss as the run will call it: under the extensions that ask something
            # of their base loss (PopArt: the V-trace targets' moments).
            from impala_rep.extensions import extensions_for, wrap

            checked_factory, checked_loss = (
                wrap(
                    [e for e in extensions_for(config.loss) if e.checks_base_loss],
                    agent_factory=agent_factory,
                    loss=loss,
                )
                if loss is not None
                else (agent_factory, loss)
            )
            check_user_code(
                agent_factory=checked_factory,
                loss_fn=checked_loss,
                agent_is_users=users_agent,
                agent_spec=config.agent.factory,
                loss_spec=config.loss.function,
                observation_shape=env_spec.observation_shape,
                observation_dtype=env_spec.observation_dtype,
                num_actions=env_spec.num_actions,
                config=config.loss,
            )
        agent_factory, loss = with_extensions(
            config, env_spec, agent_factory=agent_factory, loss=loss
        )
    except ValueError as err:
        raise SetupError(str(err)) from None
    return RunPlan(
        config=config,
        observation_shape=tuple(env_spec.observation_shape),
        num_actions=int(env_spec.num_actions),
        frame_skip=int(env_spec.frame_skip),
        agent_factory=agent_factory,
        loss_fn=loss,
        resume=resume,
        start_step=start_step,
    )
