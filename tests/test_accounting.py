"""Accounting: the report's counters (produced == consumed + queued), episodes, the returns
window, busy time on the injected clock, policy lag, and what a checkpoint saves."""

import dataclasses

import numpy as np
import pytest

from impala_rep.learner.accounting import RETURN_WINDOW, Accounting, episode_returns
from impala_rep.learner.report import LearnerReport
from impala_rep.learner.unroll_queue import QueueCounts
from impala_rep.unroll import EpisodeStats


class ManualClock:
    def __init__(self):
        self.now = 10.0

    def __call__(self):
        return self.now


def stats(*returns):
    return EpisodeStats(np.asarray(returns, np.float64), np.ones(len(returns)))


def counts(put, size=0):
    """The queue's counters with `put` frames put (how many it handed out does not matter)."""
    return lambda: QueueCounts(frames_put=put, frames_got=0, frames_queued=put, size=size)


def step(accounting, clock, *, frames, returns=(), seconds=1.0, lag=(1.0, 2.0)):
    accounting.step_started()
    clock.now += seconds
    accounting.step_ended(
        frames=frames, stats=[stats(*returns), None], metrics={"loss": 0.5}, policy_lag=lag
    )


def test_the_fields_are_learner_report_fields():
    fields = Accounting().report_fields(counts(0))
    names = {f.name for f in dataclasses.fields(LearnerReport)}
    assert set(fields) <= names
    # With the service's own fields, every field a report needs.
    service_fields = {"learner_steps", "done", "error", "non_finite", "last_checkpoint"}
    assert names - set(fields) - service_fields == {"actor_silence_s", "startup"}


def test_before_any_step():
    fields = Accounting().report_fields(counts(24, size=1))
    assert fields["frames_produced"] == fields["frames_queued"] == 24
    assert fields["frames_consumed"] == 0 and fields["queue_size"] == 1
    assert fields["episodes"] == 0 and fields["window_episodes"] == 0
    assert fields["episode_return_mean"] is None
    assert fields["policy_lag_mean"] is None and fields["policy_lag_max"] is None
    assert fields["learner_busy_s"] == 0.0 and fields["metrics"] == {}


def test_produced_is_consumed_plus_queued_from_a_resumed_base():
    clock = ManualClock()
    accounting = Accounting(clock=clock, frames=100, episodes=4, recent_returns=(1.0, 3.0))
    assert accounting.frames_consumed == 100
    step(accounting, clock, frames=24, returns=(5.0, 7.0))
    # 48 put since the start: 24 trained on, 24 staged or queued.
    fields = accounting.report_fields(counts(48))
    assert fields["frames_produced"] == 148
    assert fields["frames_consumed"] == 124 == accounting.frames_consumed
    assert fields["frames_queued"] == 24
    assert fields["frames_produced"] == fields["frames_consumed"] + fields["frames_queued"]
    assert fields["episodes"] == 6 and fields["window_episodes"] == 4
    assert fields["episode_return_mean"] == pytest.approx(4.0)
    assert fields["metrics"] == {"loss": 0.5}
    assert (fields["policy_lag_mean"], fields["policy_lag_max"]) == (1.0, 2.0)
    assert accounting.progress() == (124, 6, (1.0, 3.0, 5.0, 7.0))


def test_new_returns_are_reported_once_and_the_window_keeps_the_newest():
    clock = ManualClock()
    accounting = Accounting(clock=clock)
    step(accounting, clock, frames=1, returns=tuple(range(RETURN_WINDOW)))
    step(accounting, clock, frames=1, returns=(1000.0,))
    fields = accounting.report_fields(counts(2))
    assert fields["new_episode_returns"] == (*map(float, range(RETURN_WINDOW)), 1000.0)
    assert fields["episodes"] == RETURN_WINDOW + 1
    assert fields["window_episodes"] == RETURN_WINDOW
    assert accounting.progress()[2][0] == 1.0 and accounting.progress()[2][-1] == 1000.0
    assert accounting.report_fields(counts(2))["new_episode_returns"] == ()


def test_busy_time_counts_a_step_in_progress_up_to_each_report():
    clock = ManualClock()
    accounting = Accounting(clock=clock)
    step(accounting, clock, frames=1, seconds=2.0)
    clock.now += 5.0  # idle
    accounting.step_started()
    clock.now += 1.5
    assert accounting.report_fields(counts(1))["learner_busy_s"] == 3.5
    clock.now += 1.0
    accounting.step_ended(frames=1, stats=[], metrics={}, policy_lag=(0.0, 0.0))
    clock.now += 9.0
    assert accounting.report_fields(counts(2))["learner_busy_s"] == 4.5


def test_a_step_that_never_ended_adds_nothing():
    clock = ManualClock()
    accounting = Accounting(clock=clock)
    step(accounting, clock, frames=24, seconds=2.0, returns=(1.0,))
    accounting.step_started()  # e.g. a non-finite loss: the step raises
    clock.now += 3.0
    accounting.training_ended()
    clock.now += 3.0
    fields = accounting.report_fields(counts(48))
    assert fields["learner_busy_s"] == 2.0
    assert fields["frames_consumed"] == 24 and fields["frames_queued"] == 24
    assert fields["episodes"] == 1


def test_episode_returns_skip_missing_stats():
    assert episode_returns([stats(1.0, 2.0), None, stats(), stats(3)]) == [1.0, 2.0, 3.0]
