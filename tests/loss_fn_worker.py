"""Runs an example's agent and loss in a Learner on N logical CPU devices.

The device count is fixed when TensorFlow initialises, so tests/test_loss_fn.py runs
`python loss_fn_worker.py N CASE [CASE ...]` in a fresh process (one for every case: each
process pays TensorFlow's import) and compares what it prints, `{case: result}`, with the
same cases on one device in the test process (`run_case` is shared). Nothing here
asserts. Cases (`CASES`): the custom-agent example's batch-norm agent with its
L2-regularised loss, the MLP agent with RND's networks and bonus (impala_rep/rnd.py), on
every batch or only on constant step costs, with PopArt, and with observation normalisation.
"""

import functools
import json
import pathlib
import sys

import numpy as np
from random_unrolls import random_unroll

from impala_rep import Replicator

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "examples"))

T, B = 5, 4
STEPS = 3


def _custom_agent():
    from custom_agent import l2_regularised_loss, make_agent

    # A large L2 cost, so that counting it once per replica would show.
    return make_agent, functools.partial(l2_regularised_loss, l2_cost=0.1), (4,), 2, 0.5


def _make_rnd_agent(*, observation_shape, num_actions):
    from impala_rep import MLPAgent
    from impala_rep.observation_scaling import bounds_normalization
    from impala_rep.rnd import RNDAgent

    # MountainCar's declared bounds: random observations become large, so the weights
    # start smaller.
    normalization = bounds_normalization((-1.2, -0.07), (0.6, 0.07))
    return RNDAgent(
        MLPAgent(num_actions=num_actions, observation_normalization=normalization),
        observation_normalization=normalization,
    )


def _rnd():
    from impala_rep.rnd import rnd_loss_fn

    # A large bonus weight, so that centring it per replica instead of globally would show.
    return _make_rnd_agent, functools.partial(rnd_loss_fn, rnd_cost=0.5), (2,), 3, 0.05


def _rnd_step_costs():
    from impala_rep.rnd import rnd_loss_fn

    return (
        _make_rnd_agent,
        functools.partial(rnd_loss_fn, rnd_cost=0.5, step_costs_only=True),
        (2,),
        3,
        0.05,
    )


def _step_costs(batch, seed):
    """The env's rewards a constant -1 a step: in every column of the first batch (the bonus
    on), in the first half of the second (off: decided on the whole batch, never per shard),
    nowhere in the third (off)."""
    columns = {0: batch.prev_rewards.shape[1], 1: batch.prev_rewards.shape[1] // 2}.get(seed, 0)
    prev_rewards = batch.prev_rewards.copy()
    prev_rewards[1:, :columns] = np.where(batch.first[1:, :columns], 0.0, -1.0)
    return batch._replace(prev_rewards=prev_rewards)


def _make_popart_agent(*, observation_shape, num_actions):
    from impala_rep import MLPAgent
    from impala_rep.popart import PopArtAgent

    return PopArtAgent(MLPAgent(num_actions=num_actions))


def _popart():
    from impala_rep.popart import popart_loss_fn

    # A large step size, so that statistics of one shard instead of the batch would show.
    return _make_popart_agent, functools.partial(popart_loss_fn, step_size=0.1), (4,), 2, 0.5


def _make_normalizing_agent(*, observation_shape, num_actions):
    from impala_rep import MLPAgent
    from impala_rep.observation_normalization import NormalizingAgent

    return NormalizingAgent(MLPAgent(num_actions=num_actions), clip=10.0)


def _observation_normalization():
    from impala_rep.observation_normalization import normalizing_loss_fn

    return _make_normalizing_agent, normalizing_loss_fn, (3,), 2, 0.05


def _offset_observations(batch, seed):
    """Observations far from the identity's mean and scale, and each shard's unlike the
    other's (columns in the second half shifted): moments of one shard would show."""
    observations = batch.observations * np.array([5.0, 0.5, 2.0]) + np.array([10.0, -3.0, 0.0])
    observations[:, batch.observations.shape[1] // 2 :] += 4.0 * (seed + 1)
    return batch._replace(observations=observations.astype(np.float32))


CASES = {
    "custom_agent": _custom_agent,
    "rnd": _rnd,
    "rnd_step_costs": _rnd_step_costs,
    "popart": _popart,
    "observation_normalization": _observation_normalization,
}
BATCHES = {
    "rnd_step_costs": _step_costs,
    "observation_normalization": _offset_observations,
}  # the rest train on random unrolls as they are


def run_case(replicator, case="custom_agent"):
    """STEPS SGD steps of `case`'s agent and loss from random trainable weights."""
    import tensorflow as tf

    from impala_rep import Learner, OptimizerConfig

    make_agent, loss_fn, observation_shape, num_actions, weight_scale = CASES[case]()
    learner = Learner(
        agent=make_agent(observation_shape=observation_shape, num_actions=num_actions),
        replicator=replicator,
        observation_shape=observation_shape,
        total_steps=10,
        optimizer=OptimizerConfig(max_grad_norm=None),
        make_optimizer=lambda: tf.keras.optimizers.SGD(0.02),
        loss_fn=loss_fn,
    )
    rng = np.random.default_rng(1)
    # Every trainable variable, the ones the learner does not publish (RND's predictor) too:
    # Keras' own initial values differ between processes.
    trainable = len(learner.agent.trainable_variables)
    initial = [
        rng.normal(scale=weight_scale, size=v.shape).astype(np.float32)
        for v in learner.agent.trainable_variables
    ]
    for variable, value in zip(learner.agent.trainable_variables, initial):
        variable.assign(value)
    batch_of = BATCHES.get(case, lambda batch, seed: batch)
    metrics = [
        learner.step(
            batch_of(
                random_unroll(
                    T=T, B=B, obs_size=observation_shape[0], num_actions=num_actions, seed=seed
                ),
                seed,
            )
        )
        for seed in range(STEPS)
    ]
    return {
        "num_replicas": replicator.num_replicas,
        "initial": [w.tolist() for w in initial],
        # trainable weights, then any non-trainable state the agent publishes (batch norm's
        # moving mean and variance)
        "weights": [w.tolist() for w in learner.get_weights()[1]],
        # what stays in the learner (RND's predictor): trained, checkpointed, not published
        "unpublished": [
            v.numpy().tolist() for v in getattr(learner.agent, "predictor_variables", ())
        ],
        "num_trainable": trainable,
        "metrics": metrics,
    }


if __name__ == "__main__":
    replicator = Replicator(f"cpu:{int(sys.argv[1])}")
    print("RESULT " + json.dumps({case: run_case(replicator, case) for case in sys.argv[2:]}))
