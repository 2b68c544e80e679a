"""The agent interface shared by actors and the learner, and the MLP agent.

An agent maps (observation, previous action, previous reward, recurrent state)
to (policy logits, baseline). Actors call `step` on one time step of a batch of
environments; the learner calls `unroll` on a whole time-major unroll. Nothing in
`actors/` or `learner/` knows which agent it runs: they only use this interface.

Shapes follow the package convention (see `impala_rep`): `B` batch, `T` time,
`A` number of actions, `...` the observation shape.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import tensorflow as tf

from impala_rep.agent_factory import check_value_network
from impala_rep.agent_io import AgentInputs, AgentOutput  # noqa: F401  (their documented home)
from impala_rep.distributions import policy_head_sizes
from impala_rep.host_mlp import MLPHostAgent

# bounds_normalization is re-exported: its documented home is here, beside MLPAgent.
from impala_rep.observation_scaling import bounds_normalization, observation_scaling  # noqa: F401

__all__ = [
    "AgentOutput",
    "AgentInputs",
    "Agent",
    "MLPAgent",
    "MLPTorso",
    "flat_observations",
    "layer_variables",
    "free_params_variable",
    "weights_of",
    "assign_weights",
]


class Agent(Protocol):
    """What actors and the learner need from an agent."""

    num_actions: int

    def initial_state(self, batch_size: int) -> Any:
        """The recurrent state for `batch_size` fresh episodes; `()` for feed-forward agents."""

    def build(self, observation_shape: Sequence[int] | Mapping[str, Sequence[int]]) -> None:
        """Creates every variable (call inside `Replicator.scope()` on the learner), for
        observations of one env of `observation_shape`: a tuple, or a dict of them for a
        nest (`impala_rep.observation_nest`), whose observations are then dicts too."""

    def step(self, inputs: AgentInputs, state: Any) -> tuple[AgentOutput, Any]:
        """One time step for a batch: inputs `[B, ...]` -> outputs `[B, ...]`, new state."""

    def unroll(self, inputs: AgentInputs, state: Any) -> tuple[AgentOutput, Any]:
        """A time-major unroll: inputs `[T, B, ...]` from `state` -> outputs `[T, B, ...]`."""

    @property
    def trainable_variables(self) -> Sequence[tf.Variable]: ...

    # Optional: `non_trainable_variables`, a property listing variables the learner
    # updates without gradients (e.g. batch-norm moving statistics). The learner
    # checkpoints them with the weights, so `--resume` restores them too.

    def get_weights(self) -> list[np.ndarray]: ...

    def set_weights(self, weights: Sequence[np.ndarray]) -> None: ...

    # Optional: `host_step(weights, inputs)`, `step` of a feed-forward agent (initial state
    # `()`) in numpy, with `weights` a `get_weights` list and numpy inputs `[B, ...]`;
    # returns an `AgentOutput` of numpy arrays. A recurrent agent's is `host_step(weights,
    # inputs, state) -> (AgentOutput, state)`, its state numpy, reset where `inputs.first`
    # as `step` resets it. Actors act with it instead of a compiled `step`
    # (`actors/actor.py`): for a small network a TensorFlow call's fixed cost is most of
    # the step.


def layer_variables(layers: Sequence[tf.keras.layers.Layer]) -> list[tf.Variable]:
    """The trainable variables of `layers`, in a fixed order (weights travel as a list)."""
    return [v for layer in layers for v in layer.trainable_variables]


def free_params_variable(distribution: Any, *, initial_log_std: float) -> tf.Variable:
    """The policy's state-independent parameters (a Gaussian's log standard deviations, one per
    action dimension), starting at `initial_log_std` relative to each dimension's half range
    (`DiagGaussian.initial_free_params`): the built-in agents' last weight."""
    return tf.Variable(
        distribution.initial_free_params(float(initial_log_std)),
        trainable=True,
        name="policy_free_params",
    )


def weights_of(variables: Sequence[tf.Variable]) -> list[np.ndarray]:
    """The variables' values, read in one compiled call: the learner reads its weights at
    every publish, and one call costs a fraction of reading mirrored variables one by one
    (docs/notebook.md, "Where the CPU goes")."""
    if not variables:
        return []
    key = tuple(map(id, variables))
    reader = _READERS.get(key)
    if reader is None:
        # The entry holds the variables, so no other object can take their ids while it
        # is cached; a few agents per process, each traced once.
        held = list(variables)
        reader = _READERS[key] = tf.function(lambda: [tf.identity(v) for v in held])
        while len(_READERS) > 16:
            _READERS.popitem(last=False)
    return [np.asarray(t) for t in reader()]


_READERS: collections.OrderedDict = collections.OrderedDict()


def assign_weights(variables: Sequence[tf.Variable], weights: Sequence[np.ndarray]) -> None:
    """Assigns a weight list (as from `weights_of`) to `variables`, checking the count.

    Variable by variable: one compiled assign of all of them was barely cheaper for the MLP
    (once per unroll; docs/notebook.md, "Where the CPU goes"), not worth a traced function."""
    if len(weights) != len(variables):
        raise ValueError(f"expected {len(variables)} weight arrays, got {len(weights)}")
    for variable, value in zip(variables, weights):
        variable.assign(value)


def flat_observations(observation: Any, *, scaling: tuple[Any, Any] | None = None) -> tf.Tensor:
    """`[N, ...]` observations -> `[N, D]` float32, standardised by `scaling` (`(offset, scale)`
    from `observation_scaling`, or None: unscaled): the MLP's inputs, and RND's networks'."""
    x = tf.reshape(tf.cast(observation, tf.float32), [tf.shape(observation)[0], -1])
    if scaling is None:
        return x
    offset, scale = scaling
    return (x - offset) * scale


class MLPTorso:
    """The MLP torso for vector observations: `[N, D]` -> features `[N, hidden_sizes[-1]]`
    (`[N, D]` without hidden layers).

    Observations are flattened to float32 and standardised with `scaling`, an
    `observation_scaling` `(offset, scale)` (None: unscaled), then go through Dense ReLU
    layers: `MLPAgent`'s torso, and `impala_rep.networks.NetworkAgent`'s for vectors.
    """

    def __init__(
        self,
        hidden_sizes: Sequence[int] = (64, 64),
        *,
        scaling: tuple[Any, Any] | None = None,
        name: str = "torso",
    ):
        if any(h < 1 for h in hidden_sizes):  # none at all: a linear policy on the inputs
            raise ValueError(f"hidden_sizes must be sizes >= 1, got {tuple(hidden_sizes)}")
        self._scaling = scaling
        self.layers = [
            tf.keras.layers.Dense(h, activation="relu", name=f"{name}_{i}")
            for i, h in enumerate(hidden_sizes)
        ]

    def __call__(self, observation: tf.Tensor) -> tf.Tensor:
        x = flat_observations(observation, scaling=self._scaling)
        for layer in self.layers:
            x = layer(x)
        return x


class MLPAgent:
    """A feed-forward agent for vector observations: an MLP torso, policy and value heads.

    The heads share the torso, or with `separate_value_network` the value head has an MLP of
    its own, of the same sizes or of `value_hidden_sizes` (as SB3's and CleanRL's agents for
    continuous control do): the value loss then shapes no feature the policy reads.

    It ignores the previous action and reward and has no recurrent state. Given
    `observation_normalization=(mean, std)` (per dimension, e.g. `bounds_normalization`
    of the env's Box), it first standardises its inputs (`observation_scaling`). The
    mapping is a constant, not a variable: the agent's weights and checkpoints are the
    same with or without it.

    `action_distribution` (`impala_rep.distributions`; None: a softmax over `num_actions`
    logits) is what it acts with: its policy head gives the distribution's `head_params`,
    and its `free_params` (a Gaussian's log-stds) are one more variable, the last weight,
    starting at `initial_log_std`. `num_actions` is the distribution's `num_params`.
    """

    def __init__(
        self,
        *,
        num_actions: int,
        hidden_sizes: Sequence[int] = (64, 64),
        observation_normalization: tuple[Sequence[float], Sequence[float]] | None = None,
        action_distribution: Any = None,
        initial_log_std: float = 0.0,
        separate_value_network: bool = False,
        value_hidden_sizes: Sequence[int] | None = None,
    ):
        if num_actions < 1:
            raise ValueError(f"num_actions must be >= 1, got {num_actions}")
        check_value_network(
            separate_value_network=separate_value_network, value_hidden_sizes=value_hidden_sizes
        )
        self.num_actions = num_actions
        self.action_distribution = action_distribution
        self._initial_log_std = float(initial_log_std)
        head, self._free_params = policy_head_sizes(action_distribution, num_actions)
        self._scaling = (
            None
            if observation_normalization is None
            else observation_scaling(*observation_normalization)
        )
        self._torso = MLPTorso(hidden_sizes, scaling=self._scaling)
        self._value_torso = (
            MLPTorso(
                hidden_sizes if value_hidden_sizes is None else value_hidden_sizes,
                scaling=self._scaling,
                name="value_torso",
            )
            if separate_value_network
            else None
        )
        # What actors act with, in numpy; the agent acts exactly as it does.
        self._twin = MLPHostAgent(
            num_actions=num_actions,
            hidden_sizes=hidden_sizes,
            observation_normalization=observation_normalization,
            action_distribution=action_distribution,
            separate_value_network=separate_value_network,
            value_hidden_sizes=value_hidden_sizes,
        )
        self._policy = tf.keras.layers.Dense(head, name="policy_logits")
        self._baseline = tf.keras.layers.Dense(1, name="baseline")
        # The order `host_mlp.mlp_host_step` reads the weights in.
        value = [] if self._value_torso is None else self._value_torso.layers
        self._layers = [*self._torso.layers, *value, self._policy, self._baseline]
        self._free: tf.Variable | None = None  # made in build(), inside a strategy's scope

    def initial_state(self, batch_size: int) -> tuple:
        return ()

    def build(self, observation_shape: Sequence[int]) -> None:
        if self._free_params and self._free is None:
            self._free = free_params_variable(
                self.action_distribution, initial_log_std=self._initial_log_std
            )
        dummy = tf.zeros([1, *observation_shape], tf.float32)
        self._forward(dummy)

    def _forward(self, observation: tf.Tensor) -> AgentOutput:
        x = self._torso(observation)
        params = self._policy(x)
        if self._free is not None:  # the same in every state: broadcast over the rows
            free = tf.broadcast_to(self._free, [tf.shape(params)[0], self._free_params])
            params = tf.concat([params, free], axis=-1)
        v = x if self._value_torso is None else self._value_torso(observation)
        return AgentOutput(params, tf.squeeze(self._baseline(v), axis=-1))

    def step(self, inputs: AgentInputs, state: Any) -> tuple[AgentOutput, Any]:
        return self._forward(inputs.observation), state

    def unroll(self, inputs: AgentInputs, state: Any) -> tuple[AgentOutput, Any]:
        # Feed-forward: fold time into batch for one big matrix multiply.
        observation = tf.convert_to_tensor(inputs.observation)
        t, b = tf.shape(observation)[0], tf.shape(observation)[1]
        flat = tf.reshape(observation, tf.concat([[t * b], tf.shape(observation)[2:]], 0))
        out = self._forward(flat)
        return AgentOutput(
            tf.reshape(out.policy_logits, [t, b, self.num_actions]),
            tf.reshape(out.baseline, [t, b]),
        ), state

    @property
    def trainable_variables(self) -> list[tf.Variable]:
        free = [] if self._free is None else [self._free]
        return layer_variables(self._layers) + free

    def get_weights(self) -> list[np.ndarray]:
        return weights_of(self.trainable_variables)

    def set_weights(self, weights: Sequence[np.ndarray]) -> None:
        assign_weights(self.trainable_variables, weights)

    def host_step(self, weights: Sequence[np.ndarray], inputs: AgentInputs) -> AgentOutput:
        """`step` in numpy with `weights` (as `get_weights` lists them): what actors act with.

        For a small network a compiled `step` is nearly all TensorFlow's fixed cost per
        call, which numpy does not pay (docs/notebook.md, "Where the CPU goes").
        tests/test_host_step.py holds it to `step`."""
        return self._twin.host_step(weights, inputs)
