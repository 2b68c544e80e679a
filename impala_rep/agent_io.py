"""What an agent takes and returns, TensorFlow-free: actors that act in numpy import it alone.

`impala_rep.agent` re-exports both (the agent interface's home in the docs).
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["AgentOutput", "AgentInputs"]


class AgentOutput(NamedTuple):
    """policy_logits `[..., A]` and baseline `[...]` (leading dims `[B]` or `[T, B]`)."""

    policy_logits: Any
    baseline: Any


class AgentInputs(NamedTuple):
    """What an agent sees at each step (leading dims `[B]` for `step`, `[T, B]` for `unroll`).

    observation: `[..., *obs_shape]`; prev_action: int32, the action taken just
    before this observation (0 at an episode's start); prev_reward: float32, the
    reward received on arriving here (0 at an episode's start); first: bool, this
    observation starts an episode (recurrent agents reset their state here).
    """

    observation: Any
    prev_action: Any
    prev_reward: Any
    first: Any
