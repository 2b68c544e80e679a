"""The learner's staging area (learner/staging.py): a batch staged ahead of its step trains
exactly as one given whole, the stager works one batch ahead in order, and the service
counts a staged batch as queued until it is trained on."""

import queue
import threading
import time

import numpy as np
import pytest
from fresh_python import run_fresh_python
from random_unrolls import random_unroll

from impala_rep import Replicator
from impala_rep.agent import MLPAgent
from impala_rep.config import OptimizerConfig
from impala_rep.learner.learner import Learner
from impala_rep.learner.service import LearnerService, TrainingPlan
from impala_rep.learner.staging import BatchStager
from impala_rep.unroll import EpisodeStats

T, B, A, OBS = 4, 6, 3, 5
FRAMES_PER_STEP = T * B


@pytest.fixture(scope="module")
def replicator():
    return Replicator("cpu")


def make_learner(replicator):
    return Learner(
        agent=MLPAgent(num_actions=A, hidden_sizes=(8,)),
        replicator=replicator,
        total_steps=100,
        optimizer=OptimizerConfig(learning_rate=1e-2),
        observation_shape=(OBS,),
    )


def test_staged_inputs_give_what_raw_inputs_give(replicator):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    step = lambda batch: batch["x"] * 2.0  # noqa: E731 (one function object: one trace)
    staged = replicator.stage({"x": x}, batch_axis=1)
    np.testing.assert_array_equal(
        replicator.run(step, staged, batch_axis=1)[0],
        replicator.run(step, {"x": x}, batch_axis=1)[0],
    )
    results, done = replicator.repeat(step, staged, times=2, batch_axis=1)
    assert done == 2
    np.testing.assert_array_equal(results[0], 2 * x)
    with pytest.raises(ValueError, match="staged with batch_axis=1 given with batch_axis=0"):
        replicator.run(step, staged, batch_axis=0)
    with pytest.raises(ValueError, match="Replicator.stage needs at least one input array"):
        replicator.stage({}, batch_axis=0)


def test_a_prepared_batch_trains_exactly_as_the_batch(replicator):
    whole, staged = make_learner(replicator), make_learner(replicator)
    staged.agent.set_weights(whole.agent.get_weights())
    for seed in range(3):
        batch = random_unroll(
            T=T, B=B, obs_size=OBS, num_actions=A, seed=seed, policy_version=np.full(B, seed)
        )
        prepared = staged.prepare(batch)
        assert whole.step(batch, passes=2) == staged.step(prepared, passes=2)
    for a, b in zip(whole.agent.get_weights(), staged.agent.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_the_stager_works_exactly_one_item_ahead_of_its_consumer():
    """Item 1 is taken while item 0 is in use, before anyone asks for it; and no take ever
    runs more than one item ahead of what the consumer has asked for. Both hold whatever
    the threads' timing (the waits below end at once unless the stager is broken)."""
    requested, ahead, prepared = 0, [], queue.SimpleQueue()
    items = iter(range(3))

    def take():
        ahead.append(len(ahead) + 1 - requested)  # takes so far, this one included, less asks
        return next(items, None)

    def prepare(item):
        prepared.put(item)
        return item * 10

    stager = BatchStager(take=take, prepare=prepare)
    results = []
    for _ in range(4):
        requested += 1
        results.append(stager.get())
        if results[-1] == 0:
            assert prepared.get(timeout=10) == 0
            assert prepared.get(timeout=10) == 1  # staged while item 0 is in use
    assert results == [0, 10, 20, None]
    assert ahead[:2] == [1, 1] and max(ahead) <= 1  # a later ask may come before a take
    stager.close()


def test_the_stager_raises_its_error_in_the_consumer_and_closes_promptly():
    def prepare(item):
        raise ZeroDivisionError(f"bad item {item}")

    with pytest.raises(ZeroDivisionError, match="bad item 7"):
        BatchStager(take=lambda: 7, prepare=prepare).get()

    taken = threading.Event()

    def take():
        taken.set()
        return 1

    stager = BatchStager(take=take, prepare=lambda item: item)
    assert taken.wait(timeout=10)  # one item staged: the thread waits for a `get`
    stager.close(timeout_s=10.0)
    assert not stager._thread.is_alive()


def test_a_staged_batch_counts_as_queued_until_it_is_trained_on(replicator):
    """A non-finite batch stops training; it and the batch staged behind it were never
    trained on, so they count as queued, and produced == consumed + queued."""
    service = LearnerService(
        learner=make_learner(replicator),
        plan=TrainingPlan(batch_size=B, total_frames=10 * FRAMES_PER_STEP, queue_capacity=2),
    )
    bad = random_unroll(T=T, B=B, obs_size=OBS, num_actions=A, seed=1)
    bad.observations[0, 0, 0] = np.inf
    for unroll in (
        random_unroll(T=T, B=B, obs_size=OBS, num_actions=A, seed=0),
        bad,
        random_unroll(T=T, B=B, obs_size=OBS, num_actions=A, seed=2),
    ):
        service.enqueue(unroll, EpisodeStats(np.asarray([1.0]), np.ones(1)))
    deadline = time.monotonic() + 60
    while not service.report().done:
        assert time.monotonic() < deadline, "the service did not stop"
        time.sleep(0.05)
    service.stop()
    report = service.report()
    assert report.non_finite is not None and report.learner_steps == 1
    assert report.frames_produced == 3 * FRAMES_PER_STEP
    assert report.frames_consumed == FRAMES_PER_STEP and report.episodes == 1
    assert report.frames_queued == 2 * FRAMES_PER_STEP


@pytest.mark.launches
def test_the_driver_modules_import_no_tensorflow():
    """The driver imports the learner's accounting (for RETURN_WINDOW) and the launchers; the
    service and its parts import without TensorFlow too (the staging area imports it, so the
    service loads it only in its training thread). A driver that imported TensorFlow would
    start its Ray seconds later."""
    code = (
        "import sys, impala_rep.run.cli, impala_rep.run.training, impala_rep.run.monitor, "
        "impala_rep.run.launch_ray, impala_rep.run.launch_local, impala_rep.learner.accounting, "
        "impala_rep.learner.service; "
        "loaded = sorted(m for m in ('tensorflow', 'keras') if m in sys.modules); "
        "assert not loaded, loaded"
    )
    run_fresh_python(code)
