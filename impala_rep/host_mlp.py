"""The MLP agent's `step` in numpy, TensorFlow-free: what actors act with.

`MLPAgent.host_step` is `mlp_host_step`; `MLPHostAgent` is the same step without the
agent's TensorFlow variables, for an actor process that never imports TensorFlow
(`impala_rep.agent_factory.acting_agent` gives it for the built-in MLP): its weights
all come from the learner. Importing TensorFlow would cost each actor seconds of CPU at
start-up and most of its memory for variables it never reads (docs/notebook.md, "Where
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
) -> AgentOutput:
    """`MLPAgent.step` in numpy: `weights` as `MLPAgent.get_weights` lists them (kernel,
    bias of each torso layer, then of the policy and baseline heads, then the policy's
    `free_params` state-independent parameters if it has any), inputs `[B, ...]`, `scaling`
    as `observation_scaling` makes it (None: unscaled)."""
    free = None
    if free_params:
        *weights, free = weights
    observation = np.asarray(inputs.observation, np.float32)
    x = observation.reshape(len(observation), -1)
    if scaling is not None:
        offset, scale = scaling
        x = (x - offset) * scale
    layers = list(zip(weights[0::2], weights[1::2]))  # (kernel, bias) of each Dense
    for kernel, bias in layers[:-2]:
        x = np.maximum(x @ kernel + bias, 0.0)  # the torso's relu
    (policy_kernel, policy_bias), (baseline_kernel, baseline_bias) = layers[-2:]
    params = x @ policy_kernel + policy_bias
    if free is not None:
        params = np.concatenate([params, np.broadcast_to(free, (len(params), free_params))], -1)
    return AgentOutput(params, (x @ baseline_kernel + baseline_bias)[:, 0])


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
    ):
        if num_actions < 1:
            raise ValueError(f"num_actions must be >= 1, got {num_actions}")
        self.num_actions = num_actions
        self.action_distribution = action_distribution
        self._head, self._free_params = policy_head_sizes(action_distribution, num_actions)
        self._hidden_sizes = tuple(int(h) for h in hidden_sizes)
        self._scaling = (
            None
            if observation_normalization is None
            else observation_scaling(*observation_normalization)
        )

    def weight_shapes(self, observation_shape: Sequence[int]) -> list[tuple[int, ...]]:
        """The shapes `MLPAgent.get_weights` gives for observations of `observation_shape`."""
        shapes, width = [], int(np.prod(observation_shape))
        for out in self._hidden_sizes:
            shapes += [(width, out), (out,)]
            width = out
        free = [(self._free_params,)] if self._free_params else []
        return shapes + [(width, self._head), (self._head,), (width, 1), (1,), *free]

    def host_step(self, weights: Sequence[np.ndarray], inputs: AgentInputs) -> AgentOutput:
        return mlp_host_step(weights, inputs, scaling=self._scaling, free_params=self._free_params)
