"""CheckpointSchedule: due `every_s` after the last save on the injected clock; a save records
(path, step) and restarts the wait; without a checkpoint nothing is ever due."""

import pytest

from impala_rep.learner.checkpoint_schedule import CheckpointSchedule


class ManualClock:
    def __init__(self):
        self.now = 50.0

    def __call__(self):
        return self.now


class Checkpoint:
    def __init__(self):
        self.saved = []

    def save(self, counters):
        self.saved.append(counters)
        return f"ckpt-{len(self.saved)}"


def test_due_after_every_s_from_the_start_and_from_each_save():
    clock, checkpoint = ManualClock(), Checkpoint()
    schedule = CheckpointSchedule(checkpoint, every_s=10.0, clock=clock)
    assert schedule.enabled and schedule.last is None
    clock.now += 9.5
    assert not schedule.due()
    clock.now += 0.5
    assert schedule.due()
    assert schedule.save("counters", step=7) == ("ckpt-1", 7)
    assert schedule.last == ("ckpt-1", 7) and checkpoint.saved == ["counters"]
    assert not schedule.due()
    clock.now += 10.0
    assert schedule.due()


def test_a_restored_checkpoint_is_the_last_until_a_save():
    schedule = CheckpointSchedule(Checkpoint(), every_s=1.0, clock=ManualClock(), last=("a", 3))
    assert schedule.last == ("a", 3)
    schedule.save("counters", step=4)
    assert schedule.last == ("ckpt-1", 4)


def test_without_a_checkpoint_nothing_is_due_or_saved():
    clock = ManualClock()
    schedule = CheckpointSchedule(None, every_s=0.0, clock=clock)
    clock.now += 100.0
    assert not schedule.enabled and not schedule.due() and schedule.last is None
    with pytest.raises(RuntimeError):
        schedule.save("counters", step=1)
