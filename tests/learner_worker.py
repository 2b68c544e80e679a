"""Runs a few Learner steps on N logical CPU devices and prints the results as JSON.

The device count is fixed when TensorFlow initialises, so tests/test_learner.py
runs `python learner_worker.py N` in a fresh process and compares what it prints
with the same case run in the test process on one device (`run_case` is shared).
Nothing here asserts.
"""

import json
import sys

import numpy as np
from random_unrolls import random_unroll

from impala_rep import Replicator

T, B, A, OBS = 5, 4, 3, 2
STEPS = 3


class OffsetAgent:
    """An MLPAgent whose recurrent state `{"offset": [B, OBS]}` is added to every observation.

    Feed-forward except for the state, which exercises the learner's splitting
    of `initial_state` `[B, ...]` leaves over replicas: a column that got
    another column's state would change the loss.
    """

    def __init__(self, **kwargs):
        from impala_rep.agent import MLPAgent

        self._mlp = MLPAgent(**kwargs)
        self.num_actions = self._mlp.num_actions

    def initial_state(self, batch_size):
        return {"offset": np.zeros((batch_size, OBS), np.float32)}

    def build(self, observation_shape):
        self._mlp.build(observation_shape)

    def step(self, inputs, state):
        return self._mlp.step(
            inputs._replace(observation=inputs.observation + state["offset"]), state
        )

    def unroll(self, inputs, state):
        shifted = inputs.observation + state["offset"][None]
        return self._mlp.unroll(inputs._replace(observation=shifted), state)

    @property
    def trainable_variables(self):
        return self._mlp.trainable_variables

    def get_weights(self):
        return self._mlp.get_weights()

    def set_weights(self, weights):
        self._mlp.set_weights(weights)


CASES = ("rmsprop", "adam", "sgd", "normalized", "nest")
# The "nest" case's observations: an image and a vector (`impala_rep.observation_nest`).
NEST_SHAPE = {"image": (4, 4, 2), "position": (OBS,)}


def make_nest_batch(seed=0):
    """A random batch of nested observations: uint8 images beside float vectors."""
    batch = random_unroll(T=T, B=B, obs_size=OBS, num_actions=A, seed=seed)
    images = np.random.default_rng(seed + 100).integers(0, 256, (T + 1, B, 4, 4, 2), np.uint8)
    return batch._replace(observations={"image": images, "position": batch.observations})


def make_batch(seed=0):
    """A random batch whose recurrent state exercises the state splitting."""
    return random_unroll(
        T=T,
        B=B,
        obs_size=OBS,
        num_actions=A,
        seed=seed,
        initial_state=lambda rng: {"offset": rng.normal(size=(B, OBS)).astype(np.float32)},
    )


def run_case(replicator, optimizer):
    """STEPS learner steps; returns weights and metrics.

    optimizer "rmsprop": the default RMSProp with a large learning rate and a
    max_grad_norm below the gradient's norm, so the weights move visibly and
    clipping acts on every step; "adam": Adam, the same way. "sgd": plain SGD
    without clipping, whose update is proportional to the gradient, so its scale
    shows in the weights. "normalized": RMSProp as above with the advantages
    standardised over the batch (a cross-replica mean and variance). "nest": RMSProp as
    above on nested observations (`NEST_SHAPE`), each replica's share of every part.
    """
    import tensorflow as tf

    from impala_rep.config import LossConfig, OptimizerConfig
    from impala_rep.learner.learner import Learner
    from impala_rep.networks import NetworkAgent

    loss = LossConfig(normalize_advantages=optimizer == "normalized")
    if optimizer in ("rmsprop", "adam", "normalized", "nest"):
        settings = OptimizerConfig(
            optimizer="adam" if optimizer == "adam" else "rmsprop",
            learning_rate=0.05,
            max_grad_norm=1.0,
        )
        make_optimizer = None
    else:
        settings = OptimizerConfig(max_grad_norm=None)
        make_optimizer = lambda: tf.keras.optimizers.SGD(0.02)  # noqa: E731
    if optimizer == "nest":
        agent = NetworkAgent(num_actions=A, torso="minatar", image_keys=("image",))
        shape, batches = NEST_SHAPE, [make_nest_batch(seed) for seed in range(STEPS)]
    else:
        agent = OffsetAgent(num_actions=A, hidden_sizes=(8,))
        shape, batches = (OBS,), [make_batch(seed) for seed in range(STEPS)]
    learner = Learner(
        agent=agent,
        replicator=replicator,
        observation_shape=shape,
        total_steps=10,
        optimizer=settings,
        loss=loss,
        make_optimizer=make_optimizer,
        loss_grad_norms=True,  # each part's gradient norm, compared across replica counts too
    )
    rng = np.random.default_rng(1)
    initial = [
        rng.normal(scale=0.5, size=w.shape).astype(np.float32) for w in learner.agent.get_weights()
    ]
    learner.agent.set_weights(initial)
    metrics = [learner.step(batch) for batch in batches]
    strategy = replicator.strategy
    return {
        "num_replicas": replicator.num_replicas,
        "initial": [w.tolist() for w in initial],
        "weights": [w.tolist() for w in learner.get_weights()[1]],
        # [variable][replica] -> values: every replica's copy.
        "replicas": [
            [np.asarray(part).tolist() for part in strategy.experimental_local_results(v.value)]
            for v in learner.agent.trainable_variables
        ],
        "metrics": metrics,
        "num_steps": learner.num_steps,
    }


def main(n):
    replicator = Replicator(f"cpu:{n}")
    result = {name: run_case(replicator, name) for name in CASES}
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main(int(sys.argv[1]))
