"""A user-defined agent and loss, trained by impala_rep's Ray actors and replicated learner.

    .venv/bin/python examples/custom_agent.py                 # CartPole, learner on cpu:2
    .venv/bin/python examples/custom_agent.py --help          # smaller or longer runs

The same agent and loss run through the command line too:

    .venv/bin/impala-rep train --learner-devices cpu:2 \\
        --agent examples/custom_agent.py:make_agent --loss examples/custom_agent.py:l2_regularised_loss

What is "custom" here (docs/custom_agent.md walks through it):

- `BatchNormMLPAgent`, its own network: Dense -> CrossReplicaBatchNorm -> ReLU ->
  Dense -> ReLU -> policy and value heads. In the learner (`unroll`) the batch norm
  normalises with the statistics of the GLOBAL batch, all-reduced over the
  replicas, so 1 and 2 replicas compute the same update; in the actors (`step`,
  one device, no strategy) it uses the moving statistics, which travel to the
  actors with the weights (`get_weights` includes them).
- `l2_regularised_loss`, its own loss: the IMPALA loss plus an L2 weight penalty,
  divided by the replica count so that it counts once however many replicas
  share the batch.
- `make_agent`, the factory `--agent` calls in every process.
"""

import argparse
import functools
import os
import sys
from typing import Sequence

import numpy as np
import tensorflow as tf

from impala_rep import AgentOutput, CrossReplicaBatchNorm, TrainConfig, describe_env, impala_loss_fn, train

LEARNING_RATE = 5e-3  # RMSProp, as for the built-in CartPole MLP
L2_COST = 1e-4  # per unit of sum(w^2)/2; the IMPALA loss is a sum over T*B = 640 steps


class BatchNormMLPAgent:
    """A feed-forward agent for vector observations `[D]` with cross-replica batch norm.

    Implements the `impala_rep.Agent` protocol. Shapes: `step` takes `[B, D]`
    observations and returns logits `[B, A]`, baseline `[B]`; `unroll` takes
    `[T, B, D]` and returns `[T, B, A]`, `[T, B]`. No recurrent state (`()`).
    """

    def __init__(self, *, num_actions: int, hidden_size: int = 64):
        if num_actions < 1:
            raise ValueError(f"num_actions must be >= 1, got {num_actions}")
        self.num_actions = num_actions
        self._hidden = tf.keras.layers.Dense(hidden_size, use_bias=False, name="hidden_0")
        # momentum 0.9: the moving statistics follow the changing state distribution of
        # a learning policy within ~10 learner steps.
        self._norm = CrossReplicaBatchNorm(momentum=0.9, name="norm_0")
        self._hidden_1 = tf.keras.layers.Dense(hidden_size, activation="relu", name="hidden_1")
        self._policy = tf.keras.layers.Dense(num_actions, name="policy_logits")
        self._baseline = tf.keras.layers.Dense(1, name="baseline")
        self._layers = [self._hidden, self._norm, self._hidden_1, self._policy, self._baseline]

    def initial_state(self, batch_size: int) -> tuple:
        return ()

    def build(self, observation_shape: Sequence[int]) -> None:
        if len(observation_shape) != 1:
            raise ValueError(f"BatchNormMLPAgent needs vector observations [D], got {tuple(observation_shape)}")
        self._forward(tf.zeros([1, *observation_shape], tf.float32), training=False)

    # step, unroll and _forward run inside tf.function, where AutoGraph re-reads their
    # source. This class travels to the workers by value (it is defined in __main__ or
    # a file named by --agent), with only the globals its code uses, so these methods
    # carry no annotations naming other globals (AutoGraph would not find them).

    def _forward(self, observation, *, training):
        """observation `[N, D]` -> AgentOutput: logits `[N, A]`, baseline `[N]`."""
        x = tf.cast(observation, tf.float32)
        tf.debugging.assert_rank(x, 2, message="observations must be [N, D]")
        x = tf.nn.relu(self._norm(self._hidden(x), training=training))
        x = self._hidden_1(x)
        return AgentOutput(self._policy(x), tf.squeeze(self._baseline(x), axis=-1))

    def step(self, inputs, state):
        """AgentInputs of `[B, ...]` -> (AgentOutput of `[B, ...]`, state)."""
        # Actors: one device, no strategy; normalise with the learner's moving statistics.
        return self._forward(inputs.observation, training=False), state

    def unroll(self, inputs, state):
        """AgentInputs of `[T, B, ...]` -> (AgentOutput of `[T, B, ...]`, state)."""
        # Learner: fold time into batch; batch statistics over the whole global batch.
        observation = tf.convert_to_tensor(inputs.observation)
        t, b = tf.shape(observation)[0], tf.shape(observation)[1]
        flat = tf.reshape(observation, [t * b, observation.shape[-1]])
        out = self._forward(flat, training=True)
        return AgentOutput(tf.reshape(out.policy_logits, [t, b, self.num_actions]),
                           tf.reshape(out.baseline, [t, b])), state

    @property
    def trainable_variables(self) -> list[tf.Variable]:
        return [v for layer in self._layers for v in layer.trainable_variables]

    @property
    def decayed_kernels(self) -> list[tf.Variable]:
        """The kernels the L2 penalty applies to: all but the one feeding the batch norm.

        Batch norm undoes any scaling of that kernel, so decay would only shrink it, and
        its gradient (which grows as 1 / its norm) would swamp the global-norm clip.
        """
        return [layer.kernel for layer in (self._hidden_1, self._policy, self._baseline)]

    @property
    def _moving_statistics(self) -> list[tf.Variable]:
        return [self._norm.moving_mean, self._norm.moving_variance]

    def get_weights(self) -> list[np.ndarray]:
        # What the learner publishes to the actors: the trainable weights AND the
        # batch-norm moving statistics the actors normalise with.
        return [np.asarray(v.numpy()) for v in [*self.trainable_variables, *self._moving_statistics]]

    def set_weights(self, weights: Sequence[np.ndarray]) -> None:
        variables = [*self.trainable_variables, *self._moving_statistics]
        if len(weights) != len(variables):
            raise ValueError(f"expected {len(variables)} weight arrays, got {len(weights)}")
        for variable, value in zip(variables, weights):
            variable.assign(value)


def make_agent(*, observation_shape: Sequence[int], num_actions: int) -> BatchNormMLPAgent:
    """The `--agent` factory: a new, unbuilt agent (called once per learner and actor process)."""
    if len(observation_shape) != 1:
        raise ValueError(f"this example needs vector observations, got shape {tuple(observation_shape)}")
    return BatchNormMLPAgent(num_actions=num_actions)


def l2_regularised_loss(*, agent, hyperparams, l2_cost: float = L2_COST, **tensors):
    """The IMPALA loss plus `l2_cost * sum(w^2) / 2` over the agent's `decayed_kernels`.

    Same keywords as `impala_rep.impala_loss_fn` (see impala_rep/loss_fn.py). The
    learner sums each replica's loss over the replicas, so the per-model penalty is
    divided by the replica count (`tf.nn.scale_regularization_loss`): it then counts
    once, and 1 or 2 replicas give the same update.
    """
    loss, metrics = impala_loss_fn(agent=agent, hyperparams=hyperparams, **tensors)
    l2 = l2_cost * tf.add_n([tf.nn.l2_loss(k) for k in agent.decayed_kernels])
    total = loss + tf.nn.scale_regularization_loss(l2)
    # "loss" is summed over replicas for reporting, so report this replica's share too;
    # "l2_loss" is averaged over replicas: the penalty itself.
    return total, {**metrics, "loss": tf.stop_gradient(total), "l2_loss": tf.stop_gradient(l2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--learner-devices", default="cpu:2", help="Replicator device spec (default: cpu:2)")
    parser.add_argument("--total-frames", type=int, default=1_000_000)
    parser.add_argument("--num-actors", type=int, default=2)
    parser.add_argument("--envs-per-actor", type=int, default=64)
    parser.add_argument("--unroll-length", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=LEARNING_RATE)
    parser.add_argument("--l2-cost", type=float, default=L2_COST)
    parser.add_argument("--logdir", default=None)
    parser.add_argument("--ray-address", default=None, help="join this Ray cluster instead of starting one")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        config = TrainConfig(env=args.env, learner_devices=args.learner_devices,
                             total_frames=args.total_frames, num_actors=args.num_actors,
                             envs_per_actor=args.envs_per_actor, unroll_length=args.unroll_length,
                             batch_size=args.batch_size, learning_rate=args.learning_rate,
                             logdir=args.logdir, ray_address=args.ray_address)
    except ValueError as err:
        parser.error(str(err))
    spec = describe_env(config.env)
    # Both are pickled to the learner and actor processes. Defined in this script
    # (__main__), cloudpickle sends them by value: the workers need not import it.
    agent = functools.partial(make_agent, observation_shape=spec.observation_shape,
                              num_actions=spec.num_actions)
    loss = functools.partial(l2_regularised_loss, l2_cost=args.l2_cost)
    result = train(config, agent=agent, loss=loss)
    last = result.records[-1]
    print(f"custom agent: {result.learner_steps} learner steps on {config.learner_devices}, "
          f"final mean return {result.episode_return_mean}, last loss {last['loss']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
