"""The Replicator: TF-Replicator's programming model on top of `tf.distribute`.

A user writes the computation of ONE replica as `step_fn(replica_inputs)`; the
Replicator runs it once per device in a single graph (in-graph replication with
`MirroredStrategy` on one host, `TPUStrategy` on TPU cores) or once per device on
every host (between-graph replication with `MultiWorkerMirroredStrategy`).
Inside `step_fn` the MPI-like primitives (`all_reduce`, `all_gather`, `broadcast`,
`replica_id`, `num_replicas`; in `learner/collectives.py`, re-exported here) talk to
the other replicas. All communication goes through `tf.distribute`; nothing here
implements a collective of its own.

    replicator = Replicator("cpu:2")
    with replicator.scope():                # every variable is created here
        model = make_model()
        optimizer = replicator.wrap_optimizer(keras.optimizers.SGD(0.1))
        optimizer.build(model.trainable_variables)

    def step_fn(batch):                     # one replica's share of the batch
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(batch["x"]) - batch["y"]))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    mean_loss = replicator.reduce("mean", replicator.run(step_fn, input_fn()))

Gradient semantics: `wrap_optimizer` MEAN-reduces gradients over replicas (scale
a loss that is a SUM over the shard, as IMPALA's, by `num_replicas()`). A Keras
optimizer used unwrapped SUMS them instead: N times the mean gradient.

Compiled steps: `run(step_fn, ...)` traces `step_fn` into a graph at its first call and
reuses that graph while later calls pass an EQUAL step function: the same object, or a
bound method of the same object (`repeat` keys on the pair `(step_fn, until)`). It is
`tf.function`'s rule, where a new Python function is a new trace, and what TF-Replicator
(Buchlovsky et al. 2019) gets from graph mode, where `run` builds the step once and a
session executes it. The cache is bounded: a Replicator keeps the compiled steps of its
`STEP_CACHE_SIZE` (8) most recently used step functions, each with the traces of its
`LAYOUT_CACHE_SIZE` (8) most recently used input layouts (`learner/host_batch.py`). A
lambda or closure made anew for every call is therefore traced at every call (slow), but
does not pile up graphs without end; and the Replicator warns (`RuntimeWarning`) when
compiling a new step drops one that served a single call, which is what such lambdas make it
do once the cache is full. Dropping a step that was reused (a discarded `Learner`'s, on a
Replicator shared by many) is the bound at work, and silent.

Why a bound and not an explicit `step = replicator.compile(step_fn)`: every caller here
(the `Learner`, `HostSync`, the examples) already keeps one step function for its whole
life, `run(step_fn, inputs)` is the shape of TF-Replicator's and `strategy.run`'s API, and
`run` would need its cache anyway. A second way to the same compiled step would be more
API for no caller; the bound and the warning cover the one way to misuse `run`.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

import tensorflow as tf

from impala_rep.config.validation import is_int
from impala_rep.devices import DeviceSpec, parse_devices
from impala_rep.learner.collectives import (
    CrossReplicaBatchNorm,
    all_gather,
    all_reduce,
    all_reduce_gradients,
    broadcast,
    num_replicas,
    replica_id,
)
from impala_rep.learner.host_batch import BoundedCache, HostFeed, TracedCalls, feed, packable
from impala_rep.learner.strategies import make_strategy

__all__ = [
    "DeviceSpec",
    "Replicator",
    "STEP_CACHE_SIZE",
    "StagedInputs",
    "CrossReplicaBatchNorm",
    "parse_devices",
    "all_reduce",
    "all_gather",
    "broadcast",
    "replica_id",
    "num_replicas",
    "all_reduce_gradients",
]

# Step functions a Replicator keeps compiled (see the module docstring). A program uses a few
# (the Learner one, its HostSync two); a new one per call is what the bound is for.
STEP_CACHE_SIZE = 8


class StagedInputs(NamedTuple):
    """A host batch checked and converted ahead of its step by `Replicator.stage`."""

    feed: HostFeed
    batch_axis: int


class Replicator:
    """Replicates a per-replica `step_fn` over devices (see the module docstring).

    Args:
      devices: "auto" (all GPUs, else the CPU), "cpu", "cpu:N" (N logical CPU
        devices; must be asked before TensorFlow initialises), "gpu", "gpu:N",
        "tpu" or "tpu:NAME".
      strategy: an existing `tf.distribute.Strategy` to use instead of `devices`,
        e.g. a `MultiWorkerMirroredStrategy` for between-graph replication across
        hosts. Each host then passes its own host batch to `run`, which is split
        over that host's local replicas.
      jit_compile: compile each step with XLA (`tf.function(jit_compile=True)`).
        One local replica only: XLA could not place a step over several logical
        CPU devices (their mirrored variables live on other devices). On one CPU
        it makes the MLP's learner step cheaper and the CNNs' dearer
        (docs/notebook.md, "Where the CPU goes").
    """

    def __init__(
        self,
        devices: str = "auto",
        *,
        strategy: tf.distribute.Strategy | None = None,
        jit_compile: bool = False,
    ):
        self._strategy = strategy if strategy is not None else make_strategy(devices)
        self._devices = devices if strategy is None else type(strategy).__name__
        if jit_compile and self.num_replicas > 1:  # across hosts too: untested there
            raise ValueError(
                f"jit_compile needs one replica, got {self.num_replicas} "
                f"from devices {self._devices!r}; use one device or no XLA"
            )
        self._jit_compile = bool(jit_compile)
        # One compiled function per step_fn (a concrete function per input layout), for the
        # most recently used ones: tracing once and reusing the graph makes a step cheap.
        self._compiled = BoundedCache(STEP_CACHE_SIZE)

    def __repr__(self) -> str:
        return f"Replicator(devices={self._devices!r}, num_replicas={self.num_replicas})"

    @property
    def strategy(self) -> tf.distribute.Strategy:
        """The underlying `tf.distribute.Strategy`, for anything this API does not cover."""
        return self._strategy

    @property
    def num_replicas(self) -> int:
        """Replicas across all hosts."""
        return self._strategy.num_replicas_in_sync

    @property
    def num_local_replicas(self) -> int:
        """Replicas on this host: the number of shards `run` splits a host batch into."""
        return len(self._strategy.extended.worker_devices)

    def scope(self) -> contextlib.AbstractContextManager:
        """Context in which to create every variable, optimizer state included.

        Variables created lazily during the first replicated call (e.g. optimizer
        slots) fail under MirroredStrategy, so build them here first.
        """
        return self._strategy.scope()

    def run(self, step_fn: Callable[[Any], Any], inputs: Any, batch_axis: int = 0) -> list[Any]:
        """Runs `step_fn` once per local replica on an even split of `inputs`.

        Args:
          step_fn: the computation of one replica, called with that replica's slice
            of `inputs` (same nested structure). Traced into a graph at its first call
            and reused while the same function object comes back (a new lambda per call
            is traced at every call; see the module docstring); it may call this
            module's cross-replica primitives.
          inputs: the host batch: a nested structure (dict, tuple, list) of arrays
            or tensors, all with the same size along `batch_axis`; or `stage`'s result
            for it (staged with the same `batch_axis`).
          batch_axis: the axis to split along, e.g. 1 for time-major `[T, B]` data.

        Returns:
          A list with one result per local replica, in replica order.

        Raises:
          ValueError: if the batch size does not divide evenly over the replicas.
        """
        staged = self._staged(inputs, batch_axis, "run")
        compiled = self._compiled.get(step_fn)
        if compiled is None:
            compiled = self._keep(step_fn, step_fn, self._compile(step_fn))
        return list(compiled(staged.feed, batch_axis))

    def stage(self, inputs: Any, *, batch_axis: int = 0) -> StagedInputs:
        """`inputs` checked and converted for `run` or `repeat`, ahead of the call.

        The host's share of a step (checking the split, packing the arrays into one
        buffer, converting it to a tensor) done before it: a thread can stage the next
        batch while the current step runs, as the IMPALA learner's staging area does.
        Thread-safe; `run`/`repeat` with the result skip that work.

        Raises:
          ValueError: as `run` does, for a batch that does not split evenly.
        """
        return self._staged(inputs, batch_axis, "stage")

    def _staged(self, inputs: Any, batch_axis: int, caller: str) -> StagedInputs:
        if not isinstance(inputs, StagedInputs):
            return StagedInputs(feed(inputs, self._checked(inputs, batch_axis, caller)), batch_axis)
        if inputs.batch_axis != batch_axis:
            raise ValueError(
                f"inputs staged with batch_axis={inputs.batch_axis} given with "
                f"batch_axis={batch_axis}"
            )
        return inputs

    def repeat(
        self,
        step_fn: Callable[[Any], Any],
        inputs: Any,
        *,
        times: int,
        batch_axis: int = 0,
        until: Callable[[Any], Any] | None = None,
    ) -> tuple[list[Any], int]:
        """Up to `times` steps on the same inputs in ONE call of one traced graph: for
        several steps on one batch (sample reuse), with no host round trip between them.

        Args:
          step_fn: as for `run`.
          inputs: as for `run`.
          batch_axis: as for `run`.
          times: the most steps to run (an int >= 1).
          until: traced with replica 0's result of a step, returns a boolean scalar
            tensor; the loop ends after the first step for which it is True. It must be
            True on every replica and host alike (a function of all-reduced values), or
            their collectives fall out of step.

        `step_fn` is traced once and the graph's loop holds one copy of it (XLA compiles
        one), started from zeros of its results; a step whose results are not all dense
        tensors of a fixed shape runs once before the loop instead.

        Returns:
          (the last step's results, one per local replica as `run` returns them; the
          number of steps run).
        """
        if not is_int(times) or times < 1:
            raise ValueError(f"times must be an integer >= 1, got {times!r}")
        staged = self._staged(inputs, batch_axis, "repeat")
        compiled = self._compiled.get((step_fn, until))
        if compiled is None:
            compiled = self._keep((step_fn, until), step_fn, self._compile_repeated(step_fn, until))
        results, done = compiled(staged.feed, batch_axis, tf.constant(times, tf.int32))
        return list(results), int(done)

    def _keep(self, key: Any, step_fn: Callable, compiled: TracedCalls) -> TracedCalls:
        """`compiled` kept for `key`; warns if that dropped a step that served one call."""
        if self._compiled.put(key, compiled) == 0:
            name = getattr(step_fn, "__qualname__", type(step_fn).__name__)
            warnings.warn(
                f"Replicator: compiling step function {name} dropped the least recently "
                f"used of the {self._compiled.size} compiled steps it keeps, compiled for a "
                "single call. A lambda or closure made anew for every call is traced at "
                "every call: make the step function once and pass that same object",
                RuntimeWarning,
                stacklevel=3,  # the caller of run or repeat
            )
        return compiled

    def _checked(self, inputs: Any, batch_axis: int, caller: str = "run") -> list:
        """`inputs`' leaves, each checked to split evenly along `batch_axis`: numpy arrays
        of numbers or booleans as they are (they travel packed, `learner/host_batch.py`),
        anything else as a tensor."""
        flat = [x if packable(x) else tf.convert_to_tensor(x) for x in tf.nest.flatten(inputs)]
        if not flat:
            raise ValueError(f"Replicator.{caller} needs at least one input array")
        shards = self.num_local_replicas
        for leaf in flat:
            shape = tuple(leaf.shape)  # eager tensors and arrays: every dimension known
            if len(shape) <= batch_axis:
                raise ValueError(f"input of shape {shape} has no batch_axis={batch_axis}")
            if shape[batch_axis] % shards:
                raise ValueError(
                    f"batch of size {shape[batch_axis]} along axis {batch_axis} does not split "
                    f"evenly over {shards} replicas; use a multiple of {shards}"
                )
        return flat

    def _compile(self, step_fn: Callable) -> TracedCalls:
        strategy, shards = self._strategy, self.num_local_replicas

        def replicated(inputs, batch_axis):
            return _replicated_step(
                strategy, shards, step_fn, _distributed(strategy, shards, inputs, batch_axis)
            )()

        return TracedCalls(replicated, jit_compile=self._jit_compile)

    def _compile_repeated(self, step_fn: Callable, until: Callable | None) -> TracedCalls:
        strategy, shards = self._strategy, self.num_local_replicas
        # A nested tf.function, as the step is: AutoGraph converts `until` (the Replicator's
        # own functions are traced as written).
        stop = tf.function(until) if until is not None else (lambda result: tf.constant(False))

        def repeated(inputs, batch_axis, times):
            per_replica = _distributed(strategy, shards, inputs, batch_axis)  # split once
            step = _replicated_step(strategy, shards, step_fn, per_replica)
            outputs = step.get_concrete_function().structured_outputs
            if not all(
                isinstance(t, tf.Tensor) and t.shape.is_fully_defined()
                for t in tf.nest.flatten(outputs)
            ):
                # No zeros to start the loop from (a shape known only when it runs, a sparse
                # or missing result): the first step goes before it, a second copy in the graph.
                first = step()
                return _repeat_loop(step, stop, times, tf.constant(1), first, stop(first[0]))
            zeros = tf.nest.map_structure(lambda t: tf.zeros(t.shape, t.dtype), outputs)
            return _repeat_loop(step, stop, times, tf.constant(0), zeros, tf.constant(False))

        return TracedCalls(repeated, jit_compile=self._jit_compile)

    def reduce(self, op: str, results: Sequence[Any]) -> Any:
        """Reduces `run`'s per-replica results (nested structures) with "sum" or "mean"."""
        if op not in ("sum", "mean"):
            raise ValueError(f"bad reduce op {op!r}: expected 'sum' or 'mean'")
        if not results:
            raise ValueError("Replicator.reduce needs at least one result")
        reducer = tf.add_n if op == "sum" else (lambda xs: tf.add_n(xs) / len(xs))
        return tf.nest.map_structure(
            lambda *xs: reducer([tf.convert_to_tensor(x) for x in xs]), *results
        )

    def wrap_optimizer(self, optimizer: Any) -> ReplicatedOptimizer:
        """Returns `optimizer` wrapped so that `apply_gradients` all-reduces first.

        Create (or `build`) the optimizer inside `scope()`.
        """
        return ReplicatedOptimizer(optimizer)


def _replicated_step(
    strategy: tf.distribute.Strategy, shards: int, step_fn: Callable, per_replica: Any
) -> Callable[[], list[Any]]:
    """Inside a traced function: `step_fn` on every local replica of `per_replica`, as a
    nested `tf.function`: traced once however often it is called, and AutoGraph converts
    `step_fn` as `tf.function` would (and this small closure with it).

    The Replicator's other functions are traced without AutoGraph (`TracedCalls`): its
    conversion of them would add seconds to every learner's first step (docs/notebook.md,
    "Where the CPU goes")."""

    def step():
        return _per_replica_list(strategy, strategy.run(step_fn, args=(per_replica,)), shards)

    return tf.function(step)


def _repeat_loop(
    step: Callable,
    stop: Callable,
    times: tf.Tensor,
    done: tf.Tensor,
    results: Any,
    stopped: tf.Tensor,
) -> tuple[Any, tf.Tensor]:
    """`step()` until `times` steps are done or `stop(results[0])`, continuing from `done`
    steps whose last `results` (and whether they stopped) are given; returns the last
    results and the steps run. The loop holds one copy of the step, which XLA compiles once."""

    def body(done, stopped, results):
        results = step()
        return done + 1, stop(results[0]), results

    done, _, results = tf.while_loop(
        lambda done, stopped, results: tf.logical_and(done < times, tf.logical_not(stopped)),
        body,
        (done, stopped, results),
    )
    return results, done


def _distributed(strategy: tf.distribute.Strategy, shards: int, inputs: Any, batch_axis: int):
    """Inside a traced function: `inputs` split into one shard per local replica."""
    split = [tf.split(x, shards, axis=batch_axis) for x in tf.nest.flatten(inputs)]

    def shard_for(context: tf.distribute.experimental.ValueContext):
        # Global replica ids run host by host, so the local shard index is the
        # id modulo the replicas on this host (identity on a single host).
        local = context.replica_id_in_sync_group % shards
        return tf.nest.pack_sequence_as(inputs, [parts[local] for parts in split])

    return strategy.experimental_distribute_values_from_function(shard_for)


def _per_replica_list(strategy: tf.distribute.Strategy, outputs: Any, shards: int) -> list[Any]:
    """Turns `strategy.run`'s nested per-replica outputs into a list of nests."""
    flat = tf.nest.flatten(outputs)
    local = [strategy.experimental_local_results(x) for x in flat]
    return [tf.nest.pack_sequence_as(outputs, [parts[i] for parts in local]) for i in range(shards)]


class ReplicatedOptimizer:
    """A Keras optimizer whose `apply_gradients` keeps replicas identical.

    In a replica context it MEAN-reduces the gradients over all replicas
    (skipping `None`), then applies the same update on every replica. Outside
    one (no Replicator, or a single device) it simply applies the gradients.
    Attributes not defined here (`build`, `iterations`, `variables`,
    `learning_rate`, ...) are those of the wrapped optimizer.
    """

    def __init__(self, optimizer: Any):
        self._optimizer = optimizer

    @property
    def optimizer(self) -> Any:
        return self._optimizer

    def __getattr__(self, name: str) -> Any:
        return getattr(self._optimizer, name)

    def apply_gradients(self, grads_and_vars: Iterable[tuple[Any, Any]]) -> None:
        """All-reduces (mean, `None` skipped) this replica's gradients, then applies them."""
        pairs = [(g, v) for g, v in grads_and_vars if g is not None]
        if pairs:
            reduced = all_reduce_gradients([g for g, _ in pairs])
            self.apply_reduced_gradients(zip(reduced, [v for _, v in pairs]))

    def apply_reduced_gradients(self, grads_and_vars: Iterable[tuple[Any, Any]]) -> None:
        """Applies gradients that are already reduced (identical on every replica).

        For steps that need the global gradient before applying it, e.g. to clip
        by its global norm: `all_reduce_gradients`, transform, then this.
        """
        pairs = [(g, v) for g, v in grads_and_vars if g is not None]
        if not pairs:
            return
        grads, variables = [g for g, _ in pairs], [v for _, v in pairs]
        context = tf.distribute.get_replica_context()
        replicas = 1 if context is None else context.num_replicas_in_sync
        if replicas > 1:
            _warn_if_made_outside_scope(self._optimizer, replicas)
            # Keras 3 optimizers always SUM gradients over replicas in apply_gradients
            # (keras/src/backend/tensorflow/optimizer.py, _all_reduce_sum_gradients), with
            # no public switch to skip it nor a way to update from the cross-replica context.
            # Ours are already the mean, identical on every replica, so hand Keras mean / N:
            # its sum gives back the mean. tests/test_replicator.py pins this (2 replicas == 1).
            grads = [g / replicas for g in grads]
        self._optimizer.apply_gradients(zip(grads, variables))


def _warn_if_made_outside_scope(optimizer: Any, replicas: int) -> None:
    """Warns (once per trace) of optimizer variables every replica updates (not mirrored)."""
    extended = tf.distribute.get_strategy().extended
    outside = [
        v.name
        for v in getattr(optimizer, "variables", ())
        if not extended.variable_created_in_scope(getattr(v, "value", v))
    ]
    if outside:
        warnings.warn(
            f"{len(outside)} optimizer variable(s), first {outside[0]!r}, were created "
            f"outside Replicator.scope(), so each of the {replicas} replicas updates them: "
            "the step counter (and a learning-rate schedule) and slots such as momentum "
            f"advance {replicas} times per step; create and build the optimizer inside scope()",
            RuntimeWarning,
            stacklevel=3,
        )
