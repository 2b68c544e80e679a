"""Running observation normalisation (`--normalize-observations`): every vector observation
standardised by the running mean and variance of all the observations trained on so far, as
Stable-Baselines3's `VecNormalize` and Sample Factory's `normalize_input` do, for tasks whose
observations have no useful declared bounds (MuJoCo's are infinite, their scales 1e-2 to 1e1).

The extension `impala_rep.extensions.ObservationNormalization` wraps the run's agent in a
`NormalizingAgent` and its loss in `normalizing_loss_fn`:

- `NormalizingAgent` composes any agent for vector observations: it feeds its policy
  `clip((x - mean) / sqrt(var + EPSILON), -clip, clip)`. The statistics are one non-trainable
  variable, published with the weights (its last weight) and checkpointed with the agent: the
  actors act with the statistics the learner trained with, and a resumed run goes on with them.
  A new agent's statistics are those of no observation (count 0, mean 0, variance 1): the
  identity.
- The statistics move in the learner, not in each actor (as `VecNormalize` does, one process
  per set of envs): every actor then sees one normalisation, the learner's, and the replicas
  and learner hosts of a group agree, since each update folds in the whole batch's moments
  (all-reduced) with Chan et al.'s parallel formula, after the update (`after_update`, as
  PopArt's statistics move): the next batch is normalised with them.
- `HostNormalizingAgent` is the acting twin, in numpy, over the policy's own twin: with the
  built-in MLP, actors still import no TensorFlow.
- A nest of vectors (a `Dict` of them given to your own agent, `--observation-nests`) has
  statistics per part, as `VecNormalize` keeps them per key: its weights end with one `[3, D]`
  array per part, in the nest's (sorted) key order.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from impala_rep.observation_nest import is_nest, is_vectors, leaves, map_leaves

__all__ = [
    "NormalizingAgent",
    "HostNormalizingAgent",
    "normalizing_loss_fn",
    "normalized",
    "updated_statistics",
    "EPSILON",
]

# Added to the variance: a dimension that never moved is left as it is, not blown up.
EPSILON = 1e-8


def normalized(observation: Any, statistics: Any, *, clip: float, xp: Any = np) -> Any:
    """`[..., D]` observations standardised by `statistics` (`[3, D]`: count, mean, variance
    rows) and clipped to [-clip, clip]. `xp`: the array module, numpy for the actors' twin,
    `tensorflow.experimental.numpy` for the agent (one formula for both)."""
    mean, variance = statistics[1], statistics[2]
    return xp.clip((observation - mean) / xp.sqrt(variance + EPSILON), -clip, clip)


def updated_statistics(
    *, statistics: Any, batch_mean: Any, batch_variance: Any, batch_count: Any
) -> Any:
    """`[3, D]` statistics with a batch's moments folded in (Chan, Golub and LeVeque's parallel
    update, as `VecNormalize`'s `RunningMeanStd`): the mean and (population) variance of every
    observation seen, the batch's included."""
    import tensorflow as tf

    count, mean, variance = tf.unstack(tf.convert_to_tensor(statistics, tf.float32))
    batch_count = tf.cast(batch_count, tf.float32)
    total = count + batch_count
    delta = batch_mean - mean
    new_mean = mean + delta * batch_count / total
    squares = variance * count + batch_variance * batch_count
    new_variance = (squares + tf.square(delta) * count * batch_count / total) / total
    return tf.stack([total, new_mean, new_variance])


class NormalizingAgent:
    """`policy` (any `impala_rep.Agent` for vector observations `[D]`, or a nest of them) fed
    observations standardised by the running statistics (see the module docstring).

    Its weights are the policy's, then the statistics `[3, D]` (count, mean, variance), one
    per part of a nest."""

    def __init__(self, policy: Any, *, clip: float):
        self.policy = policy
        self.clip = float(clip)
        self.num_actions = policy.num_actions
        self.action_distribution = getattr(policy, "action_distribution", None)
        self._statistics = None  # made in build(), inside the replicator's scope

    def initial_state(self, batch_size: int) -> Any:
        return self.policy.initial_state(batch_size)

    def build(self, observation_shape: Sequence[int]) -> None:
        import tensorflow as tf

        check_vectors(observation_shape)
        self.policy.build(observation_shape)
        if self._statistics is None:

            def variable(shape: Sequence[int], name: str) -> Any:
                (size,) = shape
                # Assigned inside the replicated step with what every replica computed alike
                # (whole-batch moments): the first replica's value is kept.
                return tf.Variable(
                    np.stack([np.zeros(size), np.zeros(size), np.ones(size)]).astype(np.float32),
                    trainable=False,
                    name=name,
                    aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
                )

            if is_nest(observation_shape):
                self._statistics = {
                    key: variable(shape, f"observation_statistics_{key}")
                    for key, shape in sorted(observation_shape.items())
                }
            else:
                self._statistics = variable(observation_shape, "observation_statistics")

    def normalize(self, observation: Any) -> Any:
        """`[..., D]` observations (or a nest of them) as the policy sees them."""
        import tensorflow as tf
        import tensorflow.experimental.numpy as tnp

        return map_leaves(
            lambda x, statistics: normalized(
                tf.cast(x, tf.float32), tf.convert_to_tensor(statistics), clip=self.clip, xp=tnp
            ),
            observation,
            self._statistics,
        )

    def step(self, inputs: Any, state: Any):
        return self.policy.step(
            inputs._replace(observation=self.normalize(inputs.observation)), state
        )

    def unroll(self, inputs: Any, state: Any):
        return self.policy.unroll(
            inputs._replace(observation=self.normalize(inputs.observation)), state
        )

    @property
    def statistics(self) -> Any:
        """The statistics variable, or for a nest a dict of them."""
        return self._statistics

    @property
    def observation_count(self) -> Any:
        """How many observations the statistics hold (every part of a nest holds as many)."""
        import tensorflow as tf

        return tf.convert_to_tensor(leaves(self._statistics)[0])[0, 0]

    def update_statistics(self, observations: Any, *, applied: Any = True) -> None:
        """Folds `[T, B', D]` observations, or a nest of them, (this replica's shard of the
        batch; every replica's together when called inside a replicated step) into the
        statistics; nothing changes where `applied` is False (an update the learner refused)."""
        map_leaves(
            lambda x, statistics: _update(statistics, x, applied),
            observations,
            self._statistics,
        )

    @property
    def trainable_variables(self) -> list:
        return list(self.policy.trainable_variables)

    @property
    def non_trainable_variables(self) -> list:
        return [*getattr(self.policy, "non_trainable_variables", ()), *leaves(self._statistics)]

    def get_weights(self) -> list[np.ndarray]:
        from impala_rep.agent import weights_of

        return [*self.policy.get_weights(), *weights_of(leaves(self._statistics))]

    def set_weights(self, weights: Sequence[np.ndarray]) -> None:
        from impala_rep.agent import assign_weights

        statistics = leaves(self._statistics)
        self.policy.set_weights(list(weights[: -len(statistics)]))
        assign_weights(statistics, list(weights[-len(statistics) :]))


def check_vectors(observation_shape: Any) -> None:
    """ValueError unless `observation_shape` is a vector's `[D]` or a nest of them."""
    if not is_vectors(observation_shape):
        raise ValueError(
            "observation normalisation needs vector observations (or a nest of vectors), got "
            f"shape {observation_shape}"
        )


def _update(statistics: Any, observations: Any, applied: Any) -> None:
    """One statistics variable with `[T, B', D]` observations folded in (where `applied`)."""
    import tensorflow as tf

    x = tf.cast(observations, tf.float32)
    x = tf.reshape(x, [-1, tf.shape(x)[-1]])
    mean, square_mean = tf.reduce_mean(x, 0), tf.reduce_mean(tf.square(x), 0)
    count = tf.cast(tf.shape(x)[0], tf.float32)
    context = tf.distribute.get_replica_context()
    if context is not None and context.num_replicas_in_sync > 1:
        # Equal shards: the whole batch's moments are the mean of the shards'.
        mean, square_mean = context.all_reduce(tf.distribute.ReduceOp.MEAN, [mean, square_mean])
        count = count * context.num_replicas_in_sync
    new = updated_statistics(
        statistics=statistics,
        batch_mean=mean,
        batch_variance=tf.maximum(square_mean - tf.square(mean), 0.0),
        batch_count=count,
    )
    # tf.where, not tf.cond: an assign of a mirrored variable cannot sit in a cond branch.
    applied = tf.convert_to_tensor(applied, tf.bool)
    statistics.assign(tf.where(applied, new, tf.convert_to_tensor(statistics)))


class HostNormalizingAgent:
    """`NormalizingAgent`'s acting twin: `policy_twin` (the policy's own twin) fed observations
    standardised in numpy by the statistics, the last of the weights it is given (the last
    few, one per part of a nest in its key order)."""

    is_acting_twin = True

    def __init__(self, policy_twin: Any, *, clip: float):
        self.policy = policy_twin
        self.clip = float(clip)
        self.num_actions = policy_twin.num_actions
        self.action_distribution = getattr(policy_twin, "action_distribution", None)

    def weight_shapes(self, observation_shape: Any) -> list[tuple[int, ...]]:
        parts = leaves(observation_shape)
        return [*self.policy.weight_shapes(observation_shape), *((3, *p) for p in parts)]

    def initial_state(self, batch_size: int) -> Any:
        """The policy twin's (a recurrent one's state, in numpy); `()` if it keeps none."""
        initial_state = getattr(self.policy, "initial_state", None)
        return () if initial_state is None else initial_state(batch_size)

    def host_step(self, weights: Sequence[np.ndarray], inputs: Any, *state: Any) -> Any:
        """The policy twin's step on the normalised observations; a recurrent twin's `state`
        passes through (`actors/host_policy.py`)."""
        observation = inputs.observation
        parts = len(leaves(observation))
        policy_weights, statistics = weights[:-parts], weights[-parts:]
        if is_nest(observation):
            statistics = dict(zip(sorted(observation), statistics, strict=True))
        else:
            (statistics,) = statistics
        observation = map_leaves(
            lambda x, s: normalized(np.asarray(x, np.float32), s, clip=self.clip).astype(
                np.float32
            ),
            observation,
            statistics,
        )
        return self.policy.host_step(
            policy_weights, inputs._replace(observation=observation), *state
        )


def normalizing_loss_fn(
    *,
    base_loss: Callable[..., Any] | None = None,
    agent: NormalizingAgent,
    inputs: Any,
    **tensors: Any,
) -> Any:
    """`base_loss` (None: the IMPALA loss) given `agent.policy` and the inputs as the policy saw
    them (normalised), then the statistics updated with the batch's observations after the
    update. Keywords as `impala_rep.loss_fn` documents; `agent` a `NormalizingAgent`.

    Metrics (means): `observation_count`, the observations the statistics hold (before this
    batch's)."""
    import tensorflow as tf

    from impala_rep.loss_fn import chain_after_updates, impala_loss_fn

    base_loss = impala_loss_fn if base_loss is None else base_loss
    base = base_loss(
        agent=agent.policy,
        inputs=inputs._replace(observation=agent.normalize(inputs.observation)),
        **tensors,
    )
    # The T steps taken, not the bootstrap observation [-1] (the next batch's first).
    steps = map_leaves(lambda x: tf.convert_to_tensor(x)[:-1], inputs.observation)
    update = functools.partial(agent.update_statistics, steps)
    count = agent.observation_count
    return base._replace(
        means={**base.means, "observation_count": count},
        after_update=chain_after_updates(base.after_update, update),
    )
