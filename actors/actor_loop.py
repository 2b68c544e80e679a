"""The loop that feeds a learner from an `Actor`, with or without Ray.

`run_actor_loop` only needs two callables, so the same loop serves an in-process
`LearnerService` (tests) and a Ray learner handle (`actors/ray_actor.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["run_actor_loop"]


def run_actor_loop(
    *,
    actor,
    send: Callable[[Any, Any], Any],
    receive: Callable[[Any], tuple],
    fetch_weights: Callable[[Any], Any],
    max_unrolls: int | None = None,
) -> int:
    """Produces unrolls until the learner says stop; returns the env frames produced.

    Args:
      actor: an `Actor` (unroll, set_weights, policy_version).
      send: starts delivering (unroll, stats) and returns a pending reply.
      receive: waits for a pending reply -> (stop, version, [published weights]).
        It blocks while the learner's queue is full: that is the back-pressure.
      fetch_weights: turns a published weights object into the weight list.
      max_unrolls: optional bound (tests).

    One unroll is in flight while the next is computed, so the actor never waits
    for the learner unless the queue is full, and picks up the newest published
    weights from each reply between unrolls.
    """
    frames, produced, pending = 0, 0, None
    while max_unrolls is None or produced < max_unrolls:
        unroll, stats = actor.unroll()
        produced += 1
        if pending is not None:
            if _apply_reply(actor, receive(pending), fetch_weights):
                return frames
        pending = send(unroll, stats)
        frames += unroll.num_frames
    if pending is not None:
        _apply_reply(actor, receive(pending), fetch_weights)
    return frames


def _apply_reply(actor, reply: tuple, fetch_weights) -> bool:
    stop, version, published = reply
    if version > actor.policy_version:
        actor.set_weights(fetch_weights(published[0]), version)
    return bool(stop)
