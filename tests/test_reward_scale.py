"""Reward scaling (impala_rep/reward_scale.py): the actors' return moments merged into one
running variance, rewards divided by its square root, and the scale kept by checkpoints."""

import time

import numpy as np
import pytest
from random_unrolls import random_unroll

from impala_rep import Replicator
from impala_rep.agent import MLPAgent
from impala_rep.config import LossConfig, OptimizerConfig
from impala_rep.learner.checkpointing import RunCheckpoint, RunCounters
from impala_rep.learner.learner import Learner
from impala_rep.learner.service import LearnerService, TrainingPlan
from impala_rep.reward_scale import RewardScale
from impala_rep.unroll import EpisodeStats

T, B, A, OBS = 4, 6, 3, 5


def stats_of(values):
    values = np.asarray(values, np.float64)
    return EpisodeStats(
        np.zeros(0),
        np.zeros(0, np.int64),
        return_moments=(float(values.size), float(values.mean()), float(values.var())),
    )


def test_merged_moments_are_those_of_all_values_together():
    rng = np.random.default_rng(0)
    parts = [rng.normal(3.0, 5.0, size=n) for n in (40, 7, 120)]
    scale = RewardScale()
    assert scale.scale == pytest.approx(1.0)  # nothing seen yet: rewards unchanged
    scale.update([stats_of(parts[0]), None, EpisodeStats(np.zeros(0), np.zeros(0))])
    scale.update([stats_of(parts[1]), stats_of(parts[2])])
    everything = np.concatenate(parts)
    # gymnasium's RunningMeanStd starts from count 1e-4 and variance 1: a negligible weight.
    assert scale.scale == pytest.approx(np.sqrt(everything.var()), rel=1e-5)


def test_combine_pools_the_moments_of_several_blocks():
    rng = np.random.default_rng(1)
    parts = [rng.normal(-5.0, 2.0, size=n) for n in (3, 50, 11)]
    stats = [
        stats_of(parts[0]),
        None,
        stats_of(parts[1]),
        EpisodeStats(np.zeros(0), np.zeros(0)),
        stats_of(parts[2]),
    ]
    count, mean, variance = RewardScale.combine(stats)
    everything = np.concatenate(parts)
    assert count == everything.size
    np.testing.assert_allclose([mean, variance], [everything.mean(), everything.var()], rtol=1e-12)
    assert RewardScale.combine([None]) == (0.0, 0.0, 0.0)


def test_apply_divides_the_rewards_only():
    scale = RewardScale()
    scale.update([stats_of([0.0, 4.0])])  # variance 4: scale 2
    batch = random_unroll(T=T, B=B, obs_size=OBS, num_actions=A, seed=1)
    scaled = scale.apply(batch)
    np.testing.assert_allclose(scaled.rewards, batch.rewards / scale.scale, rtol=1e-6)
    assert scaled.rewards.dtype == np.float32
    for name in ("prev_rewards", "truncation_values", "observations", "actions"):
        np.testing.assert_array_equal(getattr(scaled, name), getattr(batch, name))


def test_state_round_trips_through_a_checkpoint(tmp_path):
    learner = Learner(
        agent=MLPAgent(num_actions=A, hidden_sizes=(8,)),
        replicator=Replicator("cpu"),
        total_steps=10,
        observation_shape=(OBS,),
    )
    scale = RewardScale()
    scale.update([stats_of([1.0, 2.0, 7.0])])
    RunCheckpoint(learner=learner, directory=tmp_path, extension_states={"return_moments": 3}).save(
        RunCounters(
            frames=10,
            episodes=1,
            recent_returns=(1.0,),
            extension_states={"return_moments": scale.state},
        )
    )
    _, counters = RunCheckpoint(
        learner=learner, directory=tmp_path, extension_states={"return_moments": 3}
    ).restore()
    restored = RewardScale()
    restored.restore(counters.extension_states["return_moments"])
    assert restored.state == pytest.approx(scale.state) and restored.scale == pytest.approx(
        scale.scale
    )
    # A checkpoint without the moments (reward scaling off, or written before it existed)
    # still restores into a checkpoint object without them.
    _, plain = RunCheckpoint(learner=learner, directory=tmp_path).restore()
    assert plain.extension_states == {} and plain.frames == 10


def test_the_service_trains_on_scaled_rewards():
    """The update a service with reward scaling applies is the update on the batch with its
    rewards divided by the scale of the moments that came with it."""
    replicator = Replicator("cpu")

    def make_learner():
        # No reward clipping: clipped to [-1, 1], most of these rewards would be equal
        # with or without the scaling.
        return Learner(
            agent=MLPAgent(num_actions=A, hidden_sizes=(8,)),
            replicator=replicator,
            total_steps=100,
            optimizer=OptimizerConfig(learning_rate=1e-2),
            loss=LossConfig(reward_clipping="none"),
            observation_shape=(OBS,),
        )

    served, twin = make_learner(), make_learner()
    twin.agent.set_weights(served.agent.get_weights())
    service = LearnerService(
        learner=served,
        plan=TrainingPlan(batch_size=B, total_frames=T * B, queue_capacity=1),
        transforms=[RewardScale()],
    )
    batch = random_unroll(T=T, B=B, obs_size=OBS, num_actions=A, seed=2)
    batch = batch._replace(rewards=batch.rewards * 50.0)
    moments = stats_of([-100.0, -40.0, 0.0, 10.0])
    service.enqueue(batch, moments)
    while not service.report().done:
        pass
    service.stop()
    expected = RewardScale()
    expected.update([moments])
    twin.step(expected.apply(batch))
    for served_w, twin_w in zip(service.latest_weights()[1][0], twin.agent.get_weights()):
        np.testing.assert_allclose(served_w, twin_w, rtol=1e-6, atol=1e-7)
    assert service.report().metrics["reward_scale"] == pytest.approx(expected.scale)


def test_a_checkpoint_holds_the_moments_of_the_batches_trained_on(tmp_path):
    """The stager merges the next batch's moments while a step runs; a checkpoint holds those
    of the last batch trained on. Here a checkpoint is due after every step and the second
    batch is non-finite (never trained on): the checkpoint of step 1 is the last good one, and
    its moments are the first batch's alone."""
    learner = Learner(
        agent=MLPAgent(num_actions=A, hidden_sizes=(8,)),
        replicator=Replicator("cpu"),
        total_steps=100,
        observation_shape=(OBS,),
    )
    service = LearnerService(
        learner=learner,
        plan=TrainingPlan(batch_size=B, total_frames=10 * T * B, queue_capacity=2),
        transforms=[RewardScale()],
        checkpoint=RunCheckpoint(
            learner=learner, directory=tmp_path, extension_states={"return_moments": 3}
        ),
        checkpoint_every_s=1e-3,
    )
    bad = random_unroll(T=T, B=B, obs_size=OBS, num_actions=A, seed=1)
    bad.observations[0, 0, 0] = np.inf
    first = stats_of([1.0, 2.0, 7.0])
    service.enqueue(random_unroll(T=T, B=B, obs_size=OBS, num_actions=A, seed=0), first)
    service.enqueue(bad, stats_of([500.0, -900.0]))
    while not service.report().done:
        time.sleep(0.02)
    service.stop()
    assert service.report().learner_steps == 1
    _, step = service.save()
    assert step == 1
    _, counters = RunCheckpoint(
        learner=learner, directory=tmp_path, extension_states={"return_moments": 3}
    ).restore()
    expected = RewardScale()
    expected.update([first])
    assert counters.extension_states["return_moments"] == pytest.approx(expected.state)
