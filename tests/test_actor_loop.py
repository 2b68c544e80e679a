"""`run_actor_loop`: one unroll in flight, each acting with the newest weights replied.

A real `Actor` (CartPole, the MLP agent) fed by a scripted learner: every reply
publishes a new version whose weights are the agent's own scaled by it, so the
unrolls' `policy_version` and the agent's weights show which reply each unroll
was made after.
"""

from __future__ import annotations

import numpy as np

from impala_rep.actors.actor import Actor
from impala_rep.actors.actor_loop import run_actor_loop
from impala_rep.agent import MLPAgent
from impala_rep.envs import make_vector_env


class RecordingActor:
    """The real actor, noting the weights its agent holds as each unroll starts."""

    def __init__(self, actor: Actor, agent: MLPAgent):
        self._actor, self._agent = actor, agent
        self.acted_with: list[np.ndarray] = []

    def unroll(self):
        self.acted_with.append(self._agent.get_weights()[0].copy())
        return self._actor.unroll()

    def set_weights(self, weights, version: int) -> None:
        self._actor.set_weights(weights, version)

    @property
    def policy_version(self) -> int:
        return self._actor.policy_version


class ScriptedLearner:
    """Replies to the k-th unroll with version k (its weights: the initial ones x k),
    and with stop from the `stop_after`-th on; records what it was sent."""

    def __init__(self, agent: MLPAgent, stop_after: int | None = None):
        self._stop_after = stop_after
        self._initial = agent.get_weights()
        self.sent: list[int] = []      # each unroll's policy_version, in order
        self.replies: list[int] = []   # the version of each reply, in order

    def send(self, unroll, stats):
        self.sent.append(int(unroll.policy_version[0]))
        return len(self.sent)

    def receive(self, pending: int) -> tuple:
        self.replies.append(pending)
        stop = self._stop_after is not None and pending >= self._stop_after
        return stop, pending, [[w * pending for w in self._initial]]


def make_actor(num_envs: int = 4, unroll_length: int = 5):
    agent = MLPAgent(num_actions=2, hidden_sizes=(8,))
    env = make_vector_env("CartPole-v1", num_envs=num_envs, seed=0)
    actor = Actor(env=env, agent=agent, unroll_length=unroll_length, seed=0)
    return RecordingActor(actor, agent), agent


def test_the_next_unroll_is_computed_while_the_last_one_waits():
    actor, agent = make_actor()
    initial = agent.get_weights()[0].copy()
    learner = ScriptedLearner(agent)

    frames = run_actor_loop(actor=actor, send=learner.send, receive=learner.receive,
                            fetch_weights=lambda published: published, max_unrolls=4)

    assert frames == 4 * 5 * 4
    # Unroll k+1 is computed while unroll k waits for its reply, so it acts with the
    # reply to unroll k-1: one block more policy lag, for the overlap (docs/learning.md,
    # "Policy lag: the actor loop's overlap, measured").
    assert learner.sent == [0, 0, 1, 2]
    for version, weight in zip(learner.sent, actor.acted_with):
        np.testing.assert_allclose(weight, initial * version if version else initial)
    assert learner.replies == [1, 2, 3, 4]  # the last one too, after the bound
    assert actor.policy_version == 4


def test_a_stop_reply_ends_the_loop_and_nothing_more_is_sent():
    actor, agent = make_actor()
    learner = ScriptedLearner(agent, stop_after=2)

    frames = run_actor_loop(actor=actor, send=learner.send, receive=learner.receive,
                            fetch_weights=lambda published: published)

    # A third unroll was computed while the second waited; it is not sent.
    assert len(actor.acted_with) == 3
    assert len(learner.sent) == 2 and learner.replies == [1, 2]
    assert frames == 2 * 5 * 4
