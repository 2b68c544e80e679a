"""An agent of your own for observations that are a nest: an image among other parts, or
vectors and discrete parts only.

    .venv/bin/impala-rep train --env MiniGrid-DoorKey-5x5-v0 \\
        --observation-keys image,direction \\
        --agent examples/dict_observation_agent.py:make_agent

A `Dict` (or `Tuple`) observation with an image among other parts reaches the agent as a dict
of arrays (docs/guide/training.md, "Environment"): here MiniGrid's `image` (`[7, 7, 21]` uint8,
one-hot planes) and `direction` (`[4]` uint8, one-hot). The factory receives
`observation_shape` as a dict of shapes, `{"direction": (4,), "image": (7, 7, 21)}`; `step`
and `unroll` receive `inputs.observation` as a dict of tensors, `[B, ...]` and `[T+1, B', ...]`.
A nest of vectors only (a `Dict` of a state and discrete codes, say) reaches it the same way,
with no image to convolve. Any action space: `action_distribution` is the env's
(docs/guide/custom-agents.md), so the policy head's width is `num_actions`, its parameters'.
"""

from collections.abc import Mapping

import tensorflow as tf

from impala_rep import AgentOutput

layers = tf.keras.layers


# --8<-- [start:agent]
class ImageAndVectorsAgent:
    """A small convolution for each image part, the other parts (vectors) joined to their
    features, one hidden layer, a policy and a value head."""

    def __init__(self, *, image_keys, num_actions: int, action_distribution=None):
        self.num_actions = num_actions
        self.action_distribution = action_distribution  # None: a softmax over the logits
        self._convs = {
            key: [layers.Conv2D(16, 3, activation="relu"), layers.Flatten()]
            for key in sorted(image_keys)
        }
        self._hidden = layers.Dense(64, activation="relu")
        self._policy = layers.Dense(num_actions)
        self._baseline = layers.Dense(1)

    def initial_state(self, batch_size):
        return ()  # feed-forward

    def build(self, observation_shape):
        zeros = {key: tf.zeros([1, *shape]) for key, shape in observation_shape.items()}
        self._network(zeros)

    def _network(self, observation):
        """`{key: [N, ...]}` -> policy logits `[N, A]`, baseline `[N]`."""
        features = []
        for key in sorted(observation):  # a fixed order: the Dense layers' inputs line up
            x = tf.cast(observation[key], tf.float32)
            if key in self._convs:
                x = x / 255.0  # uint8 pixels (MiniGrid's planes are 0 or 255)
                for layer in self._convs[key]:
                    x = layer(x)
            features.append(x)
        hidden = self._hidden(tf.concat(features, axis=-1))
        return self._policy(hidden), tf.squeeze(self._baseline(hidden), -1)

    def step(self, inputs, state):
        logits, baseline = self._network(inputs.observation)
        return AgentOutput(logits, baseline), state

    def unroll(self, inputs, state):
        # Time folded into the batch, part by part: [T+1, B', ...] -> [(T+1) * B', ...].
        shape = tf.shape(inputs.prev_reward)
        folded = {
            key: tf.reshape(part, [-1, *part.shape[2:]]) for key, part in inputs.observation.items()
        }
        logits, baseline = self._network(folded)
        return AgentOutput(
            tf.reshape(logits, [shape[0], shape[1], self.num_actions]),
            tf.reshape(baseline, shape),
        ), state

    @property
    def trainable_variables(self):
        network = [*(layer for conv in self._convs.values() for layer in conv)]
        network += [self._hidden, self._policy, self._baseline]
        return [v for layer in network for v in layer.trainable_variables]

    def get_weights(self):
        return [v.numpy() for v in self.trainable_variables]

    def set_weights(self, weights):
        for variable, value in zip(self.trainable_variables, weights, strict=True):
            variable.assign(value)


# --8<-- [end:agent]


# --8<-- [start:factory]
def make_agent(
    *, observation_shape, num_actions: int, action_distribution=None
) -> ImageAndVectorsAgent:
    """The `--agent` factory. `observation_shape` is a dict of shapes for a nest."""
    if not isinstance(observation_shape, Mapping):
        raise ValueError(
            f"this example needs a nest of observations, got shape {observation_shape}"
        )
    images = [key for key, shape in observation_shape.items() if len(shape) == 3]
    return ImageAndVectorsAgent(
        image_keys=images, num_actions=num_actions, action_distribution=action_distribution
    )


# --8<-- [end:factory]
