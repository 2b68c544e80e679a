"""The actor supervisor against an in-memory fleet (the `ActorFleet` protocol: where actors
run is the launcher's business; these tests are about when the supervisor starts, seeds and
replaces them). Time is a `ManualClock` the tests step, so no test sleeps."""

import pytest

from impala_rep.config import config_fields
from impala_rep.run.supervisor import (
    STARTUP_LIMIT_S,
    ActorCrashLoop,
    ActorSupervisor,
    actor_seed,
)


class ManualClock:
    """A monotonic clock that moves only when the test says."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += seconds


class RecordingFleet:
    """Actors that never send anything and never end: only their starts and removals, and
    which have finished starting (`finish_starting`)."""

    def __init__(self):
        self.starts: list[tuple[int, int]] = []
        self.removed: list[int] = []
        self._finished_starting: list[int] = []

    def start(self, slot, seed):
        self.starts.append((slot, seed))

    def finish_starting(self, *slots):
        self._finished_starting += slots

    def started(self):
        slots, self._finished_starting = self._finished_starting, []
        return slots

    def wait(self, timeout_s):
        return []

    def remove(self, slot):
        self.removed.append(slot)

    def stop(self, timeout_s):
        pass


def test_actors_are_seeded_with_the_step_the_run_resumes_from():
    new, resumed = RecordingFleet(), RecordingFleet()
    ActorSupervisor(fleet=new, num_actors=2, seed=7)
    ActorSupervisor(fleet=resumed, num_actors=2, seed=7, start_step=1234)
    assert new.starts == [
        (s, actor_seed(seed=7, slot=s, generation=0, start_step=0)) for s in (0, 1)
    ]
    assert resumed.starts == [
        (s, actor_seed(seed=7, slot=s, generation=0, start_step=1234)) for s in (0, 1)
    ]
    assert not {seed for _, seed in new.starts} & {seed for _, seed in resumed.starts}


def test_silence_counts_from_when_the_learner_is_ready():
    """Actors start while the learner builds and can send nothing until it is built: that
    wait must not count against them."""
    fleet, clock = RecordingFleet(), ManualClock()
    actors = ActorSupervisor(fleet=fleet, num_actors=2, seed=0, timeout_s=1.0, clock=clock)
    clock.advance(1.3)  # the learner is still building: longer than the timeout
    actors.learner_ready()
    fleet.finish_starting(0, 1)
    assert actors.replace_silent({}) == [] and fleet.removed == []
    clock.advance(1.3)  # now silent for longer than the timeout since the learner was ready
    failures = actors.replace_silent({})
    assert [f.slot for f in failures] == [0, 1] and fleet.removed == [0, 1]
    assert "sent no unroll" in failures[0].cause
    # Replaced with new seeds (generation 1).
    assert fleet.starts[2:] == [
        (s, actor_seed(seed=0, slot=s, generation=1, start_step=0)) for s in (0, 1)
    ]


def test_start_up_has_its_own_limit_and_silence_counts_from_its_end():
    """A replacement that is slow to start (a loaded machine) is not replaced for it; one
    that never starts is, after the start-up limit; silence counts from a finished start."""
    fleet, clock = RecordingFleet(), ManualClock()
    actors = ActorSupervisor(
        fleet=fleet, num_actors=2, seed=0, timeout_s=1.0, startup_limit_s=2.5, clock=clock
    )
    actors.learner_ready()
    clock.advance(1.3)  # longer than timeout_s, both still starting
    assert actors.replace_silent({}) == [] and fleet.removed == []
    fleet.finish_starting(0)  # slot 0 is up now; slot 1 still starting
    assert actors.replace_silent({}) == []
    clock.advance(1.3)  # slot 0: silent 1.3 s since it started; slot 1: starting for 2.6 s
    failures = actors.replace_silent({})
    assert sorted(f.slot for f in failures) == [0, 1] and sorted(fleet.removed) == [0, 1]
    causes = {f.slot: f.cause for f in failures}
    assert causes[0].startswith("sent no unroll for ") and "(limit 1 s)" in causes[0]
    assert causes[1] == "did not start within 2 s: hung, replaced"


def _one_actor(*, timeout_s, startup_limit_s):
    """A fleet of one, its supervisor (the learner ready) and its clock."""
    fleet, clock = RecordingFleet(), ManualClock()
    actors = ActorSupervisor(
        fleet=fleet,
        num_actors=1,
        seed=0,
        timeout_s=timeout_s,
        startup_limit_s=startup_limit_s,
        clock=clock,
    )
    actors.learner_ready()
    return fleet, actors, clock


def test_the_start_up_limit_is_never_below_the_silence_limit():
    _, actors, clock = _one_actor(timeout_s=2.0, startup_limit_s=0.5)
    clock.advance(1.0)
    assert actors.replace_silent({}) == []
    clock.advance(1.3)
    assert [f.cause for f in actors.replace_silent({})] == [
        "did not start within 2 s: hung, replaced"
    ]


def test_a_slot_whose_start_was_reported_before_its_replacement_starts_anew():
    """A replacement is starting again: its predecessor's finished start does not count."""
    fleet, actors, clock = _one_actor(timeout_s=0.5, startup_limit_s=5.0)
    fleet.finish_starting(0)
    assert actors.replace_silent({}) == []
    clock.advance(0.7)
    assert [f.slot for f in actors.replace_silent({})] == [0]  # the started one went silent
    clock.advance(0.7)  # its replacement is starting: longer than timeout_s is allowed
    assert actors.replace_silent({}) == [] and fleet.removed == [0]


def test_the_flag_help_states_the_start_up_limit():
    help_text = next(f.field.metadata["help"] for f in config_fields() if f.key == "actor_timeout")
    assert f"start-up may take {STARTUP_LIMIT_S:.0f} s, or this if longer" in help_text


def _silent_failures(actors, fleet, clock, count):
    """`count` times: the actor in slot 0 finishes starting, then stays silent 1.5 s."""
    for _ in range(count):
        fleet.finish_starting(0)
        actors.replace_silent({})
        clock.advance(1.5)
        actors.replace_silent({})


def test_failures_beyond_the_limit_within_the_window_raise_a_crash_loop():
    fleet, clock = RecordingFleet(), ManualClock()
    actors = ActorSupervisor(
        fleet=fleet, num_actors=1, seed=0, timeout_s=1.0, max_failures=2, window_s=10.0, clock=clock
    )
    actors.learner_ready()
    _silent_failures(actors, fleet, clock, 2)
    assert actors.restarts == 2
    with pytest.raises(ActorCrashLoop, match=r"3 actor failures within 10 s \(limit 2\)"):
        _silent_failures(actors, fleet, clock, 1)


def test_failures_older_than_the_window_do_not_count():
    fleet, clock = RecordingFleet(), ManualClock()
    actors = ActorSupervisor(
        fleet=fleet, num_actors=1, seed=0, timeout_s=1.0, max_failures=2, window_s=2.0, clock=clock
    )
    actors.learner_ready()
    _silent_failures(actors, fleet, clock, 6)  # one failure each 1.5 s: at most 2 in a window
    assert actors.restarts == 6 and fleet.removed == [0] * 6
