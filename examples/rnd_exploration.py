"""Exploration by random network distillation, through the public `--agent` and `--loss` hooks.

    .venv/bin/python examples/rnd_exploration.py                       # MountainCar-v0, 1M frames
    .venv/bin/python examples/rnd_exploration.py --env Acrobot-v1 --seed 2
    .venv/bin/impala-rep train --env MountainCar-v0 \\
        --agent examples/rnd_exploration.py:make_agent --loss examples/rnd_exploration.py:rnd_loss

MountainCar-v0 pays -1 a step until the car reaches the flag, which near-random play almost
never does: with default flags every episode of 1M frames runs to the 200-step limit, and
there is nothing to learn from (README, "Learning per frame"). Random network distillation
(Burda et al. 2019, "Exploration by Random Network Distillation") adds a bonus for novel
observations:

- `RNDAgent` is the built-in MLP agent plus two networks on the same (bounds-scaled)
  observations: a *target*, random and fixed (`non_trainable_variables`, seeded, so it is
  the same in every process and after a resume), and a *predictor* trained to match it.
  The predictor's error is large on observations unlike those it was trained on.
- `rnd_loss` computes that error on each next observation `obs[t+1]`, centres it on the
  whole batch's mean (every replica's shard together), and adds `intrinsic_cost` times it
  to the rewards V-trace sees; the predictor's squared error joins the loss. Centred, the
  bonus has mean 0: it steers towards novel states without paying the agent to make its
  episodes longer or shorter. Not divided by its spread, it fades as the predictor learns
  the states the agent visits, so the task's own reward decides the final policy. A step
  that ends an episode gets none: its `obs[t+1]` is the next episode's (familiar) first
  observation, and on these tasks the end is the success.

This is the episodic, single-value-head simplification of RND (the paper keeps a second
value head for non-episodic intrinsic returns, and divides the bonus by a running standard
deviation of the intrinsic returns). An earlier version standardised the bonus per batch, so
it never faded: MountainCar then stalled at -113 to -124 (README). Actors only run the
policy: the predictor's weights travel with the agent's but are not used there.
Measured: README, "Exploration: random network distillation (an example)".
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

from impala_rep import LossOutput, MLPAgent, TrainConfig, all_reduce, describe_env, impala_loss_fn, train
from impala_rep.agent import assign_weights, bounds_normalization, observation_scaling, weights_of

# Per unit of the predictor's mean squared error (1e-4 to 1e-5 on MountainCar's bounds-scaled
# inputs): on MountainCar the bonus's spread was 0.008 a step at 40k frames and 0.0006 by
# 640k. Chosen once, then measured on three seeds (README).
INTRINSIC_COST = 100.0
PREDICTOR_COST = 1.0   # the predictor's squared error, summed over the batch like IMPALA's terms
FEATURES = 32          # the target's output width


class RNDAgent:
    """The built-in MLP agent (`step`, `unroll` unchanged) with RND's target and predictor.

    Implements `impala_rep.Agent`; `rnd_error(observations [N, D]) -> [N]` is the
    predictor's mean squared error against the target per observation.
    """

    def __init__(self, *, num_actions: int, observation_normalization=None):
        self.num_actions = num_actions
        self._policy = MLPAgent(num_actions=num_actions,
                                observation_normalization=observation_normalization)
        self._offset, self._scale = (observation_scaling(*observation_normalization)
                                     if observation_normalization is not None else (0.0, 1.0))
        dense = tf.keras.layers.Dense

        def fixed(seed):  # the same random target in every process, and after a resume
            return tf.keras.initializers.Orthogonal(gain=np.sqrt(2), seed=seed)

        self._target = [dense(64, "relu", kernel_initializer=fixed(1), trainable=False, name="target_0"),
                        dense(64, "relu", kernel_initializer=fixed(2), trainable=False, name="target_1"),
                        dense(FEATURES, kernel_initializer=fixed(3), trainable=False, name="target_2")]
        self._predictor = [dense(64, "relu", name="predictor_0"), dense(64, "relu", name="predictor_1"),
                           dense(FEATURES, name="predictor_2")]

    def initial_state(self, batch_size: int) -> tuple:
        return ()

    def build(self, observation_shape: Sequence[int]) -> None:
        """Creates every variable (the learner calls it inside the Replicator's scope)."""
        self._policy.build(observation_shape)
        self.rnd_error(tf.zeros([1, *observation_shape]))

    def step(self, inputs, state):
        """The built-in MLP's policy and value: RND changes only what the learner optimises."""
        return self._policy.step(inputs, state)

    def unroll(self, inputs, state):
        return self._policy.unroll(inputs, state)

    def rnd_error(self, observations: tf.Tensor) -> tf.Tensor:
        """`[N, D]` observations -> `[N]`: the predictor's mean squared error against the target;
        gradients reach the predictor only."""
        x = tf.reshape(tf.cast(observations, tf.float32), [tf.shape(observations)[0], -1])
        x = (x - self._offset) * self._scale
        target, prediction = x, x
        for layer in self._target:
            target = layer(target)
        for layer in self._predictor:
            prediction = layer(prediction)
        return tf.reduce_mean(tf.square(prediction - tf.stop_gradient(target)), axis=-1)

    @property
    def trainable_variables(self) -> list[tf.Variable]:
        return [*self._policy.trainable_variables,
                *(v for layer in self._predictor for v in layer.trainable_variables)]

    @property
    def non_trainable_variables(self) -> list[tf.Variable]:
        return [v for layer in self._target for v in layer.variables]

    def get_weights(self) -> list[np.ndarray]:
        return weights_of(self.trainable_variables)

    def set_weights(self, weights: Sequence[np.ndarray]) -> None:
        assign_weights(self.trainable_variables, weights)


def make_agent(*, observation_shape: Sequence[int], num_actions: int,
               env_id: str = "MountainCar-v0") -> RNDAgent:
    """The `--agent` factory. The networks see observations scaled from `env_id`'s declared
    bounds, as `train` scales the built-in MLP's (MountainCar's velocity spans +-0.07):
    bind another env with `functools.partial(make_agent, env_id=...)`, as `main` does."""
    if len(observation_shape) != 1:
        raise ValueError(f"this example needs vector observations, got {tuple(observation_shape)}")
    bounds = describe_env(env_id).observation_bounds
    if bounds is not None and len(bounds[0]) != observation_shape[0]:
        raise ValueError(f"make_agent scales observations with {env_id!r}'s bounds ({len(bounds[0])} "
                         f"values) but the env has {observation_shape[0]}: bind env_id= to your env "
                         "(examples/rnd_exploration.py --env ENV does)")
    return RNDAgent(num_actions=num_actions,
                    observation_normalization=None if bounds is None else bounds_normalization(*bounds))


def rnd_loss(*, agent, config, actions, inputs, rewards, intrinsic_cost: float = INTRINSIC_COST,
             predictor_cost: float = PREDICTOR_COST, **tensors):
    """The IMPALA loss on rewards plus RND's bonus, plus the predictor's error.

    Same keywords as `impala_rep.impala_loss_fn` (impala_rep/loss_fn.py); `rewards` are
    `[T, B']`, `inputs.observation` `[T+1, B', D]`.
    """
    observations = inputs.observation
    t, b = tf.shape(actions)[0], tf.shape(actions)[1]
    following = tf.reshape(observations[1:], tf.concat([[t * b], tf.shape(observations)[2:]], 0))
    error = tf.reshape(agent.rnd_error(following), [t, b])
    novelty = tf.stop_gradient(error)
    # The mean of the whole batch, all replicas' shards together (equal shards: the mean of
    # their means), so N replicas compute what one would.
    bonus = intrinsic_cost * (novelty - all_reduce(tf.reduce_mean(novelty), op="mean"))
    # obs[t+1] of a step that ended an episode is the next episode's first observation.
    ended = inputs.first[1:]
    bonus = tf.where(ended, tf.zeros_like(bonus), bonus)
    impala = impala_loss_fn(agent=agent, config=config, actions=actions, inputs=inputs,
                            rewards=rewards + bonus, **tensors)
    predictor_loss = predictor_cost * tf.reduce_sum(error)  # a sum over the shard, as IMPALA's
    total = impala.loss + predictor_loss
    return LossOutput(total, sums={**impala.sums, "loss": tf.stop_gradient(total),
                                   "rnd_loss": tf.stop_gradient(predictor_loss)},
                      means={**impala.means, "rnd_error": tf.stop_gradient(tf.reduce_mean(error))},
                      terms={**impala.terms, "rnd_loss": predictor_loss})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="MountainCar-v0")
    parser.add_argument("--total-frames", type=int, default=1_000_000)
    parser.add_argument("--intrinsic-cost", type=float, default=INTRINSIC_COST)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--logdir", default=None)
    parser.add_argument("--ray-address", default=None, help="join this Ray cluster instead of starting one")
    parser.add_argument("--launcher", default="ray", choices=["ray", "local"])
    args = parser.parse_args(argv)
    try:
        config = TrainConfig.from_keys(dict(env=args.env, total_frames=args.total_frames,
                                            seed=args.seed, logdir=args.logdir,
                                            ray_address=args.ray_address, launcher=args.launcher))
    except ValueError as err:
        parser.error(str(err))
    spec = describe_env(config.env.id)
    # Pickled to the learner and actor processes; defined in this script (__main__),
    # cloudpickle sends them by value.
    agent = functools.partial(make_agent, observation_shape=spec.observation_shape,
                              num_actions=spec.num_actions, env_id=config.env.id)
    result = train(config, agent=agent,
                   loss=functools.partial(rnd_loss, intrinsic_cost=args.intrinsic_cost))
    print(f"final mean return (last 100 episodes): {result.episode_return_mean}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
