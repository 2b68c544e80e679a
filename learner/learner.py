"""The IMPALA learner: one replicated V-trace update per batch of unrolls.

The learner is plain TensorFlow driven by a `Replicator`; it knows nothing about
Ray, actors or flags. Everything it needs (agent, replicator, hyperparameters,
optionally the optimizer) is passed in:

    replicator = Replicator("cpu:2")
    learner = Learner(agent=MLPAgent(num_actions=2), replicator=replicator,
                      hyperparams=LearnerHyperparams(total_steps=10_000),
                      observation_shape=(4,))
    metrics = learner.step(batch)          # batch: an Unroll with B columns
    version, weights = learner.get_weights()

Shapes follow the package convention (see `impala_rep`): an `Unroll` batch is
time-major, `[T+1, B, ...]` for the agent inputs, `[T, B, ...]` for the
transitions, `[B]` for `policy_version` and a nest of `[B, ...]` for
`initial_state`. `B` must be a multiple of the number of local replicas.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
from typing import Any, Iterable, Sequence

import numpy as np
import tensorflow as tf

from impala_rep.agent import Agent, AgentInputs
from impala_rep.learner.checkpointing import restore_newest_readable
from impala_rep.learner.replicator import (
    ReplicatedOptimizer,
    Replicator,
    all_reduce,
    all_reduce_gradients,
    num_replicas,
)
from impala_rep.loss_fn import LossFn, impala_loss_fn
from impala_rep.unroll import TIME_MAJOR_DTYPES, Unroll

__all__ = ["LearnerHyperparams", "Learner", "NonFiniteError"]


class NonFiniteError(FloatingPointError):
    """A learner step produced a NaN or infinite loss or gradient; nothing was applied."""

    def __init__(self, metrics: list[str], step: int):
        self.metrics, self.step = metrics, step
        super().__init__(f"non-finite {', '.join(metrics)} at learner step {step}; "
                         "the update was not applied")

REWARD_CLIPPING = ("abs_one", "none")

# impala_loss metrics that are SUMS over the replica's shard: summed over replicas
# so they are the global-batch value whatever the replica count. The others are
# means over a shard; shards are equal-sized, so their mean over replicas is the
# global-batch mean.
_SUMMED_METRICS = ("loss", "pg_loss", "baseline_loss", "entropy_loss")


@dataclasses.dataclass(frozen=True, kw_only=True)
class LearnerHyperparams:
    """Learner hyperparameters (defaults: the IMPALA paper's / scalable_agent's).

    Attributes:
      learning_rate: initial RMSProp learning rate, > 0.
      total_steps: learner steps over which the learning rate decays linearly to
        0 (and stays 0 afterwards), >= 1.
      discount: gamma in [0, 1].
      baseline_cost, entropy_cost: weights of the baseline and entropy losses, >= 0.
      clip_rho_threshold, clip_pg_rho_threshold: V-trace clipping, > 0 or None.
      lambda_: V-trace lambda in [0, 1].
      rmsprop_decay: RMSProp rho in [0, 1).
      rmsprop_epsilon: RMSProp epsilon, > 0.
      rmsprop_momentum: RMSProp momentum in [0, 1).
      max_grad_norm: clip the GLOBAL gradient (over all replicas) to this norm,
        > 0, or None for no clipping.
      reward_clipping: "abs_one" (clip rewards to [-1, 1]) or "none".
    """

    learning_rate: float = 6e-4
    total_steps: int
    discount: float = 0.99
    baseline_cost: float = 0.5
    entropy_cost: float = 0.01
    clip_rho_threshold: float | None = 1.0
    clip_pg_rho_threshold: float | None = 1.0
    lambda_: float = 1.0
    rmsprop_decay: float = 0.99
    rmsprop_epsilon: float = 0.01
    rmsprop_momentum: float = 0.0
    max_grad_norm: float | None = 40.0
    reward_clipping: str = "abs_one"

    def __post_init__(self):
        def number(name: str, *, optional: bool = False) -> float | None:
            value = getattr(self, name)
            if value is None and optional:
                return None
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(value):
                allowed = "a number or None" if optional else "a number"
                raise ValueError(f"{name} must be {allowed}, got {value!r}")
            return float(value)

        def check(name: str, ok: bool, allowed: str) -> None:
            if not ok:
                raise ValueError(f"{name} must be {allowed}, got {getattr(self, name)!r}")

        total = self.total_steps
        check("total_steps", isinstance(total, numbers.Integral) and not isinstance(total, bool)
              and total >= 1, "an integer >= 1")
        lr = number("learning_rate")
        check("learning_rate", 0 < lr < math.inf, "> 0 and finite")
        check("discount", 0 <= number("discount") <= 1, "in [0, 1]")
        for name in ("baseline_cost", "entropy_cost"):
            check(name, 0 <= number(name) < math.inf, ">= 0 and finite")
        for name in ("clip_rho_threshold", "clip_pg_rho_threshold", "max_grad_norm"):
            value = number(name, optional=True)
            check(name, value is None or value > 0, "> 0 or None")
        check("lambda_", 0 <= number("lambda_") <= 1, "in [0, 1]")
        check("rmsprop_decay", 0 <= number("rmsprop_decay") < 1, "in [0, 1)")
        check("rmsprop_epsilon", 0 < number("rmsprop_epsilon") < math.inf, "> 0 and finite")
        check("rmsprop_momentum", 0 <= number("rmsprop_momentum") < 1, "in [0, 1)")
        check("reward_clipping", self.reward_clipping in REWARD_CLIPPING,
              " or ".join(repr(c) for c in REWARD_CLIPPING))


class Learner:
    """Trains an agent with V-trace on batches of unrolls, replicated by a `Replicator`.

    Args:
      agent: an `impala_rep.agent.Agent`; built here, inside `replicator.scope()`.
      replicator: runs the per-replica update on its devices.
      hyperparams: see `LearnerHyperparams`.
      observation_shape: shape of ONE observation (no time or batch dims).
      optimizer: a Keras optimizer to use instead of the paper's RMSProp (e.g.
        plain SGD in tests). Its learning rate is used as given (no decay). It
        must be constructed inside `replicator.scope()` (checked, ValueError):
        Keras creates its step counter in the constructor.
      loss_fn: the per-replica loss, called with keywords as `impala_rep.loss_fn`
        documents; returns `(loss, metrics)`. Default: `impala_loss_fn`, the
        IMPALA V-trace loss with `hyperparams`' costs.

    Batch layout on the devices: `Replicator.run` splits every input along ONE
    axis, so the time-major fields go with `batch_axis=1`, `initial_state`
    leaves `[B, ...]` are expanded to `[1, B, ...]` for the split and squeezed
    back inside the replica, and `policy_version` never goes to the devices
    (policy lag is computed on the host).
    """

    def __init__(
        self,
        *,
        agent: Agent,
        replicator: Replicator,
        hyperparams: LearnerHyperparams,
        observation_shape: Sequence[int],
        optimizer: Any = None,
        loss_fn: LossFn | None = None,
    ):
        self._agent = agent
        self._replicator = replicator
        self._hp = hyperparams
        self._loss_fn = impala_loss_fn if loss_fn is None else loss_fn
        with replicator.scope():
            agent.build(tuple(observation_shape))
            if optimizer is None:
                # Linear decay to 0 over total_steps, evaluated by Keras at the
                # optimizer's own step counter, so a restored checkpoint (which holds
                # that counter) continues the schedule where it stopped. Past
                # decay_steps PolynomialDecay stays at end_learning_rate = 0.
                schedule = tf.keras.optimizers.schedules.PolynomialDecay(
                    initial_learning_rate=hyperparams.learning_rate,
                    decay_steps=hyperparams.total_steps,
                    end_learning_rate=0.0,
                    power=1.0,
                )
                optimizer = tf.keras.optimizers.RMSprop(
                    learning_rate=schedule,
                    rho=hyperparams.rmsprop_decay,
                    momentum=hyperparams.rmsprop_momentum,
                    epsilon=hyperparams.rmsprop_epsilon,
                )
            elif not replicator.strategy.extended.variable_created_in_scope(
                optimizer.iterations.value
            ):
                # Created outside the scope, Keras' step counter is a plain variable
                # that every replica increments: with N replicas it counts N per step
                # and a learning-rate schedule would run N times too fast.
                raise ValueError(
                    "optimizer must be constructed inside replicator.scope() (its step "
                    "counter was created outside it)"
                )
            if not isinstance(optimizer, ReplicatedOptimizer):
                optimizer = replicator.wrap_optimizer(optimizer)
            # Slots must exist before the first replicated call: variables created
            # while tracing under MirroredStrategy fail.
            optimizer.build(list(agent.trainable_variables))
            self._num_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="learner_step")
        self._optimizer = optimizer
        # Non-trainable agent state (an agent's optional `non_trainable_variables`, e.g.
        # batch-norm moving statistics) is saved under its own key, and only when there
        # is some: checkpoints of agents without such state keep their layout.
        agent_state = list(getattr(agent, "non_trainable_variables", ()))
        self._checkpoint = tf.train.Checkpoint(
            agent=list(agent.trainable_variables),
            optimizer=optimizer.optimizer,
            step=self._num_steps,
            **({"agent_state": agent_state} if agent_state else {}),
        )
        self._managers: dict[str, tf.train.CheckpointManager] = {}
        # Replicator caches one compiled function per step_fn object; keep ours fixed.
        self._step_fn = self._replica_step

    @property
    def agent(self) -> Agent:
        return self._agent

    @property
    def hyperparams(self) -> LearnerHyperparams:
        return self._hp

    @property
    def optimizer(self) -> ReplicatedOptimizer:
        """The (replicated) optimizer; `.variables` holds its checkpointed state."""
        return self._optimizer

    @property
    def checkpoint(self) -> tf.train.Checkpoint:
        """The learner's trackable state (agent weights, optimizer state, step), for
        embedding in a larger checkpoint (see `learner/checkpointing.py`)."""
        return self._checkpoint

    @property
    def num_steps(self) -> int:
        """Updates applied so far: the version of the current weights."""
        return int(self._num_steps.numpy())

    # --- the replicated update ---------------------------------------------------

    def _replica_step(self, batch: dict[str, Any]) -> dict[str, tf.Tensor]:
        """One replica's update on its shard (B' = B / local replicas columns).

        Args:
          batch: the `_device_batch` dict, split along axis 1: time-major fields
            `[T+1, B', ...]` / `[T, B', ...]`, `initial_state` leaves `[1, B', ...]`.

        Returns:
          Scalar metrics, identical on every replica (already reduced).
        """
        hp = self._hp
        state = tf.nest.map_structure(lambda x: tf.squeeze(x, axis=0), batch["initial_state"])
        inputs = AgentInputs(
            observation=batch["observations"],
            prev_action=batch["prev_actions"],
            prev_reward=batch["prev_rewards"],
            first=batch["first"],
        )
        rewards = batch["rewards"]
        if hp.reward_clipping == "abs_one":
            rewards = tf.clip_by_value(rewards, -1.0, 1.0)
        # Truncated steps are treated as episode ends, discount 0, like terminated
        # ones. This is a known bias: after a time-limit cut the return should be
        # bootstrapped with gamma * V(final observation), but the unroll does not
        # carry that observation (obs[t+1] is already the next episode's first).
        # Fixing it needs the actor to record the final observation of truncated
        # episodes in the Unroll (impala_rep/unroll.py, actors/) and V-trace to
        # bootstrap from it here.
        ended = tf.logical_or(batch["terminated"], batch["truncated"])
        discounts = hp.discount * (1.0 - tf.cast(ended, tf.float32))

        variables = list(self._agent.trainable_variables)
        replicas = num_replicas()
        with tf.GradientTape() as tape:
            outputs, _ = self._agent.unroll(inputs, state)  # over all T+1 observations
            # The loss hook's contract (keywords, shapes) is impala_rep.loss_fn's.
            loss, metrics = self._loss_fn(
                agent=self._agent,
                inputs=inputs,
                outputs=outputs,
                behaviour_logits=batch["behaviour_logits"],
                actions=batch["actions"],
                rewards=rewards,
                discounts=discounts,
                hyperparams=hp,
            )
            # The loss is a SUM over this replica's shard (as in the paper), but
            # gradients are MEAN-reduced over replicas. Scaling by the replica count
            # makes that mean the gradient of the sum over the global batch, so the
            # update does not depend on how many devices share the batch.
            scaled_loss = loss * tf.cast(replicas, loss.dtype)
        grads = tape.gradient(scaled_loss, variables)

        # Global-norm clipping must see the GLOBAL gradient, which exists only
        # after the all-reduce: reduce once here, clip, and apply the reduced
        # gradients as they are.
        grads = all_reduce_gradients(grads)
        grad_norm = tf.linalg.global_norm([g for g in grads if g is not None])
        if hp.max_grad_norm is not None:
            max_norm = tf.constant(hp.max_grad_norm, grad_norm.dtype)
            # norm 0 gives max_norm / 0 = inf -> scale 1.
            scale = tf.minimum(tf.ones_like(grad_norm), max_norm / grad_norm)
            grads = [_scale_gradient(g, scale) for g in grads]

        # A custom loss_fn may report any subset of metrics; tf.distribute cannot
        # all-reduce an empty structure, so an empty group is skipped.
        summed = {k: v for k, v in metrics.items() if k in _SUMMED_METRICS}
        summed = all_reduce(summed, op="sum") if summed else {}
        averaged = {k: v for k, v in metrics.items() if k not in _SUMMED_METRICS}
        averaged = all_reduce(averaged, op="mean") if averaged else {}
        # A non-finite loss or gradient on any replica must not reach the weights.
        # grad_norm is global already; the loss is summed over replicas so every
        # replica takes the same decision. Zeroed gradients (rather than a tf.cond
        # around the update, which would put the optimizer's cross-replica
        # merge_call inside a cond branch) leave the weights unchanged; `step`
        # then raises, so the optimizer's own step/slot decay for this update is
        # never checkpointed or published.
        finite = tf.logical_and(tf.math.is_finite(grad_norm),
                                tf.math.is_finite(all_reduce(loss, op="sum")))
        grads = [_zero_unless(finite, g) for g in grads]

        # Read before applying: the rate this update uses (Keras evaluates a
        # schedule at the optimizer's step counter, which apply_gradients advances).
        learning_rate = tf.cast(tf.convert_to_tensor(self._optimizer.learning_rate), tf.float32)
        self._optimizer.apply_reduced_gradients(zip(grads, variables))
        return {
            **{k: tf.cast(v, tf.float32) for k, v in {**summed, **averaged}.items()},
            "grad_norm": tf.cast(grad_norm, tf.float32),
            "learning_rate": learning_rate,
            "finite": tf.cast(finite, tf.float32),
        }

    @staticmethod
    def _device_batch(batch: Unroll) -> dict[str, Any]:
        """The part of `batch` that goes to the devices, splittable along axis 1."""
        device = {}
        # Cast to the layout's dtypes on the host, so every batch reaches the compiled
        # step with the same signature (no retracing because an actor sent float64
        # rewards). Observations keep the environment's dtype (e.g. uint8 frames).
        for name, dtype in TIME_MAJOR_DTYPES.items():
            value = np.asarray(getattr(batch, name))
            device[name] = value if dtype is None else value.astype(dtype, copy=False)
        # [B, ...] -> [1, B, ...] so that Replicator.run's single batch_axis=1 also
        # splits the recurrent state by column; `()` (feed-forward agents) has no
        # leaves and passes through.
        device["initial_state"] = tf.nest.map_structure(
            lambda x: np.expand_dims(np.asarray(x), 0), batch.initial_state
        )
        return device

    # --- public API --------------------------------------------------------------

    def step(self, batch: Unroll) -> dict[str, float]:
        """Applies one replicated update on a batch of `B` unrolls.

        Args:
          batch: an `Unroll` with `B` columns (a multiple of the local replicas).
            Keep `T`, `B` and the observation shape fixed: the update is compiled
            once for the first batch's shapes.

        Returns:
          Python floats: the `impala_loss` metrics for the whole batch (`loss`,
          `pg_loss`, `baseline_loss`, `entropy_loss` are sums over it, the rest
          means), `grad_norm` (global, before clipping), `learning_rate` (the rate
          this update used), and `policy_lag_mean` / `policy_lag_max`: the number
          of updates between the weights that produced each unroll and the
          weights this update starts from (`num_steps - policy_version`).

        Raises:
          NonFiniteError: the loss or the gradient was NaN or infinite. The
            weights and the step counter are left as they were.
        """
        version = self.num_steps
        results = self._replicator.run(self._step_fn, self._device_batch(batch), batch_axis=1)
        # Every replica returns the same, already reduced, values.
        metrics = {name: float(value) for name, value in results[0].items()}
        if not metrics.pop("finite"):
            bad = sorted(name for name, value in metrics.items() if not math.isfinite(value))
            raise NonFiniteError(bad or ["loss"], version)
        self._num_steps.assign_add(1)
        lag = version - np.asarray(batch.policy_version, dtype=np.int64)
        metrics["policy_lag_mean"] = float(lag.mean())
        metrics["policy_lag_max"] = float(lag.max())
        return metrics

    def run(self, batches: Iterable[Unroll], num_steps: int | None = None) -> dict[str, float]:
        """Calls `step` on each batch, stopping after `num_steps` steps if given.

        Returns:
          The last step's metrics (`{}` if no step ran).
        """
        if num_steps is not None and num_steps < 0:
            raise ValueError(f"num_steps must be >= 0 or None, got {num_steps}")
        metrics: dict[str, float] = {}
        if num_steps == 0:
            return metrics
        for done, batch in enumerate(batches, start=1):
            metrics = self.step(batch)
            if num_steps is not None and done >= num_steps:
                break
        return metrics

    def get_weights(self) -> tuple[int, list[np.ndarray]]:
        """`(version, weights)`: the number of updates applied and the agent's weights."""
        return self.num_steps, self._agent.get_weights()

    def save(self, directory: str | os.PathLike) -> str:
        """Checkpoints agent weights (and the agent's `non_trainable_variables`, if it
        has any), optimizer state and step counter; returns the path.

        Keeps the 3 most recent checkpoints in `directory`.
        """
        directory = os.fspath(directory)
        manager = self._managers.get(directory)
        if manager is None:
            manager = self._managers[directory] = tf.train.CheckpointManager(
                self._checkpoint, directory, max_to_keep=3
            )
        return manager.save(checkpoint_number=self.num_steps)

    def restore(self, directory: str | os.PathLike) -> None:
        """Restores the newest readable checkpoint in `directory` (written by `save`).

        The learning-rate schedule continues from the restored optimizer step.

        Raises:
          FileNotFoundError: if `directory` holds no checkpoint.
        """
        # Every variable exists already (built in __init__), so the restore is
        # immediate; a mismatch (other agent architecture) raises here, and an
        # unreadable newest checkpoint falls back to the one before it.
        restore_newest_readable(self._checkpoint, directory)


def _zero_unless(condition: tf.Tensor, grad: Any) -> Any:
    """`grad` if `condition`, else zeros of its shape (NaN * 0 would stay NaN)."""
    if grad is None:
        return None
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(tf.where(condition, grad.values, tf.zeros_like(grad.values)),
                                grad.indices, grad.dense_shape)
    return tf.where(condition, grad, tf.zeros_like(grad))


def _scale_gradient(grad: Any, scale: tf.Tensor) -> Any:
    if grad is None:
        return None
    if isinstance(grad, tf.IndexedSlices):  # e.g. from an embedding lookup
        return tf.IndexedSlices(grad.values * tf.cast(scale, grad.values.dtype), grad.indices,
                                grad.dense_shape)
    return grad * tf.cast(scale, grad.dtype)
