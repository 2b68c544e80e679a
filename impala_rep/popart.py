"""PopArt (van Hasselt et al. 2016; for IMPALA, Hessel et al. 2019): the value head learns
targets normalised by their running mean and standard deviation, and is rescaled whenever
those move, so the values it stands for stay exactly what they were.

`--popart` (`LossConfig.popart`) turns it on; the extension `impala_rep.extensions.PopArt`
wraps the run's agent in a `PopArtAgent` and its loss in `popart_loss_fn`.

- `PopArtAgent` composes any agent (built-in or the user's) with a scalar affine head on its
  baseline `h`: the normalised value is `n = w h + b` and the value the agent reports (to the
  actors, for time-limit bootstraps; to the loss) is `v = sigma n + mu`. PopArt acts on that
  head, so it needs nothing from the agent's layers; `w`, `b` start at 1, 0 and `mu`, `sigma` at
  0, 1, so a new `PopArtAgent` is its agent. The statistics (mean and second moment of the
  targets) are checkpointed as non-trainable state and published with the weights.
- `popart_loss_fn` gives its base loss (the IMPALA loss by default) the values and rewards in
  normalised units: `n = (v - mu) / sigma` and `(r + discount mu - mu) / sigma`. V-trace is
  affine in them, so the targets are `(vs - mu) / sigma` and the advantages are divided by
  sigma: the value loss no longer grows with the return's scale, and the policy's steps do not
  either (advantage normalisation, where it is on, standardises them anyway).
- After the update (`LossOutput.after_update`), the statistics move towards the batch's
  V-trace targets with step size `step_size`, and `w`, `b` are rescaled to keep `v`
  (`preserved_head`). The PopArt paper's algorithm moves the statistics before the gradient
  step; here they move after it, so the loss hook stays one forward pass and one gradient
  (the next step normalises with them).

Statistics are over the whole batch (every replica's shard), so N replicas update as one.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from impala_rep.agent import AgentInputs, assign_weights, weights_of
from impala_rep.extensions import PopArt
from impala_rep.loss_fn import LossOutput, chain_after_updates, impala_loss_fn
from impala_rep.losses import batch_mean
from impala_rep.shapes import assert_shape

__all__ = [
    "PopArtAgent",
    "popart_loss_fn",
    "updated_moments",
    "scale_of",
    "preserved_head",
    "SCALE_BOUNDS",
    "METRICS",
]

# The metrics the loss adds to its base loss's, and what each means.
METRICS = PopArt.metrics

# The standard deviation's bounds: never 0 (a constant target), never beyond float32's comfort.
SCALE_BOUNDS = (1e-4, 1e6)


def updated_moments(
    *, mean: Any, second_moment: Any, target_mean: Any, target_square_mean: Any, step_size: float
) -> tuple[tf.Tensor, tf.Tensor]:
    """The running mean and second moment moved towards a batch's (the targets' mean and mean
    square) by `step_size`: `m + step_size * (batch's - m)`."""
    beta = tf.constant(step_size, tf.float32)
    mean, second_moment, target_mean, target_square_mean = (
        tf.convert_to_tensor(x, tf.float32)
        for x in (mean, second_moment, target_mean, target_square_mean)
    )
    return (
        mean + beta * (target_mean - mean),
        second_moment + beta * (target_square_mean - second_moment),
    )


def scale_of(*, mean: Any, second_moment: Any) -> tf.Tensor:
    """sigma = sqrt(second_moment - mean^2), within `SCALE_BOUNDS`."""
    low, high = SCALE_BOUNDS
    variance = tf.convert_to_tensor(second_moment, tf.float32) - tf.square(mean)
    return tf.sqrt(tf.clip_by_value(variance, low**2, high**2))


def preserved_head(
    *, weight: Any, bias: Any, old_mean: Any, old_scale: Any, new_mean: Any, new_scale: Any
) -> tuple[tf.Tensor, tf.Tensor]:
    """`(w', b')` with `new_scale (w' h + b') + new_mean == old_scale (w h + b) + old_mean` for
    every `h`: PopArt's "preserving outputs precisely"."""
    return (weight * old_scale / new_scale, (old_scale * bias + old_mean - new_mean) / new_scale)


def _mirrored_pair(values: tuple[float, float], name: str, trainable: bool) -> tf.Variable:
    # Assigned inside the replicated step with the value every replica computed alike (from
    # whole-batch statistics): the first replica's is kept, as the learner's step counter is.
    # A pair, not two scalars: two variables to assign and publish instead of four.
    return tf.Variable(
        values,
        dtype=tf.float32,
        trainable=trainable,
        name=name,
        aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
    )


class PopArtAgent:
    """`policy` (any `impala_rep.Agent`) whose baseline goes through PopArt's head.

    Its `baseline` is the unnormalised value `sigma (w h + b) + mu` (`h`: the policy's
    baseline); its weights are the policy's, `w` and `b`, then the statistics (mean, second
    moment), so actors compute the same values the learner does."""

    def __init__(self, policy: Any):
        self.policy = policy
        self.num_actions = policy.num_actions
        self.action_distribution = getattr(policy, "action_distribution", None)
        self._head: tf.Variable | None = None  # (w, b)
        self._moments: tf.Variable | None = None  # (mean, second moment) of the targets

    def initial_state(self, batch_size: int) -> Any:
        return self.policy.initial_state(batch_size)

    def build(self, observation_shape: Sequence[int]) -> None:
        self.policy.build(observation_shape)
        if (
            self._head is None
        ):  # made here: the learner builds its agent inside the replicator's scope
            self._head = _mirrored_pair((1.0, 0.0), "popart_head", True)
            self._moments = _mirrored_pair((0.0, 1.0), "popart_moments", False)

    @property
    def statistics(self) -> tuple[tf.Tensor, tf.Tensor]:
        """`(mu, sigma)` as they are now."""
        mean, second_moment = tf.unstack(tf.convert_to_tensor(self._moments))
        return mean, scale_of(mean=mean, second_moment=second_moment)

    def _values(self, head_input: tf.Tensor) -> tf.Tensor:
        weight, bias = tf.unstack(tf.convert_to_tensor(self._head))
        mean, scale = self.statistics
        return scale * (weight * head_input + bias) + mean

    def step(self, inputs: AgentInputs, state: Any):
        output, state = self.policy.step(inputs, state)
        return output._replace(baseline=self._values(output.baseline)), state

    def unroll(self, inputs: AgentInputs, state: Any):
        output, state = self.policy.unroll(inputs, state)
        return output._replace(baseline=self._values(output.baseline)), state

    def update_statistics(
        self, *, target_mean: Any, target_square_mean: Any, step_size: float, applied: Any = True
    ) -> None:
        """Moves the statistics towards a batch's unnormalised targets (their mean and mean
        square, over the whole batch) and rescales the head so the values stay; nothing changes
        where `applied` is False (an update the learner refused)."""
        weight, bias = tf.unstack(tf.convert_to_tensor(self._head))
        old_mean, second_moment = tf.unstack(tf.convert_to_tensor(self._moments))
        old_scale = scale_of(mean=old_mean, second_moment=second_moment)
        new_mean, new_second = updated_moments(
            mean=old_mean,
            second_moment=second_moment,
            target_mean=target_mean,
            target_square_mean=target_square_mean,
            step_size=step_size,
        )
        new_scale = scale_of(mean=new_mean, second_moment=new_second)
        new_weight, new_bias = preserved_head(
            weight=weight,
            bias=bias,
            old_mean=old_mean,
            old_scale=old_scale,
            new_mean=new_mean,
            new_scale=new_scale,
        )
        # tf.where, not tf.cond: an assign of a mirrored variable cannot sit in a cond branch.
        applied = tf.convert_to_tensor(applied, tf.bool)
        for variable, value in (
            (self._head, tf.stack([new_weight, new_bias])),
            (self._moments, tf.stack([new_mean, new_second])),
        ):
            variable.assign(tf.where(applied, value, tf.convert_to_tensor(variable)))

    @property
    def trainable_variables(self) -> list[tf.Variable]:
        return [*self.policy.trainable_variables, self._head]

    @property
    def non_trainable_variables(self) -> list[tf.Variable]:
        return [*getattr(self.policy, "non_trainable_variables", ()), self._moments]

    def get_weights(self) -> list[np.ndarray]:
        # The policy's own weights as it publishes them (batch-norm statistics included), then
        # PopArt's head and statistics.
        return [*self.policy.get_weights(), *weights_of([self._head, self._moments])]

    def set_weights(self, weights: Sequence[np.ndarray]) -> None:
        self.policy.set_weights(list(weights[:-2]))
        assign_weights([self._head, self._moments], list(weights[-2:]))


def popart_loss_fn(
    *,
    step_size: float,
    base_loss: Callable[..., LossOutput] | None = None,
    agent: PopArtAgent,
    outputs: Any,
    behaviour_logits: Any,
    actions: Any,
    rewards: Any,
    discounts: Any,
    config: Any,
    **tensors: Any,
) -> LossOutput:
    """`base_loss` (None: `impala_loss_fn`; given `agent.policy`) on normalised values and
    rewards, then PopArt's statistics update after the step. Keywords as `impala_rep.loss_fn`
    documents; `agent` a `PopArtAgent`. The base loss must report its targets' moments as
    `means["vtrace_target_mean"]` and `["vtrace_target_square_mean"]` (`impala_loss_fn` does):
    PopArt follows them rather than computing V-trace a second time (~20% of an MLP step here).

    Metrics (means): `popart_mean`, `popart_scale` (the statistics this step normalised with).
    The base loss's `value_mean` and target moments are in normalised units."""
    base_loss = impala_loss_fn if base_loss is None else base_loss
    values = tf.convert_to_tensor(outputs.baseline, tf.float32)
    rewards = tf.convert_to_tensor(rewards, tf.float32)
    discounts = tf.convert_to_tensor(discounts, tf.float32)
    dims: dict = {}
    assert_shape("outputs.baseline", values, ("T+1", "B"), dims=dims)
    assert_shape("rewards", rewards, ("T", "B"), dims=dims)
    assert_shape("discounts", discounts, ("T", "B"), dims=dims)
    mean, scale = agent.statistics
    mean, scale = tf.stop_gradient(mean), tf.stop_gradient(scale)
    # V-trace is affine in the values and rewards: these give targets (vs - mu) / sigma.
    normalised = outputs._replace(baseline=(values - mean) / scale)
    base = base_loss(
        agent=agent.policy,
        outputs=normalised,
        behaviour_logits=behaviour_logits,
        actions=actions,
        rewards=(rewards + (discounts - 1.0) * mean) / scale,
        discounts=discounts,
        config=config,
        **tensors,
    )
    missing = [
        k for k in ("vtrace_target_mean", "vtrace_target_square_mean") if k not in base.means
    ]
    if missing:
        raise ValueError(
            f"popart_loss_fn's base loss must report means {missing} (the V-trace "
            "targets' mean and mean square), as impala_loss_fn does"
        )
    # The whole batch's (every replica's shard: equal shards, so the mean of their means) in
    # normalised units, then unnormalised: E[vs] = sigma E[n] + mu,
    # E[vs^2] = sigma^2 E[n^2] + 2 sigma mu E[n] + mu^2.
    normalised_mean = batch_mean(tf.stop_gradient(base.means["vtrace_target_mean"]))
    normalised_square = batch_mean(tf.stop_gradient(base.means["vtrace_target_square_mean"]))
    update = functools.partial(
        agent.update_statistics,
        target_mean=scale * normalised_mean + mean,
        target_square_mean=(
            tf.square(scale) * normalised_square
            + 2.0 * scale * mean * normalised_mean
            + tf.square(mean)
        ),
        step_size=step_size,
    )
    return base._replace(
        means={**base.means, "popart_mean": mean, "popart_scale": scale},
        after_update=chain_after_updates(base.after_update, update),
    )
