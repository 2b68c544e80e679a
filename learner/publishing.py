"""What a learner host hands its actors as weights, and when it publishes new ones.

A publication reads the agent's weights and turns them into what actors receive, through
the injected `publish` (identity without Ray; under Ray `ray_learner.publish`: carried in
each reply when small, else one copy in the object store that every actor fetches).
`WeightPublisher` publishes after a step only if an actor has been handed the weights
published before; otherwise those wait for the first actor that asks, and the next step
publishes. Actors ask about once per unroll block, which holds several batches, so most
publications after every step (a weight read, and under Ray perhaps a `ray.put`) would never
be fetched. An actor that asks after skipped ones gets the weights of the last step that ended
after a reply: usually one batch older (the policy lag shows it). The run's last weights are
always published (`finish`).

Only the chief host of a multi-host learner publishes (`publish=None` on the others, whose
weights are the chief's): the others hand out `[None]`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["WeightPublisher"]


class WeightPublisher:
    """The weights handed to actors: `(version, [published])`.

    The published object travels inside a list so that Ray passes an object store reference
    through instead of resolving it on every reply.

    Args:
      read_weights: the agent's current weights (a list of arrays); read at each publication.
      publish: turns that list into what actors receive; None: not the chief host (no reads).
      version: the learner step of the weights now held; they are published at once.
    """

    def __init__(
        self,
        *,
        read_weights: Callable[[], list],
        publish: Callable[[list], Any] | None,
        version: int,
    ):
        self._read_weights, self._publish = read_weights, publish
        self._published = self._publication(version)
        # Set when an actor is handed `_published`: `stepped` publishes only then.
        self._handed_out = False

    @property
    def version(self) -> int:
        """The learner step of the weights an actor would be handed now."""
        return self._published[0]

    def hand_out(self) -> tuple[int, list]:
        """What an actor receives: (version, [published weights]). Called by actors' threads."""
        published = self._published
        self._handed_out = True  # after the read: at worst one publication too many
        return published

    def stepped(self, version: int) -> None:
        """After the step that reached `version`: publishes if the last publication was
        handed out. Called by the training thread only."""
        if self._handed_out:
            self._handed_out = False
            self._published = self._publication(version)

    def finish(self, version: int) -> None:
        """Training ended at `version`: the final weights, for the actors' last replies (and
        hand-outs after the run), whether or not the last step's publication was skipped."""
        if self._published[0] != version:
            self._published = self._publication(version)

    def _publication(self, version: int) -> tuple[int, list]:
        if self._publish is None:  # not the chief host: its weights are the chief's
            return version, [None]
        return version, [self._publish(self._read_weights())]
