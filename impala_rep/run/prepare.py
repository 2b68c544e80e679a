"""Preparing a run: every check that can be made before anything starts or is written.

`prepare` reads the environment's spaces, checks the logdir (`run/run_log.py`; or that the
run to resume can be continued, `run/resume.py`), resolves the auto settings, the user's
agent and loss (`run/user_code.py`, `run/code_check.py`) and the agent the run builds
(`run/agents.py`), and returns a `RunPlan` with everything a launcher needs. On a machine of
its own (no `--ray-address`) it also checks the learner's devices and that the unroll
buffers fit in memory (`run/resources.py`). It starts no process and writes nothing; every
failure is a `SetupError` with one line naming the value and what is allowed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from impala_rep.config import TrainConfig
from impala_rep.config.auto import resolve_auto_settings
from impala_rep.observation_nest import Shape
from impala_rep.run.agents import builtin_agent_factory, described_env, with_extensions
from impala_rep.run.errors import SetupError
from impala_rep.run.run_log import check_logdir

__all__ = ["RunPlan", "prepare"]


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """A checked run: its config and what was resolved from it."""

    config: TrainConfig
    observation_shape: Shape
    num_actions: int
    frame_skip: int  # env frames per agent step (4 on Atari); users see env frames
    agent_factory: Callable[[], Any]
    loss_fn: Callable[..., Any] | None  # None: the IMPALA loss
    resume: bool
    start_step: int = 0  # the learner step a resumed run continues from (0: a new run)
    # A user's env (`--env module:EnvId` or `file.py:EnvId`): its gymnasium registration, for
    # the processes that build the env (`impala_rep.run.user_code.load_env`); else None.
    env_registration: Any = None


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
    from impala_rep.envs.factory import check_env_options
    from impala_rep.run.code_check import check_user_code
    from impala_rep.run.resources import check_devices, check_memory
    from impala_rep.run.resume import check_resumable, checkpoint_step
    from impala_rep.run.user_code import absolute_code_spec, load_env, resolve_agent_and_loss

    # This machine's devices and memory: only where the run's processes will run (the
    # embedded Ray or --launcher local); a cluster's nodes cannot be seen before connecting.
    on_this_machine = not config.run.ray_address
    try:
        if on_this_machine:
            check_devices(config)
        env_id, env_registration = load_env(config.env.id)
        check_env_options(
            config.env.id,
            sticky_actions=config.env.sticky_actions,
            episodic_life=config.env.episodic_life,
            max_episode_steps=config.env.max_episode_steps,
        )
        saved = check_resumable(config) if resume else None
        config, env_spec = described_env(config, users_agent=agent is not None, saved=saved)
        config = resolve_auto_settings(
            config,
            env_spec.observation_shape,
            continuous_actions=env_spec.continuous_actions,
            saved=saved,
            users_agent=agent is not None,
            users_loss=loss is not None,
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
            action_distribution=env_spec.action_distribution,
        )
        # The user's files recorded with absolute paths: `evaluate` and `--resume` find them
        # from any directory.
        config = config.replace(
            {
                "env": env_id,
                "agent": absolute_code_spec(config.agent.factory),
                "loss": absolute_code_spec(config.loss.function),
            }
        )
        users_agent = agent_factory is not None
        if agent_factory is None:  # e.g. a network that does not fit the observation
            agent_factory = builtin_agent_factory(config, env_spec)
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
                action_distribution=env_spec.action_distribution,
            )
        agent_factory, loss = with_extensions(
            config, env_spec, agent_factory=agent_factory, loss=loss
        )
    except ValueError as err:
        raise SetupError(str(err)) from None
    return RunPlan(
        config=config,
        observation_shape=env_spec.observation_shape,
        num_actions=int(env_spec.num_actions),
        frame_skip=int(env_spec.frame_skip),
        agent_factory=agent_factory,
        loss_fn=loss,
        resume=resume,
        start_step=start_step,
        env_registration=env_registration,
    )
