"""User code tried once in the driver, before anything starts: the agent built, the loss applied.

`--agent` and `--loss` (or `train(agent=..., loss=...)`) are only imported by the
preparation; a wrong return value or signature would otherwise surface in the
learner process after start-up, as a raw TensorFlow traceback. Here the agent is
built and unrolled, and the loss applied (`impala_rep.loss_fn.apply_loss`, the
learner's own call), eagerly on a tiny synthetic batch of zeros: T=2, B=1.
The built-in agent and the IMPALA loss are not re-checked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from impala_rep.config import LossConfig
from impala_rep.config.code_specs import CODE_SPEC_FORMS
from impala_rep.observation_nest import Shape, shape_of
from impala_rep.run.errors import one_line
from impala_rep.unroll import UnrollSpec

__all__ = ["check_user_code"]

_AGENT_METHODS = ("build", "initial_state", "step", "unroll", "get_weights", "set_weights")
_LOSS_CONTRACT = (
    "a loss is called as loss_fn(*, agent, inputs, outputs, behaviour_logits, "
    "actions, rewards, discounts, config) and returns "
    "impala_rep.LossOutput(loss, sums, means) (docs/guide/custom-agents.md)"
)


def check_user_code(
    *,
    agent_factory: Callable[[], Any],
    loss_fn: Callable[..., Any] | None,
    agent_is_users: bool,
    agent_spec: str | None,
    loss_spec: str | None,
    observation_shape: Shape,
    observation_dtype: Any,
    num_actions: int,
    config: LossConfig,
    action_distribution: Any = None,
) -> None:
    """ValueError (one line, naming the agent or the loss and its contract) unless the agent
    builds and unrolls and the loss (None: the IMPALA loss) returns a `LossOutput` on a
    synthetic batch."""
    from impala_rep.loss_fn import apply_loss, impala_loss_fn

    bad_agent = f"bad agent {agent_spec!r}" if agent_spec else "bad agent"
    bad_loss = f"bad loss {loss_spec!r}" if loss_spec else "bad loss"
    agent_name = "the agent" if agent_is_users else "the built-in agent"
    try:
        agent = agent_factory()
    except Exception as err:  # noqa: BLE001 - the user's factory, failing in any way
        raise ValueError(f"{bad_agent}: calling the agent factory raised {one_line(err)}") from None
    missing = [name for name in _AGENT_METHODS if not callable(getattr(agent, name, None))]
    if missing:
        raise ValueError(
            f"{bad_agent}: the factory returned a {type(agent).__name__}, not an Agent "
            f"(it has no {', '.join(missing)}); expected {CODE_SPEC_FORMS['agent']} "
            "returning an impala_rep.Agent (docs/guide/custom-agents.md)"
        )
    batch = _synthetic_batch(observation_shape, observation_dtype, num_actions, action_distribution)
    try:
        agent.build(shape_of(observation_shape))
        state = agent.initial_state(1)
        agent.unroll(_inputs(batch), state)
    except Exception as err:  # noqa: BLE001
        raise ValueError(
            f"{bad_agent}: {agent_name} failed on a synthetic batch of observations "
            f"{shape_of(observation_shape)}: {one_line(err)}"
        ) from None
    try:
        apply_loss(
            loss_fn or impala_loss_fn, agent=agent, batch=batch, initial_state=state, config=config
        )
    except Exception as err:  # noqa: BLE001 - the user's code, failing in any way
        if loss_fn is None:  # the IMPALA loss is known to work: the agent's outputs do not fit
            raise ValueError(
                f"{bad_agent}: the IMPALA loss failed on its outputs: {one_line(err)} "
                "(docs/guide/custom-agents.md: the outputs' shapes)"
            ) from None
        raise ValueError(
            f"{bad_loss}: applied once to a synthetic batch it raised {one_line(err)}; "
            f"{_LOSS_CONTRACT}"
        ) from None


def _synthetic_batch(
    observation_shape,
    observation_dtype,
    num_actions: int,
    action_distribution: Any = None,
    T: int = 2,
    B: int = 1,
) -> dict[str, np.ndarray]:
    """The device batch's time-major fields, zeros, laid out as `impala_rep.unroll.FIELDS`
    for actions of `action_distribution` (None: `num_actions` discrete ones)."""
    from impala_rep.distributions import Categorical

    return UnrollSpec.for_distribution(
        action_distribution or Categorical(num_actions),
        unroll_length=T,
        observation_shape=observation_shape,
        observation_dtype=observation_dtype,
    ).zeros(B)


def _inputs(batch):
    from impala_rep.agent import AgentInputs

    return AgentInputs(
        observation=batch["observations"],
        prev_action=batch["prev_actions"],
        prev_reward=batch["prev_rewards"],
        first=batch["first"],
    )
