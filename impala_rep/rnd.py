"""Random network distillation (Burda et al. 2019): a novelty bonus beside any agent.

`--rnd-cost C` (`LossConfig.rnd_cost`; auto: 10 for vector observations) turns it on; the
extension `impala_rep.extensions.RandomNetworkDistillation` wraps the run's agent in an
`RNDAgent` and its loss in `rnd_loss_fn`.
Vector observations only. By default (`--rnd-step-costs-only`) the bonus applies only to a batch
whose rewards are one constant cost per step (`step_cost_batch`: MountainCar's, Acrobot's),
where the task's reward says nothing until random play reaches the goal; elsewhere (CartPole's
survival reward, rewards that vary) a bonus on every batch competed with the task.

- `RNDAgent` composes the run's agent (built-in or the user's; acting, unrolling and the
  published weights are that agent's, unchanged) with two small networks on the same
  observations: a *target*, random and fixed (seeded, so every process and a resumed
  learner hold the same one; checkpointed as non-trainable state), and a *predictor*
  trained to match it. The predictor's error is large on observations unlike those it
  was trained on. Only the learner uses them: actors build them with the agent (two small
  MLPs) but never run them, and receive the agent's own weights.
- `novelty_bonus` turns the errors on each next observation into rewards: centred on
  the whole batch's mean (every replica's shard), so it steers towards novel states
  without paying for longer or shorter episodes; not divided by its spread, so it fades
  as the predictor learns the states the agent visits and the task's own reward decides
  the final policy; none on a step that ends an episode, whose next observation is the
  next episode's first (and on these tasks the end is the success).
- `rnd_loss_fn` adds `rnd_cost` times that bonus to the (scaled) rewards the run's loss
  sees and the predictor's squared error to the loss.

The episodic, single-value-head simplification of RND: the paper keeps a second value
head for non-episodic intrinsic returns and divides the bonus by a running standard
deviation of them. Not standardised here: a standardised bonus never fades, and with it
MountainCar stalled at about -120 (docs/notebook.md, "Exploration: random network distillation").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from impala_rep.agent import AgentInputs, flat_observations
from impala_rep.extensions import RandomNetworkDistillation
from impala_rep.loss_fn import LossOutput, impala_loss_fn
from impala_rep.losses import batch_mean
from impala_rep.observation_scaling import observation_scaling
from impala_rep.shapes import assert_shape

__all__ = [
    "RNDAgent",
    "novelty_bonus",
    "rnd_loss_fn",
    "step_cost_batch",
    "FEATURES",
    "HIDDEN",
    "METRICS",
]

# The metrics the loss adds to its base loss's, and what each means.
METRICS = RandomNetworkDistillation.metrics

FEATURES = 32  # the target's output width
HIDDEN = 64  # both networks' two hidden layers


class RNDAgent:
    """`policy` (any `impala_rep.Agent`) plus RND's fixed target and trained predictor.

    `novelty(observations [N, ...]) -> [N]`: the predictor's mean squared error against the
    target; gradients reach the predictor only. Observations are flattened and, given
    `observation_normalization=(mean, std)`, standardised as the built-in MLP's are.
    """

    def __init__(self, policy: Any, *, observation_normalization=None):
        self.policy = policy
        self.num_actions = policy.num_actions
        self.action_distribution = getattr(policy, "action_distribution", None)
        self._scaling = (
            observation_scaling(*observation_normalization)
            if observation_normalization is not None
            else None
        )
        dense = tf.keras.layers.Dense

        def fixed(seed):  # the same random target in every process, and after a resume
            return tf.keras.initializers.Orthogonal(gain=np.sqrt(2), seed=seed)

        self._target = [
            dense(
                HIDDEN, "relu", kernel_initializer=fixed(1), trainable=False, name="rnd_target_0"
            ),
            dense(
                HIDDEN, "relu", kernel_initializer=fixed(2), trainable=False, name="rnd_target_1"
            ),
            dense(FEATURES, kernel_initializer=fixed(3), trainable=False, name="rnd_target_2"),
        ]
        self._predictor = [
            dense(HIDDEN, "relu", name="rnd_predictor_0"),
            dense(HIDDEN, "relu", name="rnd_predictor_1"),
            dense(FEATURES, name="rnd_predictor_2"),
        ]

    def initial_state(self, batch_size: int) -> Any:
        return self.policy.initial_state(batch_size)

    def build(self, observation_shape: Sequence[int]) -> None:
        self.policy.build(observation_shape)
        self.novelty(tf.zeros([1, *observation_shape]))

    def step(self, inputs: AgentInputs, state: Any):
        return self.policy.step(inputs, state)

    def unroll(self, inputs: AgentInputs, state: Any):
        return self.policy.unroll(inputs, state)

    def novelty(self, observations: Any) -> tf.Tensor:
        x = flat_observations(observations, scaling=self._scaling)
        target, prediction = x, x
        for layer in self._target:
            target = layer(target)
        for layer in self._predictor:
            prediction = layer(prediction)
        return tf.reduce_mean(tf.square(prediction - tf.stop_gradient(target)), axis=-1)

    @property
    def predictor_variables(self) -> list[tf.Variable]:
        return [v for layer in self._predictor for v in layer.trainable_variables]

    @property
    def trainable_variables(self) -> list[tf.Variable]:
        return [*self.policy.trainable_variables, *self.predictor_variables]

    @property
    def non_trainable_variables(self) -> list[tf.Variable]:
        return [
            *getattr(self.policy, "non_trainable_variables", ()),
            *(v for layer in self._target for v in layer.variables),
        ]

    def get_weights(self) -> list[np.ndarray]:
        """The policy's weights alone: what actors act with (the predictor stays in the learner)."""
        return self.policy.get_weights()

    def set_weights(self, weights: Sequence[np.ndarray]) -> None:
        self.policy.set_weights(weights)

    @property
    def host_step(self) -> Callable:
        """The policy's (actors act with the policy alone); AttributeError if it has none."""
        return self.policy.host_step


def novelty_bonus(*, novelty: Any, ended: Any) -> tf.Tensor:
    """`[T, B]` novelty of each next observation -> `[T, B]` bonus (gradient-stopped).

    Centred on the whole batch's mean (every replica's shard: N replicas compute what one
    would), zero where `ended` (the step ended an episode: its next observation is the next
    episode's first)."""
    novelty = tf.stop_gradient(tf.convert_to_tensor(novelty, tf.float32))
    dims: dict = {}
    assert_shape("novelty", novelty, ("T", "B"), dims=dims)
    assert_shape("ended", ended, ("T", "B"), dims=dims)
    bonus = novelty - batch_mean(novelty)
    return tf.where(ended, tf.zeros_like(bonus), bonus)


def step_cost_batch(*, rewards: Any, ended: Any) -> tf.Tensor:
    """Scalar bool: every reward of the whole batch (every replica's shard), the steps that end
    an episode aside, is one and the same negative number.

    A constant cost per step (MountainCar's and Acrobot's -1) tells the agent nothing until an
    episode ends in the goal, which random play rarely reaches: there the novelty bonus is what
    steers. A survival reward (CartPole's +1), rewards that vary, or none (0) say otherwise.
    `rewards` `[T, B]` as the env gave them (an unroll's `prev_rewards[1:]`), `ended` `[T, B]`."""
    rewards = tf.convert_to_tensor(rewards, tf.float32)
    dims: dict = {}
    assert_shape("rewards", rewards, ("T", "B"), dims=dims)
    assert_shape("ended", ended, ("T", "B"), dims=dims)
    kept = 1.0 - tf.cast(ended, tf.float32)
    count = batch_mean(kept)  # means over the whole batch: sums / its size
    mean = batch_mean(rewards * kept) / tf.maximum(count, 1e-12)
    spread = batch_mean(tf.abs(rewards - mean) * kept) / tf.maximum(count, 1e-12)
    # A tolerance for the mean's rounding: the same float summed thousands of times.
    return (count > 0) & (mean < 0) & (spread <= 1e-5 * tf.abs(mean))


def rnd_loss_fn(
    *,
    rnd_cost: float,
    base_loss: Callable[..., LossOutput] | None = None,
    predictor_cost: float = 1.0,
    step_costs_only: bool = False,
    agent: RNDAgent,
    inputs: AgentInputs,
    actions: Any,
    rewards: Any,
    **tensors: Any,
) -> LossOutput:
    """`base_loss` (None: `impala_loss_fn`; given `agent.policy`) on `rewards + rnd_cost *
    novelty_bonus`, plus `predictor_cost` times the predictor's squared error summed over the
    shard (a sum, as IMPALA's terms are). Keywords as `impala_rep.loss_fn` documents; `agent`
    an `RNDAgent`.

    With `step_costs_only`, only on a batch whose rewards are a constant cost per step
    (`step_cost_batch`); on any other batch the loss is `base_loss` alone, and RND's networks
    are not run.

    Metrics: `rnd_loss` (summed), `rnd_novelty` and `rnd_bonus_rms` (means: the predictor's
    error, and the root mean square of the weighted bonus: how hard it steers; 0 where off),
    `rnd_on` (mean: 1 where the bonus applied)."""
    base_loss = impala_loss_fn if base_loss is None else base_loss
    observations = tf.convert_to_tensor(inputs.observation)
    dims: dict = {}
    actions = tf.convert_to_tensor(actions)
    assert_shape("actions", actions, ("T", "B", *[None] * (actions.shape.rank - 2)), dims=dims)
    assert_shape(
        "inputs.observation",
        observations,
        ("T+1", "B", *[None] * (observations.shape.rank - 2)),
        dims=dims,
    )
    t, b = tf.shape(actions)[0], tf.shape(actions)[1]
    following = tf.reshape(observations[1:], tf.concat([[t * b], tf.shape(observations)[2:]], 0))
    if step_costs_only:
        on = step_cost_batch(
            rewards=tf.convert_to_tensor(inputs.prev_reward)[1:], ended=inputs.first[1:]
        )
        # The networks run only where the bonus applies. Nothing inside the branches may be a
        # cross-replica collective (tf.distribute refuses one in control flow): the bonus is
        # centred outside, on zeros where off.
        error = tf.cond(on, lambda: agent.novelty(following), lambda: tf.zeros([t * b], tf.float32))
    else:
        on, error = tf.constant(True), agent.novelty(following)
    error = tf.reshape(error, [t, b])
    bonus = rnd_cost * novelty_bonus(novelty=error, ended=inputs.first[1:])
    # The run's own loss sees the run's own agent (its methods, its variables), not the wrapper.
    base = base_loss(
        agent=agent.policy, inputs=inputs, actions=actions, rewards=rewards + bonus, **tensors
    )
    predictor_loss = predictor_cost * tf.reduce_sum(error)
    total = base.loss + predictor_loss
    return LossOutput(
        total,
        sums={
            **base.sums,
            "loss": tf.stop_gradient(total),
            "rnd_loss": tf.stop_gradient(predictor_loss),
        },
        means={
            **base.means,
            "rnd_novelty": tf.stop_gradient(tf.reduce_mean(error)),
            # over the whole batch: a mean of the shards' roots would not be the root of the mean
            "rnd_bonus_rms": tf.sqrt(batch_mean(tf.square(bonus))),
            "rnd_on": tf.cast(on, total.dtype),
        },
        terms={**base.terms, "rnd_loss": predictor_loss},
        after_update=base.after_update,
    )
