"""An actor's policy in numpy: an agent's `host_step` with weights held as arrays.

TensorFlow-free: an actor acting with an `acting_agent` twin never imports it. For
a small network a compiled call's fixed cost is most of the step, and numpy does not pay
it (docs/notebook.md, "Where the CPU goes"). `actors/compiled_policy.py` is the other
kind, with the same methods.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from impala_rep.agent_io import AgentInputs, AgentOutput
from impala_rep.distributions import or_categorical

__all__ = ["HostPolicy"]


class HostPolicy:
    """Acts for `E` envs with `host_step(weights, inputs) -> AgentOutput` (feed-forward).

    Args:
      host_step: the agent's numpy step.
      weights: the weights to act with until `set_weights`; None: none yet (an acting
        twin has no variables: `act` refuses until the learner's weights arrive).
      weight_shapes: the layout every weight list must have (count and shapes).
      seed: seeds the numpy Generator that samples actions.
      greedy: act with the most probable action instead of sampling.
      distribution: the policy's distribution over actions (`impala_rep.distributions`);
        None: a categorical over the logits.
    """

    def __init__(
        self,
        *,
        host_step: Callable[..., AgentOutput],
        weights: Sequence[np.ndarray] | None,
        weight_shapes: Sequence[Sequence[int]],
        seed: int,
        greedy: bool,
        distribution: Any = None,
    ):
        self._host_step = host_step
        self._distribution = distribution
        self._shapes = [tuple(s) for s in weight_shapes]
        self._weights = None if weights is None else self._checked(weights)
        self._rng = np.random.default_rng(seed)
        self._greedy = greedy

    def set_weights(self, weights: Sequence[np.ndarray]) -> None:
        self._weights = self._checked(weights)

    def state_at_start(self, first: np.ndarray) -> tuple:
        """The recurrent state fed at an unroll's first step: none."""
        return ()

    def act(
        self,
        observation: np.ndarray,
        prev_action: np.ndarray,
        prev_reward: np.ndarray,
        first: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Actions `[E, *action_shape]` and the policy's parameters `[E, P]` float32."""
        params = np.asarray(
            self._step(AgentInputs(observation, prev_action, prev_reward, first)).policy_logits,
            np.float32,
        )
        distribution = or_categorical(self._distribution, params)
        if self._greedy:
            return distribution.mode(params), params
        return distribution.sample(params, self._rng), params

    def values(
        self, observation: np.ndarray, prev_action: np.ndarray, prev_reward: np.ndarray
    ) -> np.ndarray:
        """The baseline `[E]` at `observation`, none of it an episode's start."""
        first = np.zeros([len(prev_reward)], bool)
        return np.asarray(
            self._step(AgentInputs(observation, prev_action, prev_reward, first)).baseline,
            np.float32,
        )

    def _step(self, inputs: AgentInputs) -> AgentOutput:
        if self._weights is None:
            raise RuntimeError(
                "the actor has no weights to act with yet: call set_weights "
                "(an acting twin has no variables of its own)"
            )
        return self._host_step(self._weights, inputs)

    def _checked(self, weights: Sequence[np.ndarray]) -> list[np.ndarray]:
        """`weights` as arrays, checked against the layout (count and shapes)."""
        weights = [np.asarray(w) for w in weights]
        if len(weights) != len(self._shapes):
            raise ValueError(f"expected {len(self._shapes)} weight arrays, got {len(weights)}")
        for got, want in zip(weights, self._shapes):
            if got.shape != want:
                raise ValueError(f"weight of shape {got.shape} where the agent has {want}")
        return weights
