"""`run_actor_loop`: one unroll in flight, each acting with the newest weights replied.

A real `Actor` (CartPole, the MLP agent) fed by a scripted learner: every reply
publishes a new version whose weights are the agent's own scaled by it (+ 1), so the
unrolls' `policy_version` and their behaviour logits show which reply each unroll
was made after.
"""

from __future__ import annotations

import numpy as np

from impala_rep.actors.actor import Actor
from impala_rep.actors.actor_loop import run_actor_loop
from impala_rep.agent import AgentInputs, MLPAgent
from impala_rep.envs import make_vector_env


class RecordingActor:
    """The real actor, noting which weights each unroll acted with: the version whose
    weights give the unroll's first behaviour logits through the agent's compiled `step`."""

    def __init__(self, actor: Actor, agent: MLPAgent):
        self._actor, self._agent = actor, agent
        self._initial = agent.get_weights()
        self.acted_with: list[int] = []

    def unroll(self):
        unroll, stats = self._actor.unroll()
        inputs = AgentInputs(
            unroll.observations[0], unroll.prev_actions[0], unroll.prev_rewards[0], unroll.first[0]
        )
        for version in range(8):
            self._agent.set_weights([w * (version + 1) for w in self._initial])
            logits = self._agent.step(inputs, ())[0].policy_logits.numpy()
            if np.allclose(logits, unroll.behaviour_logits[0], rtol=1e-5, atol=1e-6):
                self.acted_with.append(version)
                break
        else:
            self.acted_with.append(None)
        self._agent.set_weights(self._initial)
        return unroll, stats

    def set_weights(self, weights, version: int) -> None:
        self._actor.set_weights(weights, version)

    @property
    def policy_version(self) -> int:
        return self._actor.policy_version


class ScriptedLearner:
    """Replies to the k-th unroll with version k (its weights: the initial ones x (k + 1)),
    and with stop from the `stop_after`-th on; records what it was sent."""

    def __init__(self, agent: MLPAgent, stop_after: int | None = None):
        self._stop_after = stop_after
        self._initial = agent.get_weights()
        self.sent: list[int] = []  # each unroll's policy_version, in order
        self.replies: list[int] = []  # the version of each reply, in order

    def send(self, unroll, stats):
        self.sent.append(int(unroll.policy_version[0]))
        return len(self.sent)

    def receive(self, pending: int) -> tuple:
        self.replies.append(pending)
        stop = self._stop_after is not None and pending >= self._stop_after
        return stop, pending, [[w * (pending + 1) for w in self._initial]]


def make_actor(num_envs: int = 4, unroll_length: int = 5):
    agent = MLPAgent(num_actions=2, hidden_sizes=(8,))
    env = make_vector_env("CartPole-v1", num_envs=num_envs, seed=0)
    actor = Actor(env=env, agent=agent, unroll_length=unroll_length, seed=0)
    return RecordingActor(actor, agent), agent


def test_the_next_unroll_is_computed_while_the_last_one_waits():
    actor, agent = make_actor()
    learner = ScriptedLearner(agent)

    frames = run_actor_loop(
        actor=actor,
        send=learner.send,
        receive=learner.receive,
        fetch_weights=lambda published: published,
        max_unrolls=4,
    )

    assert frames == 4 * 5 * 4
    # Unroll k+1 is computed while unroll k waits for its reply, so it acts with the
    # reply to unroll k-1: one block more policy lag, for the overlap (docs/notebook.md,
    # "Policy lag").
    assert learner.sent == [0, 0, 1, 2]
    assert actor.acted_with == [0, 0, 1, 2]  # the logits say so too
    assert learner.replies == [1, 2, 3, 4]  # the last one too, after the bound
    assert actor.policy_version == 4


def test_a_stop_reply_ends_the_loop_and_nothing_more_is_sent():
    actor, agent = make_actor()
    learner = ScriptedLearner(agent, stop_after=2)

    frames = run_actor_loop(
        actor=actor,
        send=learner.send,
        receive=learner.receive,
        fetch_weights=lambda published: published,
    )

    # A third unroll was computed while the second waited; it is not sent.
    assert len(actor.acted_with) == 3
    assert len(learner.sent) == 2 and learner.replies == [1, 2]
    assert frames == 2 * 5 * 4
