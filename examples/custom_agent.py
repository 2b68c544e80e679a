"""A user-defined agent and loss, trained by impala_rep's Ray actors and replicated learner.

    .venv/bin/python examples/custom_agent.py                 # CartPole, learner on cpu:2
    .venv/bin/python examples/custom_agent.py --help          # smaller or longer runs

The same agent and loss run through the command line too:

    .venv/bin/impala-rep train --learner-devices cpu:2 \\
        --agent examples/custom_agent.py:make_agent \\
        --loss examples/custom_agent.py:l2_regularised_loss

What is "custom" here (docs/custom_agent.md walks through it):

- `BatchNormMLPAgent`, its own network: the built-in MLP's torso and policy head, and
  a value head Dense -> CrossReplicaBatchNorm -> ReLU -> Dense. Only the learner uses
  the baseline, so there (`unroll`) the batch norm normalises with the statistics of
  the GLOBAL batch, all-reduced over the replicas, and 1 and 2 replicas compute the
  same update; the policy the learner trains is exactly the one the actors run
  (`step`). Batch norm in the policy itself did not learn CartPole reliably, with
  batch statistics in the learner or with moving statistics everywhere:
  docs/custom_agent.md has the measurements.
- `l2_regularised_loss`, its own loss: the IMPALA loss plus weight decay, sized per
  environment step against IMPALA's summed loss and divided by the replica count so
  that it counts once however many replicas share the batch.
- `make_agent`, the factory `--agent` calls in every process.
"""

import argparse
import functools
import sys
from collections.abc import Sequence

import numpy as np

if __name__ == "__main__":
    # Run as a script: TensorFlow's start-up notes (CUDA, oneDNN) are discarded, as
    # `impala-rep train` does; this must come before TensorFlow's first import.
    from impala_rep import quiet_native_logs

    quiet_native_logs(verbose=False)

import tensorflow as tf  # noqa: E402  (after the quieting above)

from impala_rep import (
    AgentOutput,
    CrossReplicaBatchNorm,
    LossOutput,
    TrainConfig,
    describe_env,
    impala_loss_fn,
    num_replicas,
    train,
)

LEARNING_RATE = 5e-3  # RMSProp, as for the built-in CartPole MLP
L2_COST = 1e-4  # weight decay per environment step (the IMPALA loss sums over T*B steps)


# --8<-- [start:agent]
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
        # The torso and policy head: the built-in MLP's (impala_rep.MLPAgent).
        self._torso = [
            tf.keras.layers.Dense(hidden_size, activation="relu", name=f"torso_{i}")
            for i in range(2)
        ]
        self._policy = tf.keras.layers.Dense(num_actions, name="policy_logits")
        # The value head: Dense -> CrossReplicaBatchNorm -> ReLU -> Dense. Only the learner
        # uses the baseline, so this batch norm can normalise with batch statistics there.
        self._value_hidden = tf.keras.layers.Dense(hidden_size, use_bias=False, name="value_hidden")
        self._norm = CrossReplicaBatchNorm(momentum=0.99, name="value_norm")
        self._baseline = tf.keras.layers.Dense(1, name="baseline")
        self._layers = [*self._torso, self._policy, self._value_hidden, self._norm, self._baseline]

    def initial_state(self, batch_size: int) -> tuple:
        return ()

    def build(self, observation_shape: Sequence[int]) -> None:
        if len(observation_shape) != 1:
            raise ValueError(
                f"BatchNormMLPAgent needs vector observations [D], got {tuple(observation_shape)}"
            )
        self._forward(tf.zeros([1, *observation_shape], tf.float32), training=False)

    # step, unroll and _forward run inside tf.function, where AutoGraph re-reads their
    # source. This class travels to the workers by value (it is defined in __main__ or
    # a file named by --agent), with only the globals its code uses, so these methods
    # carry no annotations naming other globals (AutoGraph would not find them).

    def _forward(self, observation, *, training):
        """observation `[N, D]` -> AgentOutput: logits `[N, A]`, baseline `[N]`.

        The policy does not depend on `training`; only the baseline's batch norm does
        (batch statistics with `training=True`, moving statistics otherwise).
        """
        x = tf.cast(observation, tf.float32)
        tf.debugging.assert_rank(x, 2, message="observations must be [N, D]")
        for layer in self._torso:
            x = layer(x)
        v = tf.nn.relu(self._norm(self._value_hidden(x), training=training))
        return AgentOutput(self._policy(x), tf.squeeze(self._baseline(v), axis=-1))

    def step(self, inputs, state):
        """AgentInputs of `[B, ...]` -> (AgentOutput of `[B, ...]`, state)."""
        # Actors: one device, no strategy. They use only the policy logits; the baseline
        # (moving statistics) is there for the protocol and for evaluation.
        return self._forward(inputs.observation, training=False), state

    def unroll(self, inputs, state):
        """AgentInputs of `[T, B, ...]` -> (AgentOutput of `[T, B, ...]`, state)."""
        # Learner: fold time into batch; the baseline's batch norm normalises with the
        # statistics of the whole GLOBAL batch (all-reduced over the replicas) and
        # updates the moving statistics. The policy is the function the actors run.
        observation = tf.convert_to_tensor(inputs.observation)
        t, b = tf.shape(observation)[0], tf.shape(observation)[1]
        flat = tf.reshape(observation, [t * b, observation.shape[-1]])
        out = self._forward(flat, training=True)
        return AgentOutput(
            tf.reshape(out.policy_logits, [t, b, self.num_actions]),
            tf.reshape(out.baseline, [t, b]),
        ), state

    @property
    def trainable_variables(self) -> list[tf.Variable]:
        return [v for layer in self._layers for v in layer.trainable_variables]

    @property
    def decayed_kernels(self) -> list[tf.Variable]:
        """The kernels the L2 penalty applies to: all but the one feeding the batch norm.

        Batch norm undoes any scaling of that kernel, so decay would only shrink it (and
        its gradient, which grows as 1 / its norm, with it).
        """
        return [layer.kernel for layer in (*self._torso, self._policy, self._baseline)]

    @property
    def non_trainable_variables(self) -> list[tf.Variable]:
        """The batch-norm moving statistics: the learner checkpoints them with the weights."""
        return [self._norm.moving_mean, self._norm.moving_variance]

    def get_weights(self) -> list[np.ndarray]:
        # What the learner publishes to the actors: the trainable weights AND the
        # batch-norm moving statistics `step` normalises the baseline's layer with.
        return [
            np.asarray(v.numpy())
            for v in [*self.trainable_variables, *self.non_trainable_variables]
        ]

    def set_weights(self, weights: Sequence[np.ndarray]) -> None:
        variables = [*self.trainable_variables, *self.non_trainable_variables]
        if len(weights) != len(variables):
            raise ValueError(f"expected {len(variables)} weight arrays, got {len(weights)}")
        for variable, value in zip(variables, weights):
            variable.assign(value)


# --8<-- [end:agent]


# --8<-- [start:factory]
def make_agent(*, observation_shape: Sequence[int], num_actions: int) -> BatchNormMLPAgent:
    """The `--agent` factory: a new, unbuilt agent (called once per learner and actor process)."""
    if len(observation_shape) != 1:
        raise ValueError(
            f"this example needs vector observations, got shape {tuple(observation_shape)}"
        )
    return BatchNormMLPAgent(num_actions=num_actions)


# --8<-- [end:factory]


# --8<-- [start:loss]
def l2_regularised_loss(*, agent, config, actions, l2_cost: float = L2_COST, **tensors):
    """The IMPALA loss plus weight decay `l2_cost` per environment step on `decayed_kernels`.

    Same keywords as `impala_rep.impala_loss_fn` (see impala_rep/loss_fn.py). The IMPALA
    loss is a SUM over the T*B steps of the global batch, so weight decay `l2_cost` as
    you would set it for a per-step MEAN loss becomes `l2_cost * T * B * sum(w^2) / 2`
    here. The learner sums each replica's loss over the replicas, so this per-model
    penalty is divided by the replica count (`tf.nn.scale_regularization_loss`): it then
    counts once, and 1 or 2 replicas give the same update.
    """
    impala = impala_loss_fn(agent=agent, config=config, actions=actions, **tensors)
    global_steps = tf.cast(tf.size(actions) * num_replicas(), tf.float32)  # T * B
    l2 = l2_cost * global_steps * tf.add_n([tf.nn.l2_loss(k) for k in agent.decayed_kernels])
    total = impala.loss + tf.nn.scale_regularization_loss(l2)
    # "loss" is in `sums` (summed over replicas), so report this replica's share of the
    # total; "l2_loss" is in `means` (averaged over replicas): the penalty itself.
    return LossOutput(
        total,
        sums={**impala.sums, "loss": tf.stop_gradient(total)},
        means={**impala.means, "l2_loss": tf.stop_gradient(l2)},
    )


# --8<-- [end:loss]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument(
        "--learner-devices", default="cpu:2", help="Replicator device spec (default: cpu:2)"
    )
    parser.add_argument("--total-frames", type=int, default=1_000_000)
    parser.add_argument("--num-actors", type=int, default=2)
    parser.add_argument("--envs-per-actor", type=int, default=64)
    parser.add_argument("--unroll-length", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=LEARNING_RATE)
    parser.add_argument(
        "--l2-cost", type=float, default=L2_COST, help="weight decay per environment step"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--logdir", default=None)
    parser.add_argument(
        "--ray-address", default=None, help="join this Ray cluster instead of starting one"
    )
    args = parser.parse_args(argv)
    try:
        # Keys are the command line's flags without dashes.
        config = TrainConfig.from_keys(
            dict(
                env=args.env,
                learner_devices=args.learner_devices,
                total_frames=args.total_frames,
                num_actors=args.num_actors,
                envs_per_actor=args.envs_per_actor,
                unroll_length=args.unroll_length,
                batch_size=args.batch_size,
                learning_rate=args.learning_rate,
                seed=args.seed,
                logdir=args.logdir,
                ray_address=args.ray_address,
            )
        )
    except ValueError as err:
        parser.error(str(err))
    # --8<-- [start:train]
    spec = describe_env(config.env.id, observation_keys=config.env.observation_keys)
    # Both are pickled to the learner and actor processes. Defined in this script
    # (__main__), cloudpickle sends them by value: the workers need not import it.
    agent = functools.partial(
        make_agent, observation_shape=spec.observation_shape, num_actions=spec.num_actions
    )
    loss = functools.partial(l2_regularised_loss, l2_cost=args.l2_cost)
    result = train(config, agent=agent, loss=loss)
    # --8<-- [end:train]
    last = result.records[-1]
    print(
        f"custom agent: {result.learner_steps} learner steps on {config.learner.devices}, "
        f"final mean return {result.episode_return_mean}, last loss {last['loss']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
