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
    """Acts for `E` envs with the agent's numpy step: `host_step(weights, inputs) ->
    AgentOutput` for a feed-forward agent, `host_step(weights, inputs, state) ->
    (AgentOutput, state)` for a recurrent one, whose state (a nest of `[E, ...]` arrays,
    reset by the step where `inputs.first`) it carries from step to step.

    Args:
      host_step: the agent's numpy step.
      initial_state: the recurrent agent's state for `E` fresh episodes (numpy); `()`:
        feed-forward.
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
        initial_state: Any = (),
    ):
        self._host_step = host_step
        self._initial = _numpy_nest(initial_state)
        self._recurrent = bool(_leaves(self._initial))
        self._state = self._initial
        self._distribution = distribution
        self._shapes = [tuple(s) for s in weight_shapes]
        self._weights = None if weights is None else self._checked(weights)
        self._rng = np.random.default_rng(seed)
        self._greedy = greedy

    def set_weights(self, weights: Sequence[np.ndarray]) -> None:
        self._weights = self._checked(weights)

    def state_at_start(self, first: np.ndarray) -> Any:
        """The recurrent state fed at an unroll's first step: reset where `first` (`()`
        for a feed-forward agent)."""
        if not self._recurrent:
            return ()
        first = np.asarray(first, bool)
        return _map(
            lambda zero, s: np.where(first.reshape(-1, *[1] * (s.ndim - 1)), zero, s),
            self._initial,
            self._state,
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
        output, state = self._step(AgentInputs(observation, prev_action, prev_reward, first))
        self._state = state
        params = np.asarray(output.policy_logits, np.float32)
        distribution = or_categorical(self._distribution, params)
        if self._greedy:
            return distribution.mode(params), params
        return distribution.sample(params, self._rng), params

    def values(
        self, observation: np.ndarray, prev_action: np.ndarray, prev_reward: np.ndarray
    ) -> np.ndarray:
        """The baseline `[E]` at `observation` from the current state, none of it an
        episode's start; the state does not move."""
        first = np.zeros([len(prev_reward)], bool)
        output, _ = self._step(AgentInputs(observation, prev_action, prev_reward, first))
        return np.asarray(output.baseline, np.float32)

    def _step(self, inputs: AgentInputs) -> tuple[AgentOutput, Any]:
        """The agent's outputs at `inputs` and the state after them."""
        if self._weights is None:
            raise RuntimeError(
                "the actor has no weights to act with yet: call set_weights "
                "(an acting twin has no variables of its own)"
            )
        if self._recurrent:
            return self._host_step(self._weights, inputs, self._state)
        return self._host_step(self._weights, inputs), ()

    def _checked(self, weights: Sequence[np.ndarray]) -> list[np.ndarray]:
        """`weights` as arrays, checked against the layout (count and shapes)."""
        weights = [np.asarray(w) for w in weights]
        if len(weights) != len(self._shapes):
            raise ValueError(f"expected {len(self._shapes)} weight arrays, got {len(weights)}")
        for got, want in zip(weights, self._shapes):
            if got.shape != want:
                raise ValueError(f"weight of shape {got.shape} where the agent has {want}")
        return weights


def _map(fn: Callable[..., Any], *nests: Any) -> Any:
    """`fn` over the leaves of nests of tuples, lists and dicts (TensorFlow-free)."""
    first = nests[0]
    if isinstance(first, dict):
        return {key: _map(fn, *(n[key] for n in nests)) for key in first}
    if isinstance(first, (tuple, list)):
        mapped = [_map(fn, *parts) for parts in zip(*nests, strict=True)]
        # A namedtuple (an LSTM state tuple) takes its fields as arguments.
        return type(first)(*mapped) if hasattr(first, "_fields") else type(first)(mapped)
    return fn(*nests)


def _leaves(nest: Any) -> list[Any]:
    found: list[Any] = []
    _map(found.append, nest)
    return found


def _numpy_nest(nest: Any) -> Any:
    return _map(np.asarray, nest)
