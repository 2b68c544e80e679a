"""The IMPALA learner: one replicated V-trace update per batch of unrolls.

The learner is plain TensorFlow driven by a `Replicator`; it knows nothing about
Ray, actors or flags. Everything it needs (agent, replicator, the loss and
optimizer settings, optionally the optimizer and the loss) is passed in:

    replicator = Replicator("cpu:2")
    learner = Learner(agent=MLPAgent(num_actions=2), replicator=replicator,
                      observation_shape=(4,), total_steps=10_000,
                      loss=LossConfig(), optimizer=OptimizerConfig())
    metrics = learner.step(batch)          # batch: an Unroll with B columns
    version, weights = learner.get_weights()

Shapes follow the package convention (see `impala_rep`): an `Unroll` batch is
time-major, `[T+1, B, ...]` for the agent inputs, `[T, B, ...]` for the
transitions, `[B]` for `policy_version` and a nest of `[B, ...]` for
`initial_state`. `B` must be a multiple of the number of local replicas.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from impala_rep.agent import Agent
from impala_rep.config import LossConfig, OptimizerConfig
from impala_rep.config.validation import is_int, is_number
from impala_rep.extensions import Extension, extensions_for
from impala_rep.learner.checkpointing import agent_trackables, restore_newest_readable
from impala_rep.learner.gradients import clip_by_global_norm, zero_unless
from impala_rep.learner.optimizers import make_optimizer as optimizer_from_config
from impala_rep.learner.replicator import (
    ReplicatedOptimizer,
    Replicator,
    all_reduce,
    all_reduce_gradients,
    num_replicas,
)
from impala_rep.learner.staging import StagedBatch, device_batch
from impala_rep.loss_fn import LossFn, apply_loss, impala_loss_fn
from impala_rep.observation_nest import Shape, shape_of
from impala_rep.unroll import Unroll

__all__ = ["Learner", "NonFiniteError"]


class NonFiniteError(FloatingPointError):
    """A learner step produced a NaN or infinite loss or gradient; nothing was applied."""

    def __init__(self, metrics: list[str], step: int):
        self.metrics, self.step = metrics, step
        super().__init__(
            f"non-finite {', '.join(metrics)} at learner step {step}; the update was not applied"
        )


class Learner:
    """Trains an agent with V-trace on batches of unrolls, replicated by a `Replicator`.

    Args:
      agent: an `impala_rep.agent.Agent`; built here, inside `replicator.scope()`.
      replicator: runs the per-replica update on its devices.
      observation_shape: shape of ONE observation (no time or batch dims).
      total_steps: learner steps in the run (an integer >= 1); the default
        optimizer's learning rate decays linearly to 0 over them.
      loss: the loss settings (discount, reward clipping, costs, V-trace
        clipping), handed to `loss_fn` as `config`.
      optimizer: the optimizer settings. `max_grad_norm` is applied here to
        the global gradient; the rest are the default optimizer's.
      make_optimizer: a zero-argument callable returning a new Keras optimizer
        (e.g. plain SGD in tests), used as it is (no decay, no `optimizer`
        settings but `max_grad_norm`). Default: `make_optimizer(optimizer,
        decay_steps=total_steps)`, the paper's RMSProp or Adam as `optimizer` names.
      loss_fn: the per-replica loss, called with keywords as `impala_rep.loss_fn`
        documents; returns a `LossOutput`. Default: `impala_loss_fn`, the IMPALA
        V-trace loss with `loss`' settings.
      loss_grad_norms: also report, for each of the loss's `terms` (the default
        loss's: `pg_loss`, `baseline_loss`, `entropy_loss`, weighted), the global
        norm of its gradient alone as `grad_norm_<term>`: which part drives the
        update. Costs one more backward pass and all-reduce per term.
      autograph: convert the update (the agent's unroll and the loss with it) with
        AutoGraph, as `tf.function` does, so Python control flow on tensors works. False
        traces them as written, seconds less tracing at start-up (docs/notebook.md, "Where
        the CPU goes"), for code with no such control flow (the built-in MLP and losses;
        `train` decides it with `--learner-autograph`).
      extensions: what the agent and `loss_fn` were wrapped with (`impala_rep.extensions`), each
        checked against them: the agent here (`check_agent`) and the loss's output when the
        update is traced (`check_output`). Default: those `loss` turns on
        (`extensions_for(loss)`: `popart`, `rnd_cost`).

    Batch layout on the devices: `Replicator.run` splits every input along ONE axis, so the
    time-major fields go with `batch_axis=1`, `initial_state` leaves `[B, ...]` are expanded to
    `[1, B, ...]` for the split and squeezed back inside the replica, and `policy_version`
    never goes to the devices (policy lag is computed on the host).
    """

    def __init__(
        self,
        *,
        agent: Agent,
        replicator: Replicator,
        observation_shape: Shape,
        total_steps: int,
        # Frozen dataclasses: one instance shared by every call is safe as a default.
        loss: LossConfig = LossConfig(),  # noqa: B008
        optimizer: OptimizerConfig = OptimizerConfig(),  # noqa: B008
        make_optimizer: Callable[[], tf.keras.optimizers.Optimizer] | None = None,
        loss_fn: LossFn | None = None,
        loss_grad_norms: bool = False,
        autograph: bool = True,
        extensions: Sequence[Extension] | None = None,
    ):
        if not is_int(total_steps) or total_steps < 1:
            raise ValueError(f"total_steps must be an integer >= 1, got {total_steps!r}")
        for name, value, cls in (
            ("loss", loss, LossConfig),
            ("optimizer", optimizer, OptimizerConfig),
        ):
            if not isinstance(value, cls):
                raise TypeError(
                    f"{name} must be an impala_rep.{cls.__name__}, got {type(value).__name__}"
                )
        # `train` adds the extensions the config asks for by wrapping the agent and the loss
        # (`impala_rep.extensions`); a plain agent or loss here would train without them,
        # silently. None (auto) is resolved by `train`; given to a Learner by hand it is off.
        self._extensions = tuple(extensions_for(loss) if extensions is None else extensions)
        for extension in self._extensions:
            extension.check_agent(agent)
        self._agent = agent
        self._replicator = replicator
        self._loss_config = loss
        self._max_grad_norm = optimizer.max_grad_norm
        self._loss_fn = impala_loss_fn if loss_fn is None else loss_fn
        self._loss_grad_norms = bool(loss_grad_norms)
        if make_optimizer is None:
            make_optimizer = functools.partial(
                optimizer_from_config, optimizer, decay_steps=int(total_steps)
            )
        with replicator.scope():
            agent.build(shape_of(observation_shape))
            # Made inside the scope: Keras creates the optimizer's step counter in its
            # constructor; made outside, every replica increments it (N per step with N
            # replicas), and a learning-rate schedule would run N times too fast.
            self._optimizer = replicator.wrap_optimizer(make_optimizer())
            # Slots must exist before the first replicated call: variables created
            # while tracing under MirroredStrategy fail.
            self._optimizer.build(list(agent.trainable_variables))
            # Counted inside the compiled update (each replica adds 1, the first replica's
            # add is kept), so a step costs no extra variable dispatch on the host.
            self._num_steps = tf.Variable(
                0,
                dtype=tf.int64,
                trainable=False,
                name="learner_step",
                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
            )
            # Read by the passes' loop in the graph (`_stop_after`); +inf: no target.
            self._target_kl = tf.Variable(math.inf, dtype=tf.float32, trainable=False)
        self._target_kl_value = np.float32(math.inf)
        self._checkpoint = tf.train.Checkpoint(
            optimizer=self._optimizer.optimizer, step=self._num_steps, **agent_trackables(agent)
        )
        self._managers: dict[str, tf.train.CheckpointManager] = {}
        # Replicator caches one compiled function per step_fn (and until) object: keep ours
        # fixed. Without autograph both are traced as written: nothing they call is converted.
        keep = (lambda f: f) if autograph else tf.autograph.experimental.do_not_convert
        self._step_fn, self._stop_fn = keep(self._replica_step), keep(self._stop_after)

    @property
    def agent(self) -> Agent:
        return self._agent

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
        # One replica's copy (all are equal): cheaper than reading the mirrored variable.
        return int(self._replicator.strategy.experimental_local_results(self._num_steps)[0].numpy())

    # --- the replicated update ---------------------------------------------------

    def _replica_step(self, batch: dict[str, Any]) -> tf.Tensor:
        """One replica's update on its shard (B' = B / local replicas columns).

        Args:
          batch: the `staging.device_batch` dict, split along axis 1: time-major fields
            `[T+1, B', ...]` / `[T, B', ...]`, `initial_state` leaves `[1, B', ...]`.

        Returns:
          The scalar metrics stacked in `self._metric_names`' order, identical on
          every replica (already reduced).
        """
        state = tf.nest.map_structure(lambda x: tf.squeeze(x, axis=0), batch["initial_state"])
        variables = list(self._agent.trainable_variables)
        replicas = num_replicas()
        with tf.GradientTape(persistent=self._loss_grad_norms) as tape:
            # The loss hook's contract (keywords, shapes, result) is impala_rep.loss_fn's.
            output = apply_loss(
                self._loss_fn,
                agent=self._agent,
                batch=batch,
                initial_state=state,
                config=self._loss_config,
            )
            for extension in self._extensions:
                extension.check_output(output)
            loss = output.loss
            # The loss is a SUM over this replica's shard (as in the paper), but
            # gradients are MEAN-reduced over replicas. Scaling by the replica count
            # makes that mean the gradient of the sum over the global batch, so the
            # update does not depend on how many devices share the batch.
            scaled_loss = loss * tf.cast(replicas, loss.dtype)
            # Scaled as the loss is (and on the tape), so the parts' norms add up like the update's.
            scaled_terms = (
                {name: term * tf.cast(replicas, term.dtype) for name, term in output.terms.items()}
                if self._loss_grad_norms
                else {}
            )
        grads = tape.gradient(scaled_loss, variables)
        term_norms = {}
        if self._loss_grad_norms:
            for name, term in scaled_terms.items():
                part = [
                    tf.zeros(v.shape, v.dtype) if g is None else g
                    for g, v in zip(tape.gradient(term, variables), variables)
                ]
                term_norms[f"grad_norm_{name}"] = tf.linalg.global_norm(all_reduce_gradients(part))
        del tape

        # Global-norm clipping must see the GLOBAL gradient, which exists only
        # after the all-reduce: reduce once here, clip, and apply the reduced
        # gradients as they are.
        grads, grad_norm = clip_by_global_norm(all_reduce_gradients(grads), self._max_grad_norm)

        # Each group is reduced as the loss declared it; tf.distribute cannot
        # all-reduce an empty structure, so an empty group is skipped.
        metrics = {}
        for group, op in ((output.sums, "sum"), (output.means, "mean")):
            if group:
                metrics.update(all_reduce(dict(group), op=op))
        # A non-finite loss or gradient on any replica must not reach the weights.
        # grad_norm is global already; the loss is summed over replicas so every
        # replica takes the same decision. Zeroed gradients (rather than a tf.cond
        # around the update, which would put the optimizer's cross-replica
        # merge_call inside a cond branch) leave the weights unchanged; `step`
        # then raises, so the optimizer's own step/slot decay for this update is
        # never checkpointed or published.
        finite = tf.logical_and(
            tf.math.is_finite(grad_norm), tf.math.is_finite(all_reduce(loss, op="sum"))
        )
        grads = zero_unless(finite, grads)

        # Read before applying: the rate this update uses (Keras evaluates a
        # schedule at the optimizer's step counter, which apply_gradients advances).
        learning_rate = tf.cast(tf.convert_to_tensor(self._optimizer.learning_rate), tf.float32)
        self._optimizer.apply_reduced_gradients(zip(grads, variables))
        if output.after_update is not None:  # e.g. PopArt's statistics, after the update
            output.after_update(applied=finite)
        steps = self._num_steps.assign_add(tf.cast(finite, tf.int64))
        metrics = {
            **metrics,
            "grad_norm": grad_norm,
            "learning_rate": learning_rate,
            "finite": finite,
            **term_norms,
            # The counter after it: no variable read per batch on the host (~9% of the
            # learner thread in py-spy). float64 holds it exactly up to 2**53.
            "learner_steps": steps,
        }
        # One vector: one conversion per update; names recorded while tracing (order fixed).
        self._metric_names = list(metrics)
        return tf.stack([tf.cast(v, tf.float64) for v in metrics.values()])

    def _stop_after(self, metrics: tf.Tensor) -> tf.Tensor:
        """In the passes' loop: stop after a non-finite update, or once `kl` (all-reduced,
        so every replica and host agrees) is over the target."""
        names = self._metric_names
        stop = tf.equal(metrics[names.index("finite")], 0.0)
        if "kl" in names:
            stop = tf.logical_or(
                stop, metrics[names.index("kl")] > tf.cast(self._target_kl, tf.float64)
            )
        return stop

    # --- public API --------------------------------------------------------------

    def prepare(self, batch: Unroll) -> StagedBatch:
        """`batch` made ready for `step` (checked, cast, packed, converted) ahead of it, so a
        thread can stage the next batch while a step runs (`learner/staging.py`)."""
        return StagedBatch(
            self._replicator.stage(device_batch(batch), batch_axis=1),
            np.asarray(batch.policy_version, dtype=np.int64),
        )

    def step(
        self, batch: Unroll | StagedBatch, *, passes: int = 1, target_kl: float | None = None
    ) -> dict[str, float]:
        """Applies up to `passes` replicated updates on a batch of `B` unrolls (default one).

        Args:
          batch: an `Unroll` with `B` columns (a multiple of the local replicas), or
            `prepare`'s result for one. Keep `T`, `B` and the observation shape fixed:
            the update is compiled once for the first batch's shapes.
          passes: updates on this batch (sample reuse), in one call of one graph
            (`Replicator.repeat`): the batch goes to the devices once for all of them.
          target_kl: stop the passes after the first whose loss metric `kl` (the actors'
            policy against the weights that pass started from) exceeds it, as PPO stops
            its epochs; the learning-rate schedule still counts every planned pass. None:
            every pass. Needs a loss that reports `kl` (ValueError after the first batch).

        Returns:
          Python floats of the last update: the loss's metrics for the whole batch
          (its `sums` summed over replicas, its `means` averaged; `impala_loss_fn`'s are
          `loss`, `pg_loss`, `baseline_loss`, `entropy_loss` and `entropy`,
          `vtrace_rho_clipped_fraction`, `rho_mean`, `advantage_mean`, `value_mean`),
          `grad_norm` (global, before clipping), `learning_rate` (the rate this update
          used), `passes` (the updates this call applied), `learner_steps` (`num_steps`
          after them), and `policy_lag_mean` / `policy_lag_max`: the number of updates
          between the weights that produced each unroll and the weights the FIRST update
          starts from (`num_steps - policy_version`).

        Raises:
          NonFiniteError: the loss or the gradient was NaN or infinite. That update
            changed neither the weights nor the step counter (earlier passes stay).
        """
        if not is_int(passes) or passes < 1:
            raise ValueError(f"passes must be an integer >= 1, got {passes!r}")
        if target_kl is not None and not (is_number(target_kl) and target_kl > 0):
            raise ValueError(f"target_kl must be a number > 0 or None, got {target_kl!r}")
        target = np.float32(math.inf if target_kl is None else target_kl)
        if target != self._target_kl_value:  # the variable's value, kept here: not read per batch
            self._target_kl.assign(target)
            self._target_kl_value = target
        # The passes loop in the graph, ending early at a non-finite update or at the target.
        staged = batch if isinstance(batch, StagedBatch) else self.prepare(batch)
        results, done = self._replicator.repeat(
            self._step_fn, staged.inputs, times=passes, batch_axis=1, until=self._stop_fn
        )
        metrics = dict(zip(self._metric_names, results[0].numpy().tolist()))
        finite, steps = metrics.pop("finite"), int(metrics.pop("learner_steps"))
        version = steps - done + (0 if finite else 1)  # before this call: each finite pass counted
        if not finite:
            bad = sorted(name for name, value in metrics.items() if not math.isfinite(value))
            raise NonFiniteError(bad or ["loss"], steps)
        if target_kl is not None and "kl" not in metrics:
            raise ValueError(
                "target_kl needs a loss that reports the metric 'kl'; this one "
                "reports " + ", ".join(metrics)
            )
        if done < passes:
            # Stopped at the target. The schedule is a function of the update count;
            # skipping ahead keeps its end at the run's last frame.
            self._optimizer.iterations.assign_add(passes - done)
        metrics["passes"] = float(done)
        metrics["learner_steps"] = float(steps)
        lag = version - staged.policy_version
        metrics["policy_lag_mean"] = float(lag.mean())
        metrics["policy_lag_max"] = float(lag.max())
        return metrics

    def run(self, batches: Iterable[Unroll], num_steps: int | None = None) -> dict[str, float]:
        """Calls `step` on each batch, stopping after `num_steps` steps if given; returns the
        last step's metrics (`{}` if no step ran)."""
        if num_steps is not None and num_steps < 0:
            raise ValueError(f"num_steps must be >= 0 or None, got {num_steps}")
        metrics: dict[str, float] = {}
        for done, batch in enumerate(batches if num_steps != 0 else (), start=1):
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

    def align_schedule(self, position: int) -> None:
        """Moves the optimizer's step counter, where the learning-rate schedule is evaluated,
        to `position` (the learner step at which a run of this batch shape would have
        consumed the frames done so far). The learner step itself is left alone.

        A resumed run whose batch size or unroll length changed has another number of
        steps in total; without this its schedule would continue at the restored step
        count, i.e. at another fraction of the run than the frames done.
        """
        if not is_int(position) or position < 0:
            raise ValueError(f"position must be an integer >= 0, got {position!r}")
        self._optimizer.iterations.assign(position)

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
