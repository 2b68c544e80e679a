"""Builds an `Actor` from the run's config: its vector env and its copy of the agent.

Ray-free, so the Ray actor process (`actors/ray_actor.py`) and the local
launcher's actor threads (`impala_rep/run/launch_local.py`) build actors the
same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from impala_rep.config import ActorConfig, EnvConfig

__all__ = ["build_actor"]


def build_actor(
    *,
    env: EnvConfig,
    actors: ActorConfig,
    agent_factory: Callable[[], Any],
    seed: int,
    return_discount: float | None = None,
    env_registration: Any = None,
):
    """An `Actor` stepping `actors.envs_per_actor` copies of `env`, seeded with `seed`;
    `return_discount` as `Actor` takes it (`impala_rep.extensions.actor_return_discount`);
    `env_registration` registers a user's env id first (`impala_rep.run.user_code.load_env`).

    It acts with the agent's TensorFlow-free twin where it has one (`acting_agent`), so
    it has no weights until `set_weights`; else it builds the agent."""
    from impala_rep.actors.actor import Actor
    from impala_rep.agent_factory import acting_agent
    from impala_rep.envs.factory import make_vector_env, register_env

    register_env(env_registration)
    vector_env = make_vector_env(
        env.id,
        num_envs=actors.envs_per_actor,
        seed=seed,
        sticky_actions=env.sticky_actions,
        episodic_life=env.episodic_life,
        max_episode_steps=env.max_episode_steps,
        observation_keys=env.observation_keys,
        observation_nests=env.observation_nests,
    )
    agent = acting_agent(agent_factory) or agent_factory()
    return Actor(
        env=vector_env,
        agent=agent,
        unroll_length=actors.unroll_length,
        seed=seed,
        return_discount=return_discount,
    )
