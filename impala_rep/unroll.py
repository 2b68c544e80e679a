"""The unroll: what an actor records and the learner trains on.

Time-major, following the package convention (see `impala_rep`). One actor
steps `E` environments together and emits one `Unroll` with batch `E`; the
learner concatenates unrolls along the batch axis (axis 1 of `[T, B]` fields,
axis 0 of `[B]` fields).

The layout is declared once, in `FIELDS`: each field's time steps, dtype, trailing
shape and meaning. The `Unroll` tuple's field order, `TIME_MAJOR_DTYPES`, the
actor's buffers (`UnrollSpec.empty`), the user-code check's batch of zeros
(`UnrollSpec.zeros`), the memory estimate (`UnrollSpec.column_bytes`) and the table
below (`markdown_table`, written here by docs/generate.py) all derive from it.

<!-- generated:unroll-fields -->
| field | shape | dtype | meaning |
|---|---|---|---|
| observations | [T+1, B, *obs] | env's | obs[0..T]; obs[T] only bootstraps |
| prev_actions | [T+1, B, *act] | action's | agent input: the action before obs[t] (0 at a start) |
| prev_rewards | [T+1, B] | float32 | agent input: reward on reaching obs[t] (0 at episode start) |
| first | [T+1, B] | bool | obs[t] starts an episode |
| actions | [T, B, *act] | action's | action taken at obs[t] |
| rewards | [T, B] | float32 | raw reward of transition t -> t+1 |
| terminated | [T, B] | bool | the episode ended in a terminal state at t -> t+1 |
| truncated | [T, B] | bool | the episode was cut (time limit) at t -> t+1 |
| truncation_values | [T, B] | float32 | the cut episode's bootstrap value, or 0 (see below) |
| behaviour_logits | [T, B, P] | float32 | the actor's policy parameters at obs[t] |
| initial_state | nest of [B, ...] | agent's | the recurrent state before obs[0] (`()` if none) |
| policy_version | [B] | int64 | learner step whose weights produced this unroll |
<!-- /generated -->

When an episode ends at t -> t+1 the environment is reset in the same step, so
obs[t+1] is the new episode's first observation and first[t+1] is True. The
final observation of an episode cut by a time limit is therefore not in the
unroll; its value, which the cut episode's return bootstraps from, is: where
truncated (and not terminated) at t -> t+1, `truncation_values[t]` is the acting
agent's value of the cut episode's final observation, its bootstrap; it is 0
elsewhere (see `impala_rep.transitions`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, NamedTuple

import numpy as np

from impala_rep.observation_nest import Shape, dtype_of, is_nest, map_leaves, shape_of

__all__ = [
    "Unroll",
    "concat_unrolls",
    "slice_columns",
    "EpisodeStats",
    "TIME_MAJOR_DTYPES",
    "FieldSpec",
    "FIELDS",
    "UnrollSpec",
    "markdown_table",
]

# A field's time steps: its leading axis, before the batch.
OBSERVATION_STEPS = "T+1"  # obs[0..T]
TRANSITION_STEPS = "T"  # the transitions t -> t+1, t in 0..T-1
PER_COLUMN = "column"  # no time axis: once per column, the batch on axis 0

# A field's trailing shape, after the batch.
SCALAR = "scalar"  # none
OBSERVATION = "observation"  # the env's observation shape
NUM_ACTIONS = "num_actions"  # P: the policy's parameters (A logits for a categorical)
ACTION = "action"  # the action space's shape: () for Discrete, (n,) for MultiDiscrete or Box
AGENT_STATE = "agent state"  # a nest of the agent's own leaves, each [B, ...]

# A dtype a field takes from elsewhere than the schema.
OBSERVATION_DTYPE = "observation dtype"  # the env's
AGENT_DTYPE = "agent dtype"  # the agent's leaves' own
ACTION_DTYPE = "action dtype"  # int32 for discrete actions, float32 for continuous ones


@dataclasses.dataclass(frozen=True)
class FieldSpec:
    """One field of the unroll: how many time steps, which dtype, what trails the batch."""

    name: str
    steps: str  # OBSERVATION_STEPS, TRANSITION_STEPS or PER_COLUMN
    dtype: Any  # a numpy dtype, OBSERVATION_DTYPE or AGENT_DTYPE
    trailing: str  # SCALAR, OBSERVATION, NUM_ACTIONS or AGENT_STATE
    meaning: str

    @property
    def batch_axis(self) -> int:
        """Where the columns are: after the time axis, if any."""
        return 0 if self.steps == PER_COLUMN else 1

    @property
    def is_array(self) -> bool:
        """An array the schema sizes, or a nest of them for nested observations (the agent's
        state is a nest the agent defines)."""
        return self.trailing != AGENT_STATE


# The unroll's layout, in the `Unroll` tuple's order: the one statement of it.
FIELDS: tuple[FieldSpec, ...] = (
    FieldSpec(
        "observations",
        OBSERVATION_STEPS,
        OBSERVATION_DTYPE,
        OBSERVATION,
        "obs[0..T]; obs[T] only bootstraps",
    ),
    FieldSpec(
        "prev_actions",
        OBSERVATION_STEPS,
        ACTION_DTYPE,
        ACTION,
        "agent input: the action before obs[t] (0 at a start)",
    ),
    FieldSpec(
        "prev_rewards",
        OBSERVATION_STEPS,
        np.float32,
        SCALAR,
        "agent input: reward on reaching obs[t] (0 at episode start)",
    ),
    FieldSpec("first", OBSERVATION_STEPS, np.bool_, SCALAR, "obs[t] starts an episode"),
    FieldSpec("actions", TRANSITION_STEPS, ACTION_DTYPE, ACTION, "action taken at obs[t]"),
    FieldSpec("rewards", TRANSITION_STEPS, np.float32, SCALAR, "raw reward of transition t -> t+1"),
    FieldSpec(
        "terminated",
        TRANSITION_STEPS,
        np.bool_,
        SCALAR,
        "the episode ended in a terminal state at t -> t+1",
    ),
    FieldSpec(
        "truncated",
        TRANSITION_STEPS,
        np.bool_,
        SCALAR,
        "the episode was cut (time limit) at t -> t+1",
    ),
    FieldSpec(
        "truncation_values",
        TRANSITION_STEPS,
        np.float32,
        SCALAR,
        "the cut episode's bootstrap value, or 0 (see below)",
    ),
    FieldSpec(
        "behaviour_logits",
        TRANSITION_STEPS,
        np.float32,
        NUM_ACTIONS,
        "the actor's policy parameters at obs[t]",
    ),
    FieldSpec(
        "initial_state",
        PER_COLUMN,
        AGENT_DTYPE,
        AGENT_STATE,
        "the recurrent state before obs[0] (`()` if none)",
    ),
    FieldSpec(
        "policy_version",
        PER_COLUMN,
        np.int64,
        SCALAR,
        "learner step whose weights produced this unroll",
    ),
)


class Unroll(NamedTuple):
    """One actor's unroll, or a batch of them: the fields `FIELDS` declares."""

    observations: Any  # an array, or a dict of them (`impala_rep.observation_nest`)
    prev_actions: np.ndarray
    prev_rewards: np.ndarray
    first: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    truncation_values: np.ndarray
    behaviour_logits: np.ndarray
    initial_state: Any
    policy_version: np.ndarray

    @property
    def num_columns(self) -> int:
        """B: the unrolls (env columns) side by side."""
        return int(self.actions.shape[1])

    @property
    def num_frames(self) -> int:
        """Environment steps recorded: T * B."""
        return int(self.actions.shape[0] * self.actions.shape[1])


class EpisodeStats(NamedTuple):
    """Returns and lengths of the episodes an actor finished (1-D, any length), and
    optionally the moments of its envs' running discounted returns over the unroll.

    `return_moments`: `(count, mean, variance)` of `G_t = r_t + discount * G_{t-1}`
    (reset after an episode's last step) over the unroll's `T x E` steps, which the
    learner's reward scaling averages (`LossConfig.normalize_rewards`); None when
    the actor keeps none.
    """

    returns: np.ndarray
    lengths: np.ndarray
    return_moments: tuple[float, float, float] | None = None


if Unroll._fields != tuple(field.name for field in FIELDS):
    raise RuntimeError(f"Unroll's fields {Unroll._fields} are not FIELDS' names, in order")

# The time-major fields and their dtypes (None: the environment's observation dtype, or the
# action's), from `FIELDS`. Their batch is axis 1; `policy_version` and every leaf of
# `initial_state` keep it on axis 0.
TIME_MAJOR_DTYPES: dict[str, Any] = {
    field.name: None if field.dtype in (OBSERVATION_DTYPE, ACTION_DTYPE) else field.dtype
    for field in FIELDS
    if field.steps != PER_COLUMN
}


@dataclasses.dataclass(frozen=True)
class UnrollSpec:
    """The sizes that make `FIELDS` concrete for one run: `T`, the env's observation
    shape and dtype, the policy's parameters `P` (`num_actions`: A logits for a
    categorical, `impala_rep.distributions` in general) and the action's shape and dtype
    (a `Discrete` space's by default). Each array field's shape is `[steps, B, *trailing]`
    (`[B, *trailing]` without a time axis). Observations that are a nest
    (`impala_rep.observation_nest`: a dict of shapes and one of dtypes) are a dict of such
    arrays, one per part."""

    unroll_length: int
    observation_shape: Shape
    observation_dtype: Any
    num_actions: int
    action_shape: tuple[int, ...] = ()
    action_dtype: Any = np.int32

    def __post_init__(self):
        object.__setattr__(self, "observation_shape", shape_of(self.observation_shape))
        object.__setattr__(
            self, "observation_dtype", dtype_of(self.observation_dtype, self.observation_shape)
        )
        object.__setattr__(self, "action_shape", tuple(int(d) for d in self.action_shape))
        object.__setattr__(self, "action_dtype", np.dtype(self.action_dtype))

    @classmethod
    def for_distribution(
        cls, distribution, *, unroll_length: int, observation_shape, observation_dtype
    ) -> UnrollSpec:
        """The spec of an agent acting with `distribution` (`impala_rep.distributions`)."""
        return cls(
            unroll_length=unroll_length,
            observation_shape=observation_shape,
            observation_dtype=observation_dtype,
            num_actions=distribution.num_params,
            action_shape=distribution.action_shape,
            action_dtype=distribution.action_dtype,
        )

    def field_layout(self, field: FieldSpec, num_columns: int) -> Any:
        """`field`'s shape and dtype in an unroll of `num_columns` columns (an array field);
        for nested observations a dict of them, one per part."""
        if field.trailing == OBSERVATION and is_nest(self.observation_shape):
            return {
                key: dataclasses.replace(
                    self, observation_shape=shape, observation_dtype=self.observation_dtype[key]
                ).field_layout(field, num_columns)
                for key, shape in self.observation_shape.items()
            }
        steps = {
            OBSERVATION_STEPS: (self.unroll_length + 1,),
            TRANSITION_STEPS: (self.unroll_length,),
            PER_COLUMN: (),
        }[field.steps]
        trailing = {
            SCALAR: (),
            OBSERVATION: self.observation_shape,
            NUM_ACTIONS: (self.num_actions,),
            ACTION: self.action_shape,
        }[field.trailing]
        dtype = {OBSERVATION_DTYPE: self.observation_dtype, ACTION_DTYPE: self.action_dtype}.get(
            field.dtype, field.dtype
        )
        return (*steps, num_columns, *trailing), np.dtype(dtype)

    def layout(self, num_columns: int) -> dict[str, Any]:
        """Every array field's shape and dtype (all but the agent's state), in field order;
        nested observations' a dict of them."""
        return {f.name: self.field_layout(f, num_columns) for f in FIELDS if f.is_array}

    def empty(self, num_columns: int) -> Unroll:
        """An unroll of uninitialised arrays to record into; `initial_state` None (the
        agent's, set once known)."""
        arrays = {
            name: _map_layout(np.empty, layout) for name, layout in self.layout(num_columns).items()
        }
        return Unroll(**arrays, initial_state=None)

    def zeros(self, num_columns: int) -> dict[str, Any]:
        """The time-major fields, zeros: the arrays of a device batch (as
        `learner.staging.device_batch` gives them, but the agent's state)."""
        return {
            f.name: _map_layout(np.zeros, self.field_layout(f, num_columns))
            for f in FIELDS
            if f.name in TIME_MAJOR_DTYPES
        }

    def column_bytes(self) -> int:
        """The bytes of one env column of one unroll: its T+1 observations, T transitions
        and per-column fields (the agent's state, its own size, not counted)."""
        return sum(
            math.prod(shape) * dtype.itemsize
            for layout in self.layout(1).values()
            for shape, dtype in (layout.values() if isinstance(layout, dict) else [layout])
        )


def _map_layout(make, layout: Any) -> Any:
    """`make(shape, dtype)` for one field's layout, or part by part for a nest's."""
    if isinstance(layout, dict):
        return {key: make(*part) for key, part in layout.items()}
    return make(*layout)


def markdown_table() -> str:
    """`FIELDS` as the Markdown table of the module's docstring."""
    shapes = {OBSERVATION: ", *obs", NUM_ACTIONS: ", P", ACTION: ", *act", SCALAR: ""}
    lines = ["| field | shape | dtype | meaning |", "|---|---|---|---|"]
    for field in FIELDS:
        if field.trailing == AGENT_STATE:
            shape = "nest of [B, ...]"
        elif field.steps == PER_COLUMN:
            shape = f"[B{shapes[field.trailing]}]"
        else:
            shape = f"[{field.steps}, B{shapes[field.trailing]}]"
        dtype = {OBSERVATION_DTYPE: "env's", AGENT_DTYPE: "agent's", ACTION_DTYPE: "action's"}.get(
            field.dtype
        )
        if dtype is None:
            dtype = np.dtype(field.dtype).name
        lines.append(f"| {field.name} | {shape} | {dtype} | {field.meaning} |")
    return "\n".join(lines) + "\n"


def _map_batch_axis(fn, unrolls: list[Unroll]) -> Unroll:
    """Builds an Unroll field by field from `fn(arrays, batch_axis)` over `unrolls`."""
    import tensorflow as tf  # only for nest handling of the recurrent state

    fields = {}
    for field in FIELDS:
        values = [getattr(u, field.name) for u in unrolls]
        if field.trailing == OBSERVATION:  # one array, or a nest's, part by part
            fields[field.name] = map_leaves(
                functools.partial(_call_on_parts, fn, field.batch_axis), *values
            )
        elif field.is_array:
            fields[field.name] = fn(values, field.batch_axis)
        else:  # the agent's state: every leaf keeps its batch on axis 0
            fields[field.name] = tf.nest.map_structure(lambda *leaves: fn(list(leaves), 0), *values)
    return Unroll(**fields)


def _call_on_parts(fn, axis: int, *parts):
    return fn(list(parts), axis)


def concat_unrolls(unrolls: list[Unroll]) -> Unroll:
    """Concatenates unrolls along the batch axis."""
    return _map_batch_axis(lambda arrays, axis: np.concatenate(arrays, axis=axis), unrolls)


def slice_columns(unroll: Unroll, start: int, stop: int) -> Unroll:
    """Batch columns `start:stop` of `unroll` (views, not copies)."""
    return _map_batch_axis(
        lambda arrays, axis: np.asarray(arrays[0])[(slice(None),) * axis + (slice(start, stop),)],
        [unroll],
    )
