"""ActorLiveness: each slot's silence on the injected clock, 0 while a send is in progress."""

import pytest

from impala_rep.learner.liveness import ActorLiveness


class ManualClock:
    def __init__(self):
        self.now = 50.0

    def __call__(self):
        return self.now


def test_silence_is_the_time_since_each_slot_last_sent():
    clock = ManualClock()
    liveness = ActorLiveness(clock)
    assert liveness.silence_s() == {}
    with liveness.sending(0):
        pass
    clock.now += 4.0
    with liveness.sending(1):
        clock.now += 1.0  # the send itself takes a second: heard again when it ends
    clock.now += 2.0
    with liveness.sending(None):  # an unnamed sender is not tracked
        pass
    assert liveness.silence_s() == {0: 7.0, 1: 2.0}


def test_a_slot_waiting_in_a_send_is_not_silent():
    clock = ManualClock()
    liveness = ActorLiveness(clock)
    with liveness.sending(3):
        clock.now += 30.0  # blocked on a full queue
        assert liveness.silence_s() == {3: 0.0}
        with liveness.sending(3):  # a second send of the same slot (a retry)
            pass
        assert liveness.silence_s() == {3: 0.0}
    clock.now += 1.0
    assert liveness.silence_s() == {3: 1.0}


def test_a_failed_send_still_ends():
    clock = ManualClock()
    liveness = ActorLiveness(clock)
    with pytest.raises(ValueError), liveness.sending(2):
        raise ValueError("bad unroll")
    clock.now += 5.0
    assert liveness.silence_s() == {2: 5.0}
