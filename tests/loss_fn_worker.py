"""Runs the custom-agent example's agent and loss in a Learner on N logical CPU devices.

The device count is fixed when TensorFlow initialises, so tests/test_loss_fn.py runs
`python loss_fn_worker.py N` in a fresh process and compares what it prints with the
same case on one device in the test process (`run_case` is shared). Nothing here asserts.
"""

import functools
import json
import pathlib
import sys

import numpy as np
from random_unrolls import random_unroll

from impala_rep import Replicator

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "examples"))

T, B, A, OBS = 5, 4, 2, 4
STEPS = 3


def run_case(replicator):
    """STEPS SGD steps of the example's batch-norm agent with its L2-regularised loss."""
    import tensorflow as tf

    from custom_agent import l2_regularised_loss, make_agent
    from impala_rep import Learner, OptimizerConfig

    learner = Learner(agent=make_agent(observation_shape=(OBS,), num_actions=A), replicator=replicator,
                      observation_shape=(OBS,), total_steps=10,
                      optimizer=OptimizerConfig(max_grad_norm=None),
                      make_optimizer=lambda: tf.keras.optimizers.SGD(0.02),
                      # a large L2 cost, so that counting it once per replica would show
                      loss_fn=functools.partial(l2_regularised_loss, l2_cost=0.1))
    rng = np.random.default_rng(1)
    trainable = len(learner.agent.trainable_variables)
    initial = [rng.normal(scale=0.5, size=w.shape).astype(np.float32) if i < trainable else w
               for i, w in enumerate(learner.agent.get_weights())]
    learner.agent.set_weights(initial)
    metrics = [learner.step(random_unroll(T=T, B=B, obs_size=OBS, num_actions=A, seed=seed))
               for seed in range(STEPS)]
    return {
        "num_replicas": replicator.num_replicas,
        "initial": [w.tolist() for w in initial],
        # trainable weights, then the batch-norm moving mean and variance
        "weights": [w.tolist() for w in learner.get_weights()[1]],
        "num_trainable": trainable,
        "metrics": metrics,
    }


if __name__ == "__main__":
    print("RESULT " + json.dumps(run_case(Replicator(f"cpu:{int(sys.argv[1])}"))))
