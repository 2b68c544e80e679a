"""An actor's policy as one compiled TensorFlow call per step: any agent, recurrent ones too.

`actors/host_policy.py` is the numpy kind, with the same methods, for agents with a
`host_step` (recurrent ones carry their state in numpy there).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium
import numpy as np
import tensorflow as tf

from impala_rep.agent import Agent, AgentInputs
from impala_rep.distributions import or_categorical
from impala_rep.observation_nest import map_leaves, of_space

__all__ = ["CompiledPolicy"]


class CompiledPolicy:
    """Acts for `E` envs with a built `agent`'s `step`, traced once for fixed shapes.

    Keeps the agent's recurrent state between calls (reset per env where `first`).
    Samples from `distribution` (`impala_rep.distributions`; None: a categorical over the
    logits) with stateless draws seeded from a TF Generator (`seed`); `greedy` acts with
    the most probable action.
    """

    def __init__(
        self,
        *,
        agent: Agent,
        observation_space: gymnasium.Space,
        num_envs: int,
        seed: int,
        greedy: bool,
        distribution: Any = None,
    ):
        self._agent = agent
        self._distribution = or_categorical(
            distribution, tf.TensorSpec([None, agent.num_actions], tf.float32)
        )
        self._observation_space = observation_space
        self._num_envs = num_envs
        self._greedy = greedy
        self.initial_state = tf.nest.map_structure(
            tf.convert_to_tensor, agent.initial_state(num_envs)
        )
        self._state = self.initial_state
        self._rng = tf.random.Generator.from_seed(seed)
        # Traced once, here, for fixed shapes. Calling the concrete function skips
        # tf.function's per-call signature matching, a large share of a small network's
        # step (docs/notebook.md, "Where the CPU goes").
        self._policy = tf.function(self._policy_step).get_concrete_function(*self._signature())
        self._value = None  # traced at the first time-limit cut (some envs never cut one)

    def set_weights(self, weights: Sequence[np.ndarray]) -> None:
        self._agent.set_weights(weights)

    def state_at_start(self, first: np.ndarray) -> Any:
        """The state fed at an unroll's first step (numpy): reset where `first`."""
        return tf.nest.map_structure(
            np.asarray, _reset_where_first(tf.constant(first), self.initial_state, self._state)
        )

    def act(
        self,
        observation: np.ndarray,
        prev_action: np.ndarray,
        prev_reward: np.ndarray,
        first: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Actions `[E, *action_shape]` and the policy's parameters `[E, P]` float32; the
        recurrent state moves on."""
        action, logits, self._state = self._policy(
            observation, prev_action, prev_reward, first, self._state
        )
        return action.numpy(), logits.numpy()

    def values(
        self, observation: np.ndarray, prev_action: np.ndarray, prev_reward: np.ndarray
    ) -> np.ndarray:
        """The baseline `[E]` at `observation` from the current state, none of it a start."""
        if self._value is None:
            observation_spec, action_spec, reward_spec, _, state_spec = self._signature()
            self._value = tf.function(self._value_step).get_concrete_function(
                observation_spec, action_spec, reward_spec, state_spec
            )
        return self._value(observation, prev_action, prev_reward, self._state).numpy()

    def _value_step(self, observation, prev_action, prev_reward, state):
        inputs = AgentInputs(
            observation=observation,
            prev_action=prev_action,
            prev_reward=prev_reward,
            first=tf.zeros(tf.shape(prev_reward), tf.bool),
        )
        output, _ = self._agent.step(inputs, state)
        return tf.cast(output.baseline, tf.float32)

    def _policy_step(self, observation, prev_action, prev_reward, first, state):
        """Args: observation `[E, *obs]`, prev_action `[E, *action_shape]`, prev_reward
        `[E]` float32, first `[E]` bool, state the agent's nest of `[E, ...]`.
        Returns: actions `[E, *action_shape]` (sampled, or the mode if greedy), the
        policy's parameters `[E, P]` float32, and the agent's new state."""
        state = _reset_where_first(first, self.initial_state, state)
        inputs = AgentInputs(
            observation=observation, prev_action=prev_action, prev_reward=prev_reward, first=first
        )
        output, new_state = self._agent.step(inputs, state)
        logits = tf.cast(output.policy_logits, tf.float32)
        if self._greedy:
            return self._distribution.mode_tf(logits), logits, new_state
        # Stateless sampling seeded from the actor's generator: reproducible per seed.
        seed = self._rng.make_seeds(1)[:, 0]
        return self._distribution.sample_tf(logits, seed), logits, new_state

    def _signature(self) -> list:
        e = self._num_envs
        shape, dtype = of_space(self._observation_space)
        return [
            map_leaves(lambda s, d: tf.TensorSpec([e, *s], tf.as_dtype(d)), shape, dtype),
            tf.TensorSpec(
                [e, *self._distribution.action_shape],
                tf.as_dtype(self._distribution.action_dtype),
            ),
            tf.TensorSpec([e], tf.float32),
            tf.TensorSpec([e], tf.bool),
            tf.nest.map_structure(lambda x: tf.TensorSpec(x.shape, x.dtype), self.initial_state),
        ]


def _reset_where_first(first: tf.Tensor, initial_state: Any, state: Any) -> Any:
    """Per row: `initial_state` where `first` `[E]` is True, else `state` (nests of `[E, ...]`)."""

    def select(initial: tf.Tensor, current: tf.Tensor) -> tf.Tensor:
        mask = tf.reshape(first, [-1] + [1] * (current.shape.rank - 1))
        return tf.where(mask, initial, current)

    return tf.nest.map_structure(select, initial_state, state)
