"""The actor: steps `E` environments with a copy of the policy and records unrolls.

Ray-free: `actors/ray_actor.py` wraps it in a process. It acts through a policy:
numpy (`actors/host_policy.py`) for an agent with a `host_step`,
else one compiled call per step (`actors/compiled_policy.py`, the only part that
imports TensorFlow). Shapes follow the
package convention (see `impala_rep`): `T` unroll length, `E` number of
environments of this actor (the unroll's batch), `A` number of actions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium
import numpy as np
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

from impala_rep.actors.host_policy import HostPolicy
from impala_rep.distributions import action_distribution, for_action_space
from impala_rep.observation_nest import map_leaves, of_space, rows, set_rows
from impala_rep.unroll import EpisodeStats, Unroll, UnrollSpec

__all__ = ["Actor"]

# Vector envs whose `reset(options={"reset_mask": mask})` resets only the masked
# sub-envs (read in gymnasium 1.4's sync_vector_env.py / async_vector_env.py).
# Others, e.g. CartPoleVectorEnv, silently reset all sub-envs instead.
_RESET_MASK_ENVS = (SyncVectorEnv, AsyncVectorEnv)


class Actor:
    """Runs the policy on a vector env and returns time-major `Unroll`s of length `T`.

    Consecutive unrolls overlap by one observation: the last observation obs[T]
    of one unroll is obs[0] of the next, as in scalable_agent. Between calls the
    actor keeps the current observation, previous action and reward, first
    flags, the agent's recurrent state and the running episode returns/lengths.

    The env must autoreset (gymnasium's `AutoresetMode.SAME_STEP`, as
    `impala_rep.envs.make_vector_env` builds), or use NEXT_STEP/DISABLED and
    support `options={"reset_mask": ...}` in `reset`: then the actor resets the
    finished sub-envs right after their last step, so the unroll has no
    reset-step transitions either way.
    """

    def __init__(
        self,
        *,
        env: gymnasium.vector.VectorEnv,
        agent: Any,
        unroll_length: int,
        seed: int,
        return_discount: float | None = None,
        greedy: bool = False,
    ):
        """Builds the agent's variables and its policy, and resets `env`.

        `agent`: an `Agent`, or a TensorFlow-free acting twin
        (`impala_rep.agent_factory.acting_agent`: `is_acting_twin`, `num_actions`,
        `weight_shapes`, `host_step`, no variables), which acts only once `set_weights`
        gave it weights.
        `env.reset()` is called without a seed: seed the env where it is made
        (`make_vector_env` does). `seed` seeds the action sampling. With
        `return_discount`, each env's running discounted return is kept and the
        unroll's `EpisodeStats.return_moments` carry its moments (for the
        learner's reward scaling). `greedy`: act with the most probable action
        instead of sampling (evaluation, `impala_rep.run.evaluation`; such unrolls
        are no behaviour policy's samples and are not for the learner).
        """
        if unroll_length < 1:
            raise ValueError(f"unroll_length must be >= 1, got {unroll_length}")
        # What the env's actions need, and what the agent acts with, must agree.
        needed = for_action_space(env.single_action_space)  # ValueError for other spaces
        distribution = action_distribution(agent)
        if distribution != needed:
            raise ValueError(
                f"the agent acts with {distribution!r} ({agent.num_actions} policy outputs); "
                f"the env's action space {env.single_action_space} needs {needed!r}"
            )
        self._env = env
        self._distribution = distribution
        self._unroll_length = unroll_length
        self._num_envs = env.num_envs
        self._reset_finished_envs = _needs_reset_mask(env)
        self._observation_space = env.single_observation_space
        observation_shape, observation_dtype = of_space(self._observation_space)
        self._unroll_spec = UnrollSpec.for_distribution(
            distribution,
            unroll_length=unroll_length,
            observation_shape=observation_shape,
            observation_dtype=observation_dtype,
        )
        self._policy = _policy_for(
            agent,
            observation_space=self._observation_space,
            num_envs=self._num_envs,
            seed=seed,
            greedy=bool(greedy),
            distribution=distribution,
        )

        self._version = 0
        observation, _ = env.reset()
        self._observation = map_leaves(np.asarray, observation)
        self._prev_action = np.zeros(
            [self._num_envs, *distribution.action_shape], distribution.action_dtype
        )
        self._prev_reward = np.zeros([self._num_envs], np.float32)
        self._first = np.ones([self._num_envs], bool)
        self._episode_return = np.zeros([self._num_envs], np.float64)
        self._episode_length = np.zeros([self._num_envs], np.int64)
        self._return_discount = return_discount
        self._discounted_return = np.zeros([self._num_envs], np.float64)

    @property
    def policy_version(self) -> int:
        """The version passed to the last `set_weights` (0 before any)."""
        return self._version

    def set_weights(self, weights: Sequence[np.ndarray], version: int) -> None:
        """Loads the learner's weights; later unrolls carry `version` in `policy_version`.

        An agent with a `host_step` is acted with through the weights given here (or, an
        `Agent`, its own at construction; a twin has none): changes made to its variables
        directly are not seen."""
        self._policy.set_weights(weights)
        self._version = int(version)

    def unroll(self) -> tuple[Unroll, EpisodeStats]:
        """Steps every env `T` times; returns the `Unroll` (batch `E`) and finished episodes.

        The stats hold the raw return and length of every episode that ended
        during this unroll, ordered by time step, then env index.
        """
        # Preallocated `[T+1, E, ...]`, `[T, E, ...]` and `[E]` arrays, as the schema
        # (`impala_rep.unroll.FIELDS`) lays them out; initial_state None until known.
        u = self._unroll_spec.empty(self._num_envs)
        # The state the agent is fed at obs[0]: reset where obs[0] starts an episode.
        initial_state = self._policy.state_at_start(self._first)
        finished = []
        discounted_returns = []
        for t in range(self._unroll_length):
            self._record_agent_inputs(u, t)
            u.actions[t], u.behaviour_logits[t] = self._act(
                rows(u.observations, t), u.prev_actions[t], u.prev_rewards[t], u.first[t]
            )
            step = self._env_step(u.actions[t])
            self._observation, reward, u.terminated[t], u.truncated[t], final = step
            u.rewards[t] = reward
            u.truncation_values[t] = self._truncation_values(
                final, u.truncated[t] & ~u.terminated[t], u.actions[t], u.rewards[t]
            )
            done = u.terminated[t] | u.truncated[t]
            finished.extend(self._count_episodes(reward, done))
            if self._return_discount is not None:
                # As SB3's VecNormalize: G = r + discount * G, recorded, then reset at ends.
                self._discounted_return = self._return_discount * self._discounted_return + reward
                discounted_returns.append(self._discounted_return.copy())
                self._discounted_return[done] = 0.0
            ended = done.reshape(-1, *[1] * len(self._distribution.action_shape))
            self._prev_action = np.where(ended, 0, u.actions[t]).astype(u.actions.dtype)
            self._prev_reward = np.where(done, 0.0, u.rewards[t]).astype(np.float32)
            self._first = done
        self._record_agent_inputs(u, self._unroll_length)

        u.policy_version[:] = self._version
        unroll = u._replace(initial_state=initial_state)
        returns, lengths = zip(*finished) if finished else ((), ())
        moments = None
        if discounted_returns:
            values = np.concatenate(discounted_returns)
            moments = (float(values.size), float(values.mean()), float(values.var()))
        stats = EpisodeStats(
            returns=np.array(returns, np.float64),
            lengths=np.array(lengths, np.int64),
            return_moments=moments,
        )
        return unroll, stats

    def _act(
        self,
        observation: np.ndarray,
        prev_action: np.ndarray,
        prev_reward: np.ndarray,
        first: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """One policy call for all `E` envs: actions `[E]` int32 and logits `[E, A]` float32;
        the recurrent state moves on."""
        return self._policy.act(observation, prev_action, prev_reward, first)

    def _record_agent_inputs(self, u: Unroll, t: int) -> None:
        """Writes the current observation, prev action/reward and first flags at `t`."""
        set_rows(u.observations, t, self._observation)
        u.prev_actions[t] = self._prev_action
        u.prev_rewards[t] = self._prev_reward
        u.first[t] = self._first

    def _count_episodes(self, reward: np.ndarray, done: np.ndarray) -> list[tuple[float, int]]:
        """Adds a step's `reward` `[E]`; returns (return, length) of episodes `done` `[E]` ends."""
        self._episode_return += reward
        self._episode_length += 1
        if not done.any():
            return []
        ended = list(zip(self._episode_return[done].tolist(), self._episode_length[done].tolist()))
        self._episode_return[done] = 0.0
        self._episode_length[done] = 0
        return ended

    def _env_step(self, actions: np.ndarray) -> tuple[np.ndarray, ...]:
        """Steps all envs with `actions` `[E]`.

        Returns the next observation `[E, *obs]` (the new episode's first
        observation for every env that finished), raw rewards `[E]` float64,
        terminated `[E]` and truncated `[E]` bool, and the final observations of
        the truncated envs (`{env index: observation}`).
        """
        observation, reward, terminated, truncated, info = self._env.step(
            self._distribution.to_env(actions).astype(self._env.action_space.dtype, copy=False)
        )
        reward = np.asarray(reward, np.float64)
        terminated = np.asarray(terminated, bool)
        truncated = np.asarray(truncated, bool)
        done = terminated | truncated
        cut = np.flatnonzero(truncated & ~terminated)
        if self._reset_finished_envs:
            # The step returned the finished episodes' last observations. NEXT_STEP would
            # spend the next step resetting these envs (action ignored, reward 0);
            # resetting them now keeps that out of the unroll.
            final = {i: map_leaves(np.array, rows(observation, i)) for i in cut}
            if done.any():
                observation, _ = self._env.reset(options={"reset_mask": done})
        else:  # SAME_STEP: gymnasium keeps them in the info
            final = {i: map_leaves(np.array, info["final_obs"][i]) for i in cut}
        # Copied: some vector envs (copy=False) overwrite the array they return.
        return map_leaves(np.array, observation), reward, terminated, truncated, final

    def _truncation_values(
        self, final: dict, cut: np.ndarray, actions: np.ndarray, rewards: np.ndarray
    ) -> np.ndarray:
        """`[E]`: the agent's value of each cut episode's final observation (0 elsewhere).

        Evaluated as the next policy call would have seen that observation: after
        `actions` and `rewards`, from the recurrent state the step left.
        """
        if not final:
            return np.zeros([self._num_envs], np.float32)
        # Rows of uncut envs: any valid input.
        observation = map_leaves(np.array, self._observation)
        for i, final_observation in final.items():
            set_rows(observation, i, final_observation)
        values = self._policy.values(observation, actions, rewards)
        return np.where(cut, values, 0.0).astype(np.float32)


def _policy_for(
    agent: Any,
    *,
    observation_space: gymnasium.Space,
    num_envs: int,
    seed: int,
    greedy: bool,
    distribution: Any,
) -> Any:
    """The numpy policy for an acting twin or an agent with a `host_step` (a recurrent one's
    takes and returns its state), else the compiled one (which imports TensorFlow)."""
    host_step = getattr(agent, "host_step", None)
    if getattr(agent, "is_acting_twin", False):  # no variables: weights come with set_weights
        initial_state = getattr(agent, "initial_state", None)
        return HostPolicy(
            host_step=host_step,
            weights=None,
            seed=seed,
            greedy=greedy,
            weight_shapes=agent.weight_shapes(of_space(observation_space)[0]),
            distribution=distribution,
            initial_state=() if initial_state is None else initial_state(num_envs),
        )
    agent.build(of_space(observation_space)[0])
    import tensorflow as tf  # an `Agent` is built: TensorFlow is loaded already

    if host_step is not None:
        weights = agent.get_weights()
        return HostPolicy(
            host_step=host_step,
            weights=weights,
            seed=seed,
            greedy=greedy,
            weight_shapes=[np.shape(w) for w in weights],
            distribution=distribution,
            initial_state=tf.nest.map_structure(np.asarray, agent.initial_state(num_envs)),
        )
    from impala_rep.actors.compiled_policy import CompiledPolicy

    return CompiledPolicy(
        agent=agent,
        observation_space=observation_space,
        num_envs=num_envs,
        seed=seed,
        greedy=greedy,
        distribution=distribution,
    )


def _needs_reset_mask(env: gymnasium.vector.VectorEnv) -> bool:
    """Whether the actor must reset finished envs itself; raises if it cannot."""
    # gymnasium's documented default for vector envs without the key is NEXT_STEP.
    mode = AutoresetMode(env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP))
    if mode == AutoresetMode.SAME_STEP:
        return False
    if isinstance(env.unwrapped, _RESET_MASK_ENVS):
        return True
    raise ValueError(
        f"{type(env.unwrapped).__name__} uses autoreset mode {mode} and its reset does not take "
        "options['reset_mask'], so the reset steps cannot be kept out of the unroll; use "
        "impala_rep.envs.make_vector_env or a SyncVectorEnv/AsyncVectorEnv"
    )
