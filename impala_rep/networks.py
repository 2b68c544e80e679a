"""The IMPALA paper's agent (Espeholt et al. 2018, Figure 3) on any torso, and agent selection.

`NetworkAgent` implements the `impala_rep.agent.Agent` protocol with a torso, an optional
LSTM core and two heads. The torso is one of the paper's two pixel torsos, the MinAtar
paper's small one (Young & Tian 2019) for 10x10 MinAtar images, or an MLP for vectors
(what gives a partially observed vector task memory: the MLP agent without a core is
`impala_rep.agent.MLPAgent`, which acts in numpy):

    observation [.., H, W, C] uint8 -> /255 -> CNN torso -> [.., F] (F = 256; 128 for minatar)
    observation [.., D] -> standardised -> MLP torso -> [.., F] (F = the last hidden size)
    concat(torso, one_hot(prev_action) [.., A], clip(prev_reward, -1, 1) [.., 1])
    -> (optional) LSTMCell(lstm_size) -> policy logits [.., A], baseline [..]

`make_agent` (`impala_rep.agent_factory`, re-exported here) turns a configuration
(observation shape, network name) into a picklable zero-argument factory, so actors
and the learner can each build their own copy of the same agent.

Shapes follow the package convention (see `impala_rep`): `B` batch, `T` time,
`A` number of actions, `H, W, C` image height, width and channels, `D` a vector's size.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from impala_rep.agent import (  # MLPTorso re-exported: the vector torso, beside the CNN ones
    AgentInputs,
    AgentOutput,
    MLPTorso,
    assign_weights,
    free_params_variable,
    layer_variables,
    weights_of,
)
from impala_rep.agent_factory import SHALLOW_MIN_IMAGE_SIZE, make_agent
from impala_rep.config.schema import NETWORKS, TORSOS  # the built-in networks, named once
from impala_rep.distributions import Categorical, policy_head_sizes
from impala_rep.observation_nest import Shape, is_nest, shape_of
from impala_rep.observation_scaling import observation_scaling

__all__ = [
    "ShallowTorso",
    "DeepTorso",
    "MinAtarTorso",
    "MLPTorso",
    "NetworkAgent",
    "CNNAgent",
    "make_agent",
    "TORSOS",
    "NETWORKS",
    "SHALLOW_MIN_IMAGE_SIZE",
]

layers = tf.keras.layers


class _LayerStack:
    """A torso that is a plain sequence of Keras layers (`self.layers`), applied in order."""

    layers: list

    def __call__(self, images: tf.Tensor) -> tf.Tensor:
        x = images
        for layer in self.layers:
            x = layer(x)
        return x


class ShallowTorso(_LayerStack):
    """The paper's shallow torso: images `[N, H, W, C]` float32 -> features `[N, 256]`.

    Conv(16, 8x8, stride 4) ReLU -> Conv(32, 4x4, stride 2) ReLU -> flatten ->
    Dense(256) ReLU. The convolutions use "valid" padding, as the A3C/DQN network
    this torso comes from (84x84 -> 20x20 -> 9x9). Inputs must be at least 20x20
    (`SHALLOW_MIN_IMAGE_SIZE`).
    """

    def __init__(self):
        self.layers = [
            layers.Conv2D(16, 8, strides=4, padding="valid", activation="relu", name="conv_0"),
            layers.Conv2D(32, 4, strides=2, padding="valid", activation="relu", name="conv_1"),
            layers.Flatten(name="flatten"),
            layers.Dense(256, activation="relu", name="torso_linear"),
        ]


class _ResidualBlock:
    """x + Conv3x3(ReLU(Conv3x3(ReLU(x)))), channels unchanged ("same" padding)."""

    def __init__(self, channels: int, name: str):
        self.layers = [
            layers.Conv2D(channels, 3, padding="same", name=f"{name}_conv_0"),
            layers.Conv2D(channels, 3, padding="same", name=f"{name}_conv_1"),
        ]

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        y = self.layers[0](tf.nn.relu(x))
        y = self.layers[1](tf.nn.relu(y))
        return x + y


class DeepTorso:
    """The paper's deep (15-layer) residual torso: `[N, H, W, C]` float32 -> `[N, 256]`.

    Three sections with (16, 32, 32) channels, each: Conv 3x3 stride 1 (same) ->
    MaxPool 3x3 stride 2 (same) -> 2 residual blocks; then ReLU -> flatten ->
    Dense(256) ReLU. As in scalable_agent's `_torso`, the section's first conv and
    the pooling have no activation: each residual block starts with a ReLU.
    84x84 -> 42x42 -> 21x21 -> 11x11.
    """

    def __init__(self, channels: Sequence[int] = (16, 32, 32), blocks_per_section: int = 2):
        self._sections = []
        for i, ch in enumerate(channels):
            conv = layers.Conv2D(ch, 3, strides=1, padding="same", name=f"section_{i}_conv")
            pool = layers.MaxPool2D(
                pool_size=3, strides=2, padding="same", name=f"section_{i}_pool"
            )
            blocks = [
                _ResidualBlock(ch, f"section_{i}_block_{j}") for j in range(blocks_per_section)
            ]
            self._sections.append((conv, pool, blocks))
        self._flatten = layers.Flatten(name="flatten")
        self._linear = layers.Dense(256, activation="relu", name="torso_linear")
        # Fixed order: it is the order of trainable_variables / get_weights.
        self.layers = []
        for conv, pool, blocks in self._sections:
            self.layers += [conv, pool] + [layer for block in blocks for layer in block.layers]
        self.layers += [self._flatten, self._linear]

    def __call__(self, images: tf.Tensor) -> tf.Tensor:
        x = images
        for conv, pool, blocks in self._sections:
            x = pool(conv(x))
            for block in blocks:
                x = block(x)
        return self._linear(self._flatten(tf.nn.relu(x)))


class MinAtarTorso(_LayerStack):
    """The MinAtar paper's network torso: images `[N, H, W, C]` float32 -> features `[N, 128]`.

    Conv(16, 3x3, stride 1, "valid") ReLU -> flatten -> Dense(128) ReLU, as in
    Young & Tian (2019) and MinAtar's example agents: 10x10 -> 8x8x16 = 1024
    features. Inputs must be at least 3x3. Made for MinAtar's 10x10 grids, where
    the shallow torso does not fit and the deep one is 15 layers for 100 pixels.
    """

    def __init__(self):
        self.layers = [
            layers.Conv2D(16, 3, strides=1, padding="valid", activation="relu", name="conv_0"),
            layers.Flatten(name="flatten"),
            layers.Dense(128, activation="relu", name="torso_linear"),
        ]


# One class per name in TORSOS (tests/test_networks.py checks the two agree): the pixel
# torsos, which take images /255 (`_preprocess`).
_TORSO_CLASSES = {"shallow": ShallowTorso, "deep": DeepTorso, "minatar": MinAtarTorso}
MLP = "mlp"  # the vector torso's name (NETWORKS' "mlp")


def _preprocess(observation: Any) -> tf.Tensor:
    """uint8 pixels -> float32 in [0, 1]; float observations are taken as already scaled.

    The division happens here, on the device, so observations travel (actor ->
    learner, host -> device) as uint8: 4x less data than float32.
    """
    observation = tf.convert_to_tensor(observation)
    if observation.dtype == tf.uint8:
        return tf.cast(observation, tf.float32) * (1.0 / 255.0)
    if observation.dtype.is_floating:
        return tf.cast(observation, tf.float32)
    raise TypeError(
        f"pixel torso observations must be uint8 or floating, got {observation.dtype.name}"
    )


class NestTorso:
    """The torso of a nest of observations (`impala_rep.observation_nest`): a pixel torso of
    its own for each image part; the other parts (vectors: one-hot codes, a direction, a
    position) joined to the images' features, as Stable-Baselines3's CombinedExtractor joins
    them, then a ReLU layer over all of it, so that a vector part can change what the image
    means to the policy (heads on the join alone could only add to the logits).

    `{key: [N, H, W, C] or [N, D]}` -> `[N, 256]`, parts joined in key order.
    """

    def __init__(self, image_keys: Sequence[str], torso: str):
        if not image_keys:
            raise ValueError("a nest's torso needs at least one image part")
        self._images = {key: _TORSO_CLASSES[torso]() for key in sorted(image_keys)}
        self._joint = layers.Dense(256, activation="relu", name="nest_linear")

    @property
    def image_keys(self) -> tuple[str, ...]:
        return tuple(self._images)

    @property
    def layers(self) -> list:
        return [*(layer for torso in self._images.values() for layer in torso.layers), self._joint]

    def __call__(self, observation: dict[str, Any]) -> tf.Tensor:
        missing = sorted(set(self._images) - set(observation))
        if missing:
            raise ValueError(f"the observation nest has no image part {missing[0]!r}")
        features = []
        for key in sorted(observation):
            part = observation[key]
            if key in self._images:
                features.append(self._images[key](_preprocess(part)))
            else:
                features.append(tf.cast(part, tf.float32))
        return self._joint(tf.concat(features, axis=-1))


class NetworkAgent:
    """IMPALA's agent: a torso, an optional LSTM core, two heads.

    Args:
      num_actions: A >= 1.
      torso: "shallow" or "deep" (the paper's Figure 3 networks), "minatar" (the
        MinAtar paper's one-conv network, for small images), or "mlp" (`MLPTorso`, for
        vectors).
      use_lstm: add an LSTMCell core between torso and heads. Its state is a
        tuple `(h, c)` of `[B, lstm_size]` float32, reset to zeros at every
        observation with `first=True`. Without LSTM the state is `()`.
      lstm_size: LSTM units, >= 1.
      hidden_sizes: the MLP torso's layer sizes (torso "mlp" only).
      observation_normalization: `(mean, std)` per dimension for the MLP torso's
        inputs (`MLPTorso`; torso "mlp" only). None: unscaled.
      initial_log_std: where a Gaussian policy's log standard deviations start.
      image_keys: observations are a nest (`impala_rep.observation_nest`) and these of its
        keys are its images, each encoded by a pixel torso (`torso`) of its own; its
        other parts are vectors (`NestTorso`). None: one array.

    Inputs (see `AgentInputs`): observation uint8 `[.., H, W, C]` (float32 already
    in [0, 1] is accepted too) for a pixel torso, `[.., D]` for the MLP, a dict of
    them with `image_keys`; prev_action
    int32 `[..]`, prev_reward float32 `[..]`, first bool `[..]`, with leading dims
    `[B]` for `step` and `[T, B]` for `unroll`.
    """

    def __init__(
        self,
        *,
        num_actions: int,
        torso: str = "shallow",
        use_lstm: bool = False,
        lstm_size: int = 256,
        hidden_sizes: Sequence[int] = (64, 64),
        observation_normalization: tuple[Sequence[float], Sequence[float]] | None = None,
        action_distribution: Any = None,
        initial_log_std: float = 0.0,
        image_keys: Sequence[str] | None = None,
    ):
        if num_actions < 1:
            raise ValueError(f"num_actions must be >= 1, got {num_actions}")
        head, self._free_params = policy_head_sizes(action_distribution, num_actions)
        self._initial_log_std = float(initial_log_std)
        self.action_distribution = action_distribution
        self._actions = action_distribution or Categorical(num_actions)
        if torso not in (*_TORSO_CLASSES, MLP):
            raise ValueError(f"torso must be one of {(*TORSOS, MLP)}, got {torso!r}")
        if use_lstm and lstm_size < 1:
            raise ValueError(f"lstm_size must be >= 1, got {lstm_size}")
        self.num_actions = num_actions
        self.torso_name = torso
        self.use_lstm = bool(use_lstm)
        self.lstm_size = lstm_size
        if image_keys is not None:
            if torso == MLP:
                raise ValueError(
                    f"observations with images (keys {sorted(image_keys)}) need a pixel "
                    f"torso {TORSOS}, got {torso!r}"
                )
            self._torso = NestTorso(image_keys, torso)
            self._observation_rank, self._prepare = None, lambda observation: observation
        elif torso == MLP:
            self._torso = MLPTorso(
                hidden_sizes,
                scaling=None
                if observation_normalization is None
                else observation_scaling(*observation_normalization),
            )
            self._observation_rank, self._prepare = 1, tf.convert_to_tensor
        else:
            self._torso = _TORSO_CLASSES[torso]()
            self._observation_rank, self._prepare = 3, _preprocess
        self._lstm = layers.LSTMCell(lstm_size, name="lstm") if self.use_lstm else None
        # A policy head 100x smaller than usual starts every state at a near-uniform
        # policy, so the first updates are not spent undoing arbitrary preferences;
        # Andrychowicz et al. 2021 ("What Matters In On-Policy RL") found this among
        # the most important choices, and cleanba's IMPALA (orthogonal, gain 0.01)
        # does the same.
        self._policy = layers.Dense(
            head,
            name="policy_logits",
            kernel_initializer=tf.keras.initializers.Orthogonal(gain=0.01),
        )
        self._baseline = layers.Dense(1, name="baseline")
        self._free: tf.Variable | None = None  # a Gaussian's log-stds, made in build()

    @property
    def layers(self) -> list:
        """Every Keras layer, in the order of `trainable_variables`."""
        core = [self._lstm] if self._lstm is not None else []
        return [*self._torso.layers, *core, self._policy, self._baseline]

    def initial_state(self, batch_size: int) -> tuple:
        """`(h, c)` zeros of `[batch_size, lstm_size]` float32, or `()` without LSTM."""
        if not self.use_lstm:
            return ()
        zeros = tf.zeros([batch_size, self.lstm_size], tf.float32)
        return (zeros, zeros)

    def build(self, observation_shape: Shape) -> None:
        """Creates every variable by running one step on a zero observation `[1, ...]`
        (a nest's: a dict of shapes).

        Keras layers build only once, so calling this again creates nothing new.
        """
        if self._observation_rank is None:
            observation = self._zero_nest(observation_shape)
        elif is_nest(observation_shape) or len(observation_shape) != self._observation_rank:
            expected = "image observations [H, W, C]" if self._observation_rank == 3 else "[D]"
            raise ValueError(
                f"torso {self.torso_name!r} needs {expected}, got shape {observation_shape}"
            )
        else:
            observation = tf.zeros(
                [1, *observation_shape], tf.uint8 if self._observation_rank == 3 else tf.float32
            )
        if self._free_params and self._free is None:
            self._free = free_params_variable(
                self.action_distribution, initial_log_std=self._initial_log_std
            )
        inputs = AgentInputs(
            observation=observation,
            prev_action=tf.zeros(
                [1, *self._actions.action_shape], tf.as_dtype(self._actions.action_dtype)
            ),
            prev_reward=tf.zeros([1], tf.float32),
            first=tf.ones([1], tf.bool),
        )
        self.step(inputs, self.initial_state(1))

    def _zero_nest(self, observation_shape: Shape) -> dict[str, tf.Tensor]:
        """`[1, ...]` zeros of each part of a nest of `observation_shape`, checked against
        the torso's image keys: uint8 images, float32 vectors."""
        shape = shape_of(observation_shape) if is_nest(observation_shape) else None
        images = set(self._torso.image_keys)
        if shape is None or any((len(s) == 3) != (key in images) for key, s in shape.items()):
            raise ValueError(
                f"this agent takes a nest whose images are {sorted(images)} and whose other "
                f"parts are vectors, got shape {observation_shape}"
            )
        return {
            key: tf.zeros([1, *s], tf.uint8 if key in images else tf.float32)
            for key, s in shape.items()
        }

    def _core_input(self, observation, prev_action, prev_reward) -> tf.Tensor:
        """`[N, ...]`, `[N, *action_shape]`, `[N]` -> `[N, F + A + 1]` (F: the torso's
        features, A: the previous action's, `features_tf` of the distribution)."""
        features = self._torso(self._prepare(observation))
        # scalable_agent feeds the clipped reward (rewards are clipped to [-1, 1]
        # for the loss too) so large raw rewards do not saturate the core.
        reward = tf.clip_by_value(tf.cast(prev_reward, tf.float32), -1.0, 1.0)[:, None]
        action = self._actions.features_tf(prev_action)
        return tf.concat([features, action, reward], axis=-1)

    def _heads(self, x: tf.Tensor) -> AgentOutput:
        """`[N, F]` -> the policy's parameters `[N, P]`, baseline `[N]`."""
        params = self._policy(x)
        if self._free is not None:  # the same in every state: broadcast over the rows
            free = tf.broadcast_to(self._free, [tf.shape(params)[0], self._free_params])
            params = tf.concat([params, free], axis=-1)
        return AgentOutput(params, tf.squeeze(self._baseline(x), axis=-1))

    def _lstm_step(self, x: tf.Tensor, first: tf.Tensor, state: tuple) -> tuple[tf.Tensor, tuple]:
        """One LSTM step on `[B, F]`; rows with `first` start from a zero state."""
        # Reset BEFORE the step: the first observation of an episode must not see
        # the previous episode's memory (scalable_agent does the same with `done`).
        keep = tf.logical_not(tf.convert_to_tensor(first, tf.bool))[:, None]
        h, c = (tf.where(keep, s, tf.zeros_like(s)) for s in state)
        output, (h, c) = self._lstm(x, [h, c])
        return output, (h, c)

    def step(self, inputs: AgentInputs, state: Any) -> tuple[AgentOutput, Any]:
        """One time step: inputs `[B, ...]` -> logits `[B, A]`, baseline `[B]`, new state."""
        x = self._core_input(inputs.observation, inputs.prev_action, inputs.prev_reward)
        if self.use_lstm:
            h, c = state
            x, state = self._lstm_step(
                x,
                inputs.first,
                (tf.convert_to_tensor(h, tf.float32), tf.convert_to_tensor(c, tf.float32)),
            )
        return self._heads(x), state

    def unroll(self, inputs: AgentInputs, state: Any) -> tuple[AgentOutput, Any]:
        """A time-major unroll: inputs `[T, B, ...]` from `state` -> `[T, B, A]`, `[T, B]`,
        final state.

        The torso and heads run once on time folded into batch (`[T*B, ...]`, one
        big convolution or matrix multiply); only the LSTM core steps through time,
        with `tf.scan` so a graph handles any `T`.
        """
        prev_reward = tf.convert_to_tensor(inputs.prev_reward)
        t, b = tf.shape(prev_reward)[0], tf.shape(prev_reward)[1]
        flat = tf.nest.map_structure(_fold_time, inputs.observation)
        prev_action = tf.reshape(inputs.prev_action, [-1, *self._actions.action_shape])
        x = self._core_input(flat, prev_action, tf.reshape(inputs.prev_reward, [-1]))
        if self.use_lstm:
            x = tf.reshape(x, tf.stack([t, b, tf.shape(x)[-1]]))
            h0, c0 = (tf.convert_to_tensor(s, tf.float32) for s in state)

            def scan_fn(carry, elems):
                _, prev_state = carry
                x_t, first_t = elems
                return self._lstm_step(x_t, first_t, prev_state)

            outputs, (hs, cs) = tf.scan(
                scan_fn,
                (x, tf.convert_to_tensor(inputs.first, tf.bool)),
                initializer=(tf.zeros_like(h0), (h0, c0)),
            )
            # The last stacked state is the state after obs[T-1].
            state = (hs[-1], cs[-1])
            x = tf.reshape(outputs, [t * b, self.lstm_size])
        out = self._heads(x)
        return AgentOutput(
            tf.reshape(out.policy_logits, tf.stack([t, b, self.num_actions])),
            tf.reshape(out.baseline, tf.stack([t, b])),
        ), state

    @property
    def trainable_variables(self) -> list[tf.Variable]:
        return layer_variables(self.layers) + ([] if self._free is None else [self._free])

    def get_weights(self) -> list[np.ndarray]:
        return weights_of(self.trainable_variables)

    def set_weights(self, weights: Sequence[np.ndarray]) -> None:
        assign_weights(self.trainable_variables, weights)


def _fold_time(observation: Any) -> tf.Tensor:
    """`[T, B, ...]` -> `[T*B, ...]`, keeping static trailing dims (Dense needs the
    flattened feature size)."""
    observation = tf.convert_to_tensor(observation)
    trailing = observation.shape[2:]
    if trailing.is_fully_defined():
        return tf.reshape(observation, [-1, *trailing.as_list()])
    return tf.reshape(observation, tf.concat([[-1], tf.shape(observation)[2:]], 0))


# The pixel agent's other name, which existing code builds it by.
CNNAgent = NetworkAgent
