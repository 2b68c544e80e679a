"""The learner's loss hook: the `LossFn` contract, its result `LossOutput`, and its
default, `impala_loss_fn`.

`Learner(loss_fn=...)` (and `train(config, loss=...)`) calls the loss once per
replica inside the replicated step, under the gradient tape, with keyword
arguments only. Every tensor is this replica's shard: `B'` = B / replicas
columns, time-major as everywhere in the package (see `impala_rep`):

| keyword | shape | what |
|---|---|---|
| agent | | the `Agent` being trained (e.g. its `trainable_variables` for a regulariser) |
| inputs | `AgentInputs` of `[T+1, B', ...]` | what `agent.unroll` was fed |
| outputs | `AgentOutput`: `[T+1, B', A]`, `[T+1, B']` | `agent.unroll` over all T+1 observations |
| behaviour_logits | `[T, B', A]` float32 | the actors' logits |
| actions | `[T, B']` int32 | actions taken |
| rewards | `[T, B']` float32 | clipped as `config.reward_clipping` says, plus a bootstrap (below) |
| discounts | `[T, B']` float32 | `config.discount * (1 - (terminated or truncated))` |
| config | `LossConfig` | discount, costs, clipping thresholds, lambda |

Index `[-1]` of `outputs` is the bootstrap. Where a time limit cut the episode,
`rewards` include `discount * V(final observation)`; `rewards` and `discounts`
are as `impala_rep.transitions.vtrace_inputs` computes them.

It returns a `LossOutput(loss, sums, means)`:

- `loss`: a scalar, THIS REPLICA'S SHARE of the global loss. The learner SUMS
  the loss over replicas (it scales each replica's loss by the replica count
  before the gradients are mean-reduced), so per-example terms are sums over
  the shard, as IMPALA's are: their sum over replicas is the sum over the
  global batch. Per-model terms (weight decay, any term that does not depend
  on the shard) must be divided by the replica count, e.g.
  `tf.nn.scale_regularization_loss`, or N replicas would count them N times.
- `sums`: scalar metrics the learner SUMS over replicas (a sum over the shard
  becomes the global batch's sum).
- `means`: scalar metrics the learner AVERAGES over replicas (a mean over the
  shard becomes the global batch's mean; shards are equal-sized).
- `terms` (optional): scalar parts of `loss`, gradients kept, whose own gradient
  norms the learner reports as `grad_norm_<name>` when `loss_grad_norms` is on.
  With `config.rnd_cost` > 0, `terms["rnd_loss"]` (the predictor's term, as
  `impala_rep.rnd.rnd_loss_fn` reports it) is required: the learner refuses a
  loss without it, which would train without the bonus.
- `after_update` (optional): a callable `after_update(applied=...)` the learner calls inside
  the same compiled step, on every replica, after applying the update (`applied`: a scalar
  bool tensor, False where the learner refused a non-finite update): for state that follows
  the update without gradients, as PopArt's statistics (`impala_rep.popart`). With
  `config.popart`, `means["popart_scale"]` is required (the learner refuses a loss without
  it, which would train without PopArt).

A metric is reduced by the group it is in, never by its name; a name may be in
only one group. A loss function travels to the learner process by pickling:
use a module-level function (or a `functools.partial` of one), not a lambda or
closure.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, Protocol

import tensorflow as tf

from impala_rep.agent import Agent, AgentInputs, AgentOutput
from impala_rep.config import LossConfig
from impala_rep.distributions import action_distribution
from impala_rep.losses import impala_loss_terms
from impala_rep.shapes import assert_shape
from impala_rep.transitions import vtrace_inputs

__all__ = [
    "LossFn",
    "LossOutput",
    "impala_loss_fn",
    "apply_loss",
    "check_loss_output",
    "chain_after_updates",
    "LEARNER_METRICS",
]

# What the learner adds to every step's metrics, and what each means; a loss metric of the
# same name would be overwritten (or, for "finite", taken for the learner's own check).
LEARNER_METRICS = {
    "grad_norm": "global norm of the update's gradient, before clipping",
    "learning_rate": "the learning rate the update used (it decays linearly to 0 over the run)",
    "finite": "whether the update's loss and gradient were finite (a non-finite one stops the "
    "run; not written to metrics.jsonl)",
    "passes": "updates the last batch got (fewer than --passes when --target-kl stopped them)",
    "learner_steps": "learner updates so far, every pass counted",
    "policy_lag_mean": "mean learner updates between the weights that acted a batch's steps and "
    "the weights its first pass trained",
    "policy_lag_max": "the largest such lag in the last batch",
}

_NO_METRICS: Mapping[str, tf.Tensor] = types.MappingProxyType({})


class LossOutput(NamedTuple):
    """What a `LossFn` returns (see the module docstring).

    Attributes:
      loss: scalar, this replica's share of the global loss.
      sums: `{name: scalar}` metrics summed over replicas.
      means: `{name: scalar}` metrics averaged over replicas.
      terms: `{name: scalar}` parts of `loss`, gradients kept, for per-part gradient norms.
      after_update: None, or work for the learner to do after the update (`applied=`).
    """

    loss: tf.Tensor
    sums: Mapping[str, tf.Tensor] = _NO_METRICS
    means: Mapping[str, tf.Tensor] = _NO_METRICS
    # Optional: parts of `loss` (with their gradients) whose gradient norms the learner
    # reports as `grad_norm_<name>` when asked to (`Learner(loss_grad_norms=True)`).
    terms: Mapping[str, tf.Tensor] = _NO_METRICS
    # Optional: called by the learner after it applied the update, in the same compiled step
    # (`after_update(applied=<scalar bool tensor>)`); e.g. PopArt's statistics.
    after_update: Callable[..., None] | None = None


class LossFn(Protocol):
    """The signature of `Learner(loss_fn=...)` (see the module docstring for the shapes)."""

    def __call__(
        self,
        *,
        agent: Agent,
        inputs: AgentInputs,
        outputs: AgentOutput,
        behaviour_logits: tf.Tensor,
        actions: tf.Tensor,
        rewards: tf.Tensor,
        discounts: tf.Tensor,
        config: LossConfig,
    ) -> LossOutput: ...


def impala_loss_fn(
    *,
    agent: Agent,
    inputs: AgentInputs,
    outputs: AgentOutput,
    behaviour_logits: Any,
    actions: Any,
    rewards: Any,
    discounts: Any,
    config: LossConfig,
) -> LossOutput:
    """The learner's default: `impala_loss` (V-trace actor-critic) with `config`'s settings.

    `outputs` cover T+1 observations: `[:-1]` are the targets' policy parameters and
    values, `[-1]` the bootstrap value `[B']`. The policy's distribution is the agent's
    (`impala_rep.distributions.action_distribution`); `inputs` are unused.
    `sums` are `loss`, `pg_loss`, `baseline_loss`, `entropy_loss`; `means` the
    rest of `impala_loss`'s metrics; `terms` its weighted parts.
    """
    del inputs  # part of the contract; the IMPALA loss needs only the outputs
    logits, baseline = outputs.policy_logits, outputs.baseline
    dims: dict = {}
    assert_shape("outputs.policy_logits", logits, ("T+1", "B", "A"), dims=dims)
    assert_shape("outputs.baseline", baseline, ("T+1", "B"), dims=dims)
    return LossOutput(
        *impala_loss_terms(
            target_logits=logits[:-1],
            behaviour_logits=behaviour_logits,
            actions=actions,
            values=baseline[:-1],
            bootstrap_value=baseline[-1],
            rewards=rewards,
            discounts=discounts,
            baseline_cost=config.baseline_cost,
            entropy_cost=config.entropy_cost,
            clip_rho_threshold=config.clip_rho_threshold,
            clip_pg_rho_threshold=config.clip_pg_rho_threshold,
            # None (auto), like kl_cost below, is the paper's 1 in a LossConfig given by hand.
            lambda_=1.0 if config.lambda_ is None else config.lambda_,
            surrogate_clip=config.surrogate_clip,
            # None (auto) is resolved from the observations by `train` (run/prepare.py); in a
            # LossConfig given to a Learner by hand it means off, IMPALA's own loss.
            kl_cost=config.kl_cost or 0.0,
            normalize_advantages=bool(config.normalize_advantages),
            distribution=action_distribution(agent),
        )
    )


def chain_after_updates(
    first: Callable[..., None] | None, then: Callable[..., None]
) -> Callable[..., None]:
    """An `after_update` doing `then` after `first` (a base loss's own, or None): for a loss
    that wraps another and has state of its own to move after the update."""
    if first is None:
        return then

    def both(*, applied):
        first(applied=applied)
        then(applied=applied)

    return both


def apply_loss(
    loss_fn: LossFn,
    *,
    agent: Agent,
    batch: Mapping[str, Any],
    initial_state: Any,
    config: LossConfig,
) -> LossOutput:
    """Runs `agent` over an unroll's fields and calls `loss_fn` on them, as the learner does.

    `batch` holds the unroll's time-major fields by name (`impala_rep.unroll`); the
    rewards and episode ends become V-trace inputs first (`vtrace_inputs`). The one
    place the loss hook is called: the learner calls it on every replica's shard
    inside its gradient tape, and the driver once, eagerly, to check user code.

    Raises:
      TypeError: the loss did not return a `LossOutput`.
      ValueError: its metric names are ambiguous or the learner's own.
    """
    inputs = AgentInputs(
        observation=batch["observations"],
        prev_action=batch["prev_actions"],
        prev_reward=batch["prev_rewards"],
        first=batch["first"],
    )
    transitions = vtrace_inputs(
        rewards=batch["rewards"],
        terminated=batch["terminated"],
        truncated=batch["truncated"],
        truncation_values=batch["truncation_values"],
        discount=config.discount,
        reward_clipping=config.reward_clipping,
    )
    outputs, _ = agent.unroll(inputs, initial_state)  # over all T+1 observations
    output = loss_fn(
        agent=agent,
        inputs=inputs,
        outputs=outputs,
        behaviour_logits=batch["behaviour_logits"],
        actions=batch["actions"],
        rewards=transitions.rewards,
        discounts=transitions.discounts,
        config=config,
    )
    check_loss_output(output)
    return output


def check_loss_output(output: Any) -> None:
    """Raises unless `output` is a `LossOutput` whose metric names are unambiguous."""
    if not isinstance(output, LossOutput):
        raise TypeError(
            "loss_fn must return an impala_rep.LossOutput(loss, sums, means), "
            f"got a {type(output).__name__}"
        )
    if output.after_update is not None and not callable(output.after_update):
        raise TypeError(
            "loss_fn's after_update must be None or a callable, got a "
            f"{type(output.after_update).__name__}"
        )
    for name, term in output.terms.items():
        if getattr(term, "shape", None) is not None and len(term.shape) != 0:
            raise ValueError(f"loss_fn term {name!r} must be a scalar, got shape {term.shape}")
    names = [*output.sums, *output.means]
    bad = sorted({n for n in names if names.count(n) > 1 or n in LEARNER_METRICS})
    if bad:
        raise ValueError(
            f"loss_fn metric names {bad} are in both sums and means or are the "
            f"learner's own ({', '.join(LEARNER_METRICS)})"
        )
