"""The actor supervisor against an in-memory fleet (the `ActorFleet` protocol: where actors
run is the launcher's business; these tests are about when the supervisor starts, seeds and
replaces them)."""

import time

from impala_rep.run.supervisor import ActorSupervisor, actor_seed


class RecordingFleet:
    """Actors that never send anything and never end: only their starts and removals."""

    def __init__(self):
        self.started: list[tuple[int, int]] = []
        self.removed: list[int] = []

    def start(self, slot, seed):
        self.started.append((slot, seed))

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
    assert new.started == [(s, actor_seed(seed=7, slot=s, generation=0, start_step=0))
                           for s in (0, 1)]
    assert resumed.started == [(s, actor_seed(seed=7, slot=s, generation=0, start_step=1234))
                               for s in (0, 1)]
    assert not {seed for _, seed in new.started} & {seed for _, seed in resumed.started}


def test_silence_counts_from_when_the_learner_is_ready():
    """Actors start while the learner builds and can send nothing until it is built: that
    wait must not count against them."""
    fleet = RecordingFleet()
    actors = ActorSupervisor(fleet=fleet, num_actors=2, seed=0, timeout_s=1.0)
    time.sleep(1.3)  # the learner is still building: longer than the timeout
    actors.learner_ready()
    assert actors.replace_silent({}) == [] and fleet.removed == []
    time.sleep(1.3)  # now silent for longer than the timeout since the learner was ready
    failures = actors.replace_silent({})
    assert [f.slot for f in failures] == [0, 1] and fleet.removed == [0, 1]
    assert "sent no unroll" in failures[0].cause
    # Replaced with new seeds (generation 1).
    assert fleet.started[2:] == [(s, actor_seed(seed=0, slot=s, generation=1, start_step=0))
                                 for s in (0, 1)]
