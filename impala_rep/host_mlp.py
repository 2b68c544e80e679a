"""The MLP agents' `step` in numpy, TensorFlow-free: what actors act with.

`MLPHostAgent.host_step` is `mlp_host_step` for one MLP's layout, without the agent's
TensorFlow variables (`MLPAgent.host_step` is its twin's), for an actor process that never
imports TensorFlow (`impala_rep.agent_factory.acting_agent` gives it for the built-in MLP):
its weights all come from the learner. `MLPLSTMHostAgent` is the same for the MLP with an
LSTM core (`impala_rep.networks.NetworkAgent` with torso "mlp"), its state carried in
numpy. Importing TensorFlow would cost each actor seconds of CPU at start-up and most of its
memory for variables it never reads (docs/notebook.md, "Where the CPU goes").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from impala_rep.agent_io import AgentInputs, AgentOutput
from impala_rep.distributions import Categorical, policy_head_sizes
from impala_rep.observation_scaling import observation_scaling

__all__ = ["MLPHostAgent", "MLPLSTMHostAgent", "lstm_host_step", "mlp_host_step"]


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
    x = _scaled_inputs(inputs.observation, scaling)
    layers = list(zip(weights[0::2], weights[1::2]))  # (kernel, bias) of each Dense
    hidden, heads = layers[:-2], layers[-2:]
    policy_hidden = hidden[: len(hidden) - value_layers]
    (policy_kernel, policy_bias), (baseline_kernel, baseline_bias) = heads
    features = _relu_layers(x, policy_hidden)
    value_features = _relu_layers(x, hidden[len(policy_hidden) :]) if value_layers else features
    params = features @ policy_kernel + policy_bias
    params = _with_free_params(params, free)
    return AgentOutput(params, (value_features @ baseline_kernel + baseline_bias)[:, 0])


def lstm_host_step(
    weights: Sequence[np.ndarray],
    inputs: AgentInputs,
    state: tuple[np.ndarray, np.ndarray],
    *,
    scaling: tuple[np.ndarray, np.ndarray] | None,
    hidden_layers: int,
    actions: Any,
    free_params: int = 0,
) -> tuple[AgentOutput, tuple[np.ndarray, np.ndarray]]:
    """`NetworkAgent.step` with torso "mlp" and an LSTM core, in numpy: `weights` as its
    `get_weights` lists them (kernel, bias of each of the `hidden_layers` torso layers; the
    LSTM's kernel, recurrent kernel and bias; the policy and baseline heads; the policy's
    `free_params`), inputs `[B, ...]`, `state` `(h, c)` `[B, units]`, reset where
    `inputs.first`; `actions` the distribution whose `features_numpy` the previous action
    is fed as. Returns the outputs and the state after the step."""
    free = None
    if free_params:
        *weights, free = weights
    torso = list(zip(weights[0 : 2 * hidden_layers : 2], weights[1 : 2 * hidden_layers : 2]))
    kernel, recurrent, bias, policy_kernel, policy_bias, baseline_kernel, baseline_bias = weights[
        2 * hidden_layers :
    ]
    x = _scaled_inputs(inputs.observation, scaling)
    reward = np.clip(np.asarray(inputs.prev_reward, np.float32), -1.0, 1.0)[:, None]
    core_input = np.concatenate(
        [_relu_layers(x, torso), actions.features_numpy(inputs.prev_action), reward], axis=-1
    )
    # Keras's LSTMCell: gates i, f, c, o side by side, sigmoid gates, tanh activations; the
    # state is reset before the step where an episode starts, as the agent's `_lstm_step`.
    keep = ~np.asarray(inputs.first, bool)[:, None]
    h, c = (np.where(keep, s, np.float32(0.0)) for s in state)
    i, f, g, o = np.split(core_input @ kernel + h @ recurrent + bias, 4, axis=-1)
    c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
    h = _sigmoid(o) * np.tanh(c)
    params = h @ policy_kernel + policy_bias
    params = _with_free_params(params, free)
    baseline = (h @ baseline_kernel + baseline_bias)[:, 0]
    return AgentOutput(params, baseline), (h.astype(np.float32), c.astype(np.float32))


def _scaled_inputs(observation: Any, scaling: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
    """`[B, ...]` observations as the MLP's `[B, D]` float32 inputs, standardised by
    `scaling` (`(offset, scale)`; None: unscaled)."""
    observation = np.asarray(observation, np.float32)
    x = observation.reshape(len(observation), -1)
    if scaling is None:
        return x
    offset, scale = scaling
    return (x - offset) * scale


def _with_free_params(params: np.ndarray, free: np.ndarray | None) -> np.ndarray:
    """`[B, head]` policy parameters, then the state-independent `free` ones (a Gaussian's
    log-stds) on every row; `params` as they are without."""
    if free is None:
        return params
    return np.concatenate([params, np.broadcast_to(free, (len(params), len(free)))], -1)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (np.tanh(0.5 * x) + 1.0)  # exact, and no overflow warning for large -x


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
        value_hidden_sizes: Sequence[int] | None = None,
    ):
        if num_actions < 1:
            raise ValueError(f"num_actions must be >= 1, got {num_actions}")
        self.num_actions = num_actions
        self.action_distribution = action_distribution
        self._head, self._free_params = policy_head_sizes(action_distribution, num_actions)
        self._hidden_sizes = tuple(int(h) for h in hidden_sizes)
        sizes = self._hidden_sizes if value_hidden_sizes is None else value_hidden_sizes
        self._value_sizes = tuple(int(h) for h in sizes) if separate_value_network else ()
        self._value_layers = len(self._value_sizes)
        self._scaling = (
            None
            if observation_normalization is None
            else observation_scaling(*observation_normalization)
        )

    def weight_shapes(self, observation_shape: Sequence[int]) -> list[tuple[int, ...]]:
        """The shapes `MLPAgent.get_weights` gives for observations of `observation_shape`."""
        inputs = int(np.prod(observation_shape))
        torso = _torso_shapes(inputs, self._hidden_sizes)
        value = _torso_shapes(inputs, self._value_sizes)
        width = self._hidden_sizes[-1] if self._hidden_sizes else inputs
        value_width = self._value_sizes[-1] if self._value_sizes else width
        free = [(self._free_params,)] if self._free_params else []
        return [*torso, *value, (width, self._head), (self._head,), (value_width, 1), (1,), *free]

    def host_step(self, weights: Sequence[np.ndarray], inputs: AgentInputs) -> AgentOutput:
        return mlp_host_step(
            weights,
            inputs,
            scaling=self._scaling,
            free_params=self._free_params,
            value_layers=self._value_layers,
        )


class MLPLSTMHostAgent:
    """The acting half of `NetworkAgent(torso="mlp", use_lstm=True)`: its actions, weight
    layout, initial state and recurrent `host_step`, no variables.

    Args: as `NetworkAgent`'s for torso "mlp" (`lstm_size` the core's units).
    """

    is_acting_twin = True

    def __init__(
        self,
        *,
        num_actions: int,
        lstm_size: int,
        hidden_sizes: Sequence[int] = (64, 64),
        observation_normalization: tuple[Sequence[float], Sequence[float]] | None = None,
        action_distribution: Any = None,
    ):
        if num_actions < 1:
            raise ValueError(f"num_actions must be >= 1, got {num_actions}")
        self.num_actions = num_actions
        self.action_distribution = action_distribution
        self._actions = action_distribution or Categorical(num_actions)
        self._head, self._free_params = policy_head_sizes(action_distribution, num_actions)
        self._hidden_sizes = tuple(int(h) for h in hidden_sizes)
        self._units = int(lstm_size)
        self._scaling = (
            None
            if observation_normalization is None
            else observation_scaling(*observation_normalization)
        )

    def initial_state(self, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
        zeros = np.zeros([batch_size, self._units], np.float32)
        return (zeros, zeros.copy())

    def weight_shapes(self, observation_shape: Sequence[int]) -> list[tuple[int, ...]]:
        """The shapes `NetworkAgent.get_weights` gives for observations of `observation_shape`."""
        inputs = int(np.prod(observation_shape))
        width = self._hidden_sizes[-1] if self._hidden_sizes else inputs
        previous = np.zeros([1, *self._actions.action_shape], self._actions.action_dtype)
        core_inputs = width + self._actions.features_numpy(previous).shape[-1] + 1
        units, free = self._units, [(self._free_params,)] if self._free_params else []
        return [
            *_torso_shapes(inputs, self._hidden_sizes),
            (core_inputs, 4 * units),
            (units, 4 * units),
            (4 * units,),
            (units, self._head),
            (self._head,),
            (units, 1),
            (1,),
            *free,
        ]

    def host_step(
        self,
        weights: Sequence[np.ndarray],
        inputs: AgentInputs,
        state: tuple[np.ndarray, np.ndarray],
    ) -> tuple[AgentOutput, tuple[np.ndarray, np.ndarray]]:
        return lstm_host_step(
            weights,
            inputs,
            state,
            scaling=self._scaling,
            hidden_layers=len(self._hidden_sizes),
            actions=self._actions,
            free_params=self._free_params,
        )


def _torso_shapes(width: int, hidden_sizes: Sequence[int]) -> list[tuple[int, ...]]:
    shapes = []
    for out in hidden_sizes:
        shapes += [(width, out), (out,)]
        width = out
    return shapes
