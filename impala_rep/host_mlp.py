"""The MLP agent's `step` in numpy, TensorFlow-free: what actors act with.

`MLPHostAgent.host_step` is `mlp_host_step` for one MLP's layout, without the agent's
TensorFlow variables (`MLPAgent.host_step` is its twin's), for an actor process that never
imports TensorFlow (`impala_rep.agent_factory.acting_agent` gives it for the built-in MLP):
its weights all come from the learner. Importing TensorFlow would cost each actor seconds of
CPU at start-up and most of its memory for variables it never reads (docs/notebook.md, "Where
the CPU goes").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from impala_rep.agent_io import AgentInputs, AgentOutput
from impala_rep.distributions import policy_head_sizes
from impala_rep.observation_scaling import observation_scaling

__all__ = ["MLPHostAgent", "mlp_host_step"]


def mlp_host_step(
    weights: Sequence[np.ndarray],
    inputs: AgentInputs,
    *,
    scaling: tuple[np.ndarray, np.ndarray] | None,
    free_params: int = 0,
    value_layers: int = 0,
) -> AgentOutput:
    """`MLPAgent.step` in numpy: `weights` as `MLPAgent.get_weights` lists them (kernel,
    bias of each torso layer, then of the value torso's `value_layers` layers if it has its
    own, then of the policy and baseline heads, then the policy's `free_params`
    state-independent parameters if it has any), inputs `[B, ...]`, `scaling` as
    `observation_scaling` makes it (None: unscaled)."""
    free = None
    if free_params:
        *weights, free = weights
    observation = np.asarray(inputs.observation, np.float32)
    x = observation.reshape(len(observation), -1)
    if scaling is not None:
        offset, scale = scaling
        x = (x - offset) * scale
    layers = list(zip(weights[0::2], weights[1::2]))  # (kernel, bias) of each Dense
    hidden, heads = layers[:-2], layers[-2:]
    policy_hidden = hidden[: len(hidden) - value_layers]
    (policy_kernel, policy_bias), (baseline_kernel, baseline_bias) = heads
    features = _relu_layers(x, policy_hidden)
    value_features = _relu_layers(x, hidden[len(policy_hidden) :]) if value_layers else features
    params = features @ policy_kernel + policy_bias
    if free is not None:
        params = np.concatenate([params, np.broadcast_to(free, (len(params), free_params))], -1)
    return AgentOutput(params, (value_features @ baseline_kernel + baseline_bias)[:, 0])


def _relu_layers(x: np.ndarray, layers: Sequence[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    for kernel, bias in layers:
        x = np.maximum(x @ kernel + bias, 0.0)  # the torso's relu
    return x


class MLPHostAgent:
    """An `MLPAgent`'s acting half: its actions, weight layout and `host_step`, no variables.

    Args: as `MLPAgent`'s.
    """

    is_acting_twin = True  # what `Actor` checks: act without building anything

    def __init__(
        self,
        *,
        num_actions: int,
        hidden_sizes: Sequence[int] = (64, 64),
        observation_normalization: tuple[Sequence[float], Sequence[float]] | None = None,
        action_distribution: Any = None,
        separate_value_network: bool = False,
    ):
        if num_actions < 1:
            raise ValueError(f"num_actions must be >= 1, got {num_actions}")
        self.num_actions = num_actions
        self.action_distribution = action_distribution
        self._head, self._free_params = policy_head_sizes(action_distribution, num_actions)
        self._hidden_sizes = tuple(int(h) for h in hidden_sizes)
        self._value_layers = len(self._hidden_sizes) if separate_value_network else 0
        self._scaling = (
            None
            if observation_normalization is None
            else observation_scaling(*observation_normalization)
        )

    def weight_shapes(self, observation_shape: Sequence[int]) -> list[tuple[int, ...]]:
        """The shapes `MLPAgent.get_weights` gives for observations of `observation_shape`."""
        inputs = int(np.prod(observation_shape))
        torso = _torso_shapes(inputs, self._hidden_sizes)
        value = torso if self._value_layers else []
        width = self._hidden_sizes[-1] if self._hidden_sizes else inputs
        free = [(self._free_params,)] if self._free_params else []
        return [*torso, *value, (width, self._head), (self._head,), (width, 1), (1,), *free]

    def host_step(self, weights: Sequence[np.ndarray], inputs: AgentInputs) -> AgentOutput:
        return mlp_host_step(
            weights,
            inputs,
            scaling=self._scaling,
            free_params=self._free_params,
            value_layers=self._value_layers,
        )


def _torso_shapes(width: int, hidden_sizes: Sequence[int]) -> list[tuple[int, ...]]:
    shapes = []
    for out in hidden_sizes:
        shapes += [(width, out), (out,)]
        width = out
    return shapes
