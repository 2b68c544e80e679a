"""A 2-host learner for real: two Ray actors in one MultiWorkerMirroredStrategy group over loopback.

The hosts must hold identical weights after their steps, equal to one learner
(no group) stepping on the whole batch. Also the pieces that need no cluster:
TF_CONFIG building, report merging, the settings refused. A two-host run through
`train`, stopped, checkpointed and resumed on two hosts and then one, is
test_shutdown's.
"""

import functools
import time

import numpy as np
import pytest
from random_unrolls import random_unroll

ray = pytest.importorskip("ray")

from impala_rep.config import TrainConfig  # noqa: E402
from impala_rep.learner.cluster_spec import free_port, tf_config  # noqa: E402
from impala_rep.learner.learner_group import create_learner_group, distinct_addresses  # noqa: E402
from impala_rep.learner.ray_learner import INLINE_BYTES, publish  # noqa: E402
from impala_rep.learner.report import LearnerReport  # noqa: E402
from impala_rep.reward_scale import RewardScale  # noqa: E402
from impala_rep.unroll import EpisodeStats, slice_columns  # noqa: E402

T, B, A, OBS, STEPS = 5, 8, 3, 4, 3


def mlp_agent(num_actions, hidden_sizes):
    from impala_rep.agent import MLPAgent

    return MLPAgent(num_actions=num_actions, hidden_sizes=hidden_sizes)


# --- no cluster needed --------------------------------------------------------------


def test_tf_config_lists_every_host_and_names_this_one():
    assert tf_config(["10.0.0.1:1234", "10.0.0.2:1234"], 1) == {
        "cluster": {"worker": ["10.0.0.1:1234", "10.0.0.2:1234"]},
        "task": {"type": "worker", "index": 1},
    }
    port = free_port("127.0.0.1")
    assert 0 < port < 65536


@pytest.mark.parametrize(
    "addresses, index, message",
    [
        ([], 0, "at least one"),
        (["10.0.0.1"], 0, "bad learner host address '10.0.0.1'"),
        (["a:1", "a:1"], 0, "repeat"),
        (["a:1", "b:1"], 2, "bad learner host index 2: expected 0..1"),
    ],
)
def test_tf_config_rejects_bad_groups(addresses, index, message):
    with pytest.raises(ValueError, match=message):
        tf_config(addresses, index)


@pytest.mark.parametrize(
    "settings, message",
    [
        (
            dict(learner_hosts=2, learner_devices="cpu:2"),
            "bad learner_devices 'cpu:2': with learner_hosts 2",
        ),
        (dict(learner_hosts=2, learner_devices="tpu"), "bad learner_devices 'tpu'"),
        (dict(learner_hosts=2, num_actors=1), "bad num_actors 1: every one of the 2 learner hosts"),
        (
            dict(learner_hosts=2, num_actors=2, batch_size=15),
            "bad batch_size 15: must split evenly over 2 learner hosts x 1 replicas each",
        ),
        (dict(learner_hosts=0), "bad learner_hosts 0"),
        (
            dict(learner_hosts=2, num_actors=2, launcher="local"),
            "bad learner_hosts 2: must be 1 with --launcher local",
        ),
        (
            dict(learner_hosts=2, num_actors=2, learner_process="driver"),
            "bad learner_hosts 2: must be 1 with --learner-process driver",
        ),
    ],
)
def test_config_refuses_what_a_group_cannot_run(settings, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig.from_keys(settings)


@pytest.mark.parametrize(
    "settings, where",
    [
        ({}, "driver"),  # an embedded Ray
        (dict(launcher="local"), "driver"),
        (dict(ray_address="auto"), "ray"),  # a cluster: where the learner's devices are
        (dict(learner_hosts=2, num_actors=2), "ray"),
        (dict(learner_devices="cpu:2"), "ray"),  # logical devices need a fresh TensorFlow
        (dict(learner_devices="gpu"), "ray"),  # Ray reserves its GPU, as before
        (dict(learner_devices="tpu"), "ray"),
        (dict(ray_address="auto", learner_process="driver"), "driver"),  # as asked
    ],
)
def test_the_learner_runs_in_the_driver_on_one_cpu_of_one_machine(settings, where):
    from impala_rep.config.auto import resolve_auto_settings

    config = resolve_auto_settings(TrainConfig.from_keys(settings), (4,), continuous_actions=False)
    assert config.run.learner_process == where


def test_merged_report_adds_frames_and_takes_the_common_step():
    def report(steps, frames, queued, returns, mean, lag, **extra):
        return LearnerReport(
            learner_steps=steps,
            frames_produced=frames + queued,
            frames_consumed=frames,
            frames_queued=queued,
            queue_size=1,
            learner_busy_s=2.0,
            new_episode_returns=tuple(returns),
            episodes=len(returns),
            episode_return_mean=mean,
            window_episodes=len(returns),
            metrics={"loss": 1.5},
            policy_lag_mean=lag,
            policy_lag_max=lag,
            done=False,
            **extra,
        )

    chief = report(5, 100, 20, [1.0], 1.0, 2.0, last_checkpoint=("ckpt-5", 5))
    other = report(4, 80, 0, [3.0, 3.0], 3.0, 4.0, error="Traceback ...")
    merged = LearnerReport.merge([chief, other])
    assert merged.learner_steps == 4
    assert merged.frames_consumed == 180 and merged.frames_queued == 20
    assert merged.frames_produced == merged.frames_consumed + merged.frames_queued
    assert merged.new_episode_returns == (1.0, 3.0, 3.0)
    assert merged.episodes == 3 and merged.episode_return_mean == pytest.approx(7 / 3)
    assert merged.window_episodes == 3
    assert merged.metrics == {"loss": 1.5}  # reduced over every replica already: the chief's
    assert (merged.policy_lag_mean, merged.policy_lag_max) == (3.0, 4.0)
    assert merged.error == "Traceback ..." and merged.last_checkpoint == ("ckpt-5", 5)
    assert LearnerReport.merge([chief]) is chief


def test_hosts_are_asked_again_until_their_addresses_differ():
    answers = iter([["10.0.0.1:5000", "10.0.0.1:5000"], ["10.0.0.1:5000", "10.0.0.1:5001"]])
    assert distinct_addresses(lambda: next(answers)) == ["10.0.0.1:5000", "10.0.0.1:5001"]


def test_addresses_that_keep_colliding_are_an_error_naming_them():
    calls = []

    def ask():
        calls.append(1)
        return ["10.0.0.1:5000", "10.0.0.2:6000", "10.0.0.1:5000"]

    with pytest.raises(RuntimeError, match=r"same address 10\.0\.0\.1:5000 3 times"):
        distinct_addresses(ask)
    assert len(calls) == 3


# --- through Ray -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def reference_replicator():
    """One single-device Replicator for this module's in-process learners."""
    from impala_rep import Replicator

    return Replicator("cpu")


def test_publish_keeps_small_weights_in_the_reply_and_puts_large_ones_in_the_store(local_ray):
    small = [np.ones(INLINE_BYTES // 8, np.float32), np.zeros(3, np.int32)]
    assert publish(small) is small
    large = [np.arange(INLINE_BYTES // 4 + 1, dtype=np.float32)]
    ref = publish(large)
    assert isinstance(ref, ray.ObjectRef)
    np.testing.assert_array_equal(ray.get(ref)[0], large[0])


def test_two_hosts_stay_identical_and_equal_one_learner_on_the_whole_batch(
    local_ray, reference_replicator
):
    # Reward scaling on (the default), rewards unclipped, so the scale shows in the update.
    config = TrainConfig.from_keys(
        dict(
            num_actors=2,
            learner_hosts=2,
            unroll_length=T,
            batch_size=B,
            total_frames=STEPS * T * B,
            queue_capacity=2,
            learning_rate=0.05,
            hidden_sizes=(8,),
            reward_clipping="none",
            passes=2,
        )
    )
    assert config.loss.normalize_rewards
    factory = functools.partial(mlp_agent, A, (8,))
    group = create_learner_group(config, (OBS,), factory)
    try:
        group.wait_started()
        version, published = ray.get(group.chief.latest_weights.remote())
        initial = published[0]  # this MLP's weights are small: carried in the reply itself
        assert not isinstance(initial, ray.ObjectRef)
        assert version == 0
        batches = [
            random_unroll(T=T, B=B, obs_size=OBS, num_actions=A, seed=s) for s in range(STEPS)
        ]
        # Each host's actors report other return moments: the hosts must still agree on one
        # scale, that of every host's moments merged.
        moments = [
            [(10.0 + s + k, 3.0 * k - s, 4.0 + 20.0 * k + s) for k in range(2)]
            for s in range(STEPS)
        ]
        for s, batch in enumerate(batches):  # host k gets columns [k B/2, (k+1) B/2) of every batch
            ray.get(
                [
                    host.enqueue.remote(
                        slice_columns(batch, k * B // 2, (k + 1) * B // 2),
                        EpisodeStats(
                            np.zeros(0), np.zeros(0, np.int64), return_moments=moments[s][k]
                        ),
                    )
                    for k, host in enumerate(group.hosts)
                ]
            )
        report = group.report()
        for _ in range(600):
            if report.done:
                break
            report = group.report()
            time.sleep(0.1)
        assert report.done and report.error is None, report.error
        assert group.stop()
        # As the driver does: the counters are final after the stop. The merged report is done
        # once one host is, when the other may still be finishing the last step (seen: 5 of 6).
        report = group.report()
        passes = config.learner.passes  # each batch trained on that many times, by both hosts
        assert report.learner_steps == STEPS * passes
        assert report.frames_consumed == STEPS * T * B
        weights = ray.get([host.get_weights.remote() for host in group.hosts])
    finally:
        group.kill()
    assert [version for version, _ in weights] == [STEPS * passes] * 2
    for a, b in zip(weights[0][1], weights[1][1]):
        np.testing.assert_array_equal(a, b)

    # The reference: one learner, no group, the same start, every whole batch.
    learner = reference_learner(config, factory, reference_replicator, (OBS,))
    learner.agent.set_weights(initial)
    scale = RewardScale()
    for batch, host_moments in zip(batches, moments):
        for m in host_moments:
            scale.update_moments(m)
        assert scale.scale > 2.0  # far from 1: an unscaled or per-host update would differ
        for _ in range(passes):
            learner.step(scale.apply(batch))
    # Two half-batch gradients all-reduced are not the whole batch's gradient bit for bit:
    # float32 sums in another order, compounded over every update (CI saw 3e-5 relative
    # with 8 passes). A missing or per-host reward scale moves weights by far more.
    for got, want in zip(weights[0][1], learner.get_weights()[1]):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def reference_learner(config, factory, replicator, observation_shape):
    """One learner with no group, as a run with `config` builds it."""
    from impala_rep.learner.learner import Learner

    return Learner(
        agent=factory(),
        replicator=replicator,
        observation_shape=observation_shape,
        total_steps=config.total_learner_steps(),
        loss=config.loss,
        optimizer=config.optimizer,
    )


def _failing_agent():
    raise ValueError("this agent cannot be built")


def test_a_host_answers_actors_only_once_built_and_refuses_them_if_its_build_failed():
    """Actors start while the learner builds: their calls wait for the build, and fail with
    the build's error rather than hanging when the build fails."""
    import threading

    from impala_rep.learner.ray_learner import LearnerHost

    host, answers = LearnerHost(), {}

    def ask(name, call):
        try:
            answers[name] = call()
        except RuntimeError as err:
            answers[name] = str(err)

    waiting = [
        threading.Thread(target=ask, args=("weights", host.latest_weights), daemon=True),
        threading.Thread(target=ask, args=("enqueue", lambda: host.enqueue(None)), daemon=True),
    ]
    for thread in waiting:
        thread.start()
    time.sleep(0.5)
    assert all(thread.is_alive() for thread in waiting) and not answers  # no service yet
    with pytest.raises(ValueError, match="cannot be built"):
        host.start(config=TrainConfig(), observation_shape=(4,), agent_factory=_failing_agent)
    for thread in waiting:
        thread.join(timeout=10)
        assert not thread.is_alive()
    for name in ("weights", "enqueue"):
        assert answers[name].startswith("the learner could not start (ValueError:"), answers
        assert "cannot be built" in answers[name]
