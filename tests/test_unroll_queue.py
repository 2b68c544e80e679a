"""UnrollQueue: back-pressure, splitting without loss, accounting, close and timeouts.

Blocking is observed with threads and events; a short timeout only ever checks
that something has NOT happened yet, never that it has.
"""

import queue
import threading

import numpy as np
import pytest

from impala_rep.learner.unroll_queue import QueueClosed, UnrollQueue
from impala_rep.unroll import EpisodeStats, Unroll

T = 3
WAIT = 10.0  # generous bound for things that must happen
NOT_YET = 0.2  # short wait for things that must not happen


def block(ids, state=True):
    """An Unroll whose columns are tagged with `ids` in every field."""
    ids = np.asarray(ids)
    e = len(ids)
    tag = np.broadcast_to(ids, (T + 1, e))
    return Unroll(
        observations=np.stack([tag, -tag], axis=-1).astype(np.float32),  # [T+1, E, 2]
        prev_actions=tag.astype(np.int32),
        prev_rewards=tag.astype(np.float32),
        first=(tag % 2 == 0),
        actions=tag[:T].astype(np.int32),
        rewards=tag[:T].astype(np.float32) + np.arange(T)[:, None],
        terminated=(tag[:T] % 3 == 0),
        truncated=(tag[:T] % 3 == 1),
        truncation_values=tag[:T].astype(np.float32),
        behaviour_logits=np.stack([tag[:T]] * 4, axis=-1).astype(np.float32),
        initial_state={"h": np.stack([ids, ids * 10], axis=-1).astype(np.float32)} if state else (),
        policy_version=ids.astype(np.int64),
    )


def stats(tag):
    return EpisodeStats(returns=np.array([float(tag)]), lengths=np.array([tag]))


def columns(unroll):
    """The column tags, checked to be consistent across every field."""
    ids = unroll.policy_version
    expected = block(ids)
    for name in Unroll._fields:
        if name == "initial_state":
            np.testing.assert_array_equal(unroll.initial_state["h"], expected.initial_state["h"])
        else:
            np.testing.assert_array_equal(
                getattr(unroll, name), getattr(expected, name), err_msg=name
            )
    return ids.tolist()


def assert_accounting(q):
    counts = q.counts()
    assert counts.frames_put == counts.frames_got + counts.frames_queued
    return counts


def in_thread(fn):
    """Runs fn in a daemon thread; returns (done event, result dict)."""
    done, result = threading.Event(), {}

    def target():
        try:
            result["value"] = fn()
        except BaseException as err:  # surfaced to the test through `result`
            result["error"] = err
        finally:
            done.set()

    threading.Thread(target=target, daemon=True).start()
    return done, result


def test_get_concatenates_and_splits_blocks_in_order():
    q = UnrollQueue(capacity=10)
    widths = [3, 5, 2, 4]
    start = 0
    for i, width in enumerate(widths):
        q.put(block(range(start, start + width)), stats=stats(i))
        start += width
    assert q.size == 4 and assert_accounting(q).frames_queued == 14 * T

    got = []
    for expected_stats in ([0, 1], [], [2, 3]):  # blocks whose FIRST column each batch takes
        batch, episode_stats = q.get_batch(4)
        got.append(columns(batch))
        assert [int(s.lengths[0]) for s in episode_stats] == expected_stats
        assert_accounting(q)
    assert got == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    # The split remainder of the last block is still at the head: nothing lost.
    counts = assert_accounting(q)
    assert counts == (14 * T, 12 * T, 2 * T, 1)

    q.put(block([14, 15, 16]), stats=stats(4))
    batch, episode_stats = q.get_batch(5)
    assert columns(batch) == [12, 13, 14, 15, 16]
    assert [int(s.lengths[0]) for s in episode_stats] == [4]  # block 3's stats went already
    assert assert_accounting(q) == (17 * T, 17 * T, 0, 0)


def test_block_without_recurrent_state_splits_too():
    q = UnrollQueue(capacity=2)
    q.put(block([0, 1, 2], state=False))
    first, _ = q.get_batch(2)
    rest, _ = q.get_batch(1)
    assert first.initial_state == () and rest.initial_state == ()
    assert first.policy_version.tolist() == [0, 1] and rest.policy_version.tolist() == [2]
    assert first.observations.shape == (T + 1, 2, 2) and rest.actions.shape == (T, 1)


def test_put_blocks_while_full_until_a_get():
    q = UnrollQueue(capacity=2)
    q.put(block([0]))
    q.put(block([1]))
    with pytest.raises(queue.Full):
        q.put(block([9]), timeout=0.05)
    done, result = in_thread(lambda: q.put(block([2])))
    assert not done.wait(NOT_YET)  # back-pressure: the put waits
    assert q.size == 2

    batch, _ = q.get_batch(1)

    assert done.wait(WAIT) and "error" not in result
    assert columns(batch) == [0]
    assert q.size == 2
    assert columns(q.get_batch(2)[0]) == [1, 2]  # the timed-out put added nothing
    assert_accounting(q)


def test_batch_larger_than_capacity_fills_while_puts_continue():
    # 8 columns with room for only 2 blocks of 2: get_batch must take blocks out as
    # they arrive, or producer and consumer would wait for each other forever.
    q = UnrollQueue(capacity=2)
    done, result = in_thread(lambda: q.get_batch(8))
    for i in range(4):
        q.put(block([2 * i, 2 * i + 1]), timeout=WAIT)
    assert done.wait(WAIT) and "error" not in result
    assert columns(result["value"][0]) == list(range(8))
    assert assert_accounting(q) == (8 * T, 8 * T, 0, 0)


def test_concurrent_producers_and_consumer_lose_nothing():
    q = UnrollQueue(capacity=3)
    producers, blocks_each, width, batch_size = 4, 30, 3, 5
    failures = []
    stop = threading.Event()

    def produce(p):
        for k in range(blocks_each):
            first = (p * blocks_each + k) * width
            q.put(block(range(first, first + width)), timeout=WAIT)

    def watch():
        while not stop.wait(0.0005):  # sample often without hogging the queue's lock
            counts = q.counts()
            if counts.frames_put != counts.frames_got + counts.frames_queued:
                failures.append(counts)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    threads = [threading.Thread(target=produce, args=(p,), daemon=True) for p in range(producers)]
    for thread in threads:
        thread.start()
    total = producers * blocks_each * width
    got = []
    for _ in range(total // batch_size):
        got.extend(columns(q.get_batch(batch_size, timeout=WAIT)[0]))
    for thread in threads:
        thread.join(WAIT)
    stop.set()
    watcher.join(WAIT)

    assert not failures
    assert sorted(got) == list(range(total))
    for p in range(producers):  # each producer's columns come out in the order it put them
        mine = [c for c in got if c // (blocks_each * width) == p]
        assert mine == sorted(mine)
    assert assert_accounting(q) == (total * T, total * T, 0, 0)


def test_close_wakes_blocked_put_and_get():
    full = UnrollQueue(capacity=1)
    full.put(block([0]))
    empty = UnrollQueue(capacity=1)
    put_done, put_result = in_thread(lambda: full.put(block([1])))
    get_done, get_result = in_thread(lambda: empty.get_batch(1))
    assert not put_done.wait(NOT_YET) and not get_done.wait(0)

    full.close()
    empty.close()

    assert put_done.wait(WAIT) and isinstance(put_result.get("error"), QueueClosed)
    assert get_done.wait(WAIT) and isinstance(get_result.get("error"), QueueClosed)
    with pytest.raises(QueueClosed):
        full.put(block([2]))
    # What was queued can still be taken in complete batches; then gets fail at once.
    assert columns(full.get_batch(1)[0]) == [0]
    with pytest.raises(QueueClosed):
        full.get_batch(1)
    assert full.closed and assert_accounting(full) == (T, T, 0, 0)


def test_close_returns_a_partial_batch_to_the_queue():
    q = UnrollQueue(capacity=4)
    q.put(block([0, 1]), stats=stats(0))
    q.put(block([2]), stats=stats(1))
    done, result = in_thread(lambda: q.get_batch(5))
    assert not done.wait(NOT_YET)
    # The getter holds the 3 columns as a partial batch; they still count as queued.
    assert assert_accounting(q).frames_queued == 3 * T

    q.close()

    assert done.wait(WAIT) and isinstance(result.get("error"), QueueClosed)
    assert assert_accounting(q) == (3 * T, 0, 3 * T, 1)  # back as one block
    batch, episode_stats = q.get_batch(3)
    assert columns(batch) == [0, 1, 2]
    assert [int(s.lengths[0]) for s in episode_stats] == [0, 1]


def test_get_timeout_keeps_everything_in_order():
    q = UnrollQueue(capacity=4)
    q.put(block([0, 1]))
    q.put(block([2]))
    with pytest.raises(queue.Empty):
        q.get_batch(5, timeout=0.05)
    assert assert_accounting(q) == (3 * T, 0, 3 * T, 1)
    q.put(block([3, 4]))
    assert columns(q.get_batch(5)[0]) == [0, 1, 2, 3, 4]


def test_rejects_bad_arguments():
    with pytest.raises(ValueError, match="capacity must be an integer >= 1"):
        UnrollQueue(capacity=0)
    q = UnrollQueue(capacity=2)
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1"):
        q.get_batch(0)
    q.put(block([0]))
    longer = block([1])._replace(actions=np.zeros((T + 1, 1), np.int32))
    with pytest.raises(ValueError, match=f"unroll length T={T + 1} differs"):
        q.put(longer)
    assert assert_accounting(q) == (T, 0, T, 1)
