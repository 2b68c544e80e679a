"""A 2-host learner for real: two Ray actors in one MultiWorkerMirroredStrategy group over loopback.

The hosts must hold identical weights after their steps, equal to one learner
(no group) stepping on the whole batch; and `train()` must run CartPole with
`learner_hosts=2` end to end, checkpoints included. Also the pieces that need
no cluster: TF_CONFIG building, report merging, the settings refused.
"""

import functools
import json
import time

import numpy as np
import pytest
from random_unrolls import random_unroll

ray = pytest.importorskip("ray")

from impala_rep.config import TrainConfig  # noqa: E402
from impala_rep.learner.cluster_spec import free_port, tf_config  # noqa: E402
from impala_rep.learner.learner_group import (create_learner_group, distinct_addresses,  # noqa: E402
                                              merge_reports)
from impala_rep.resume import check_resumable, load_run_config, resumed_config  # noqa: E402
from impala_rep.training import train  # noqa: E402
from impala_rep.unroll import slice_columns  # noqa: E402

T, B, A, OBS, STEPS = 5, 8, 3, 4, 3


def mlp_agent(num_actions, hidden_sizes):
    from impala_rep.agent import MLPAgent

    return MLPAgent(num_actions=num_actions, hidden_sizes=hidden_sizes)


# --- no cluster needed --------------------------------------------------------------

def test_tf_config_lists_every_host_and_names_this_one():
    assert tf_config(["10.0.0.1:1234", "10.0.0.2:1234"], 1) == {
        "cluster": {"worker": ["10.0.0.1:1234", "10.0.0.2:1234"]},
        "task": {"type": "worker", "index": 1}}
    port = free_port("127.0.0.1")
    assert 0 < port < 65536


@pytest.mark.parametrize("addresses, index, message", [
    ([], 0, "at least one"),
    (["10.0.0.1"], 0, "bad learner host address '10.0.0.1'"),
    (["a:1", "a:1"], 0, "repeat"),
    (["a:1", "b:1"], 2, "bad learner host index 2: expected 0..1"),
])
def test_tf_config_rejects_bad_groups(addresses, index, message):
    with pytest.raises(ValueError, match=message):
        tf_config(addresses, index)


@pytest.mark.parametrize("settings, message", [
    (dict(learner_hosts=2, learner_devices="cpu:2"), "bad learner_devices 'cpu:2': with learner_hosts 2"),
    (dict(learner_hosts=2, learner_devices="tpu"), "bad learner_devices 'tpu'"),
    (dict(learner_hosts=2, num_actors=1), "bad num_actors 1: every one of the 2 learner hosts"),
    (dict(learner_hosts=2, num_actors=2, batch_size=15), "bad batch_size 15: must split evenly over 2 "
                                                         "learner hosts x 1 replicas each"),
    (dict(learner_hosts=0), "bad learner_hosts 0"),
])
def test_config_refuses_what_a_group_cannot_run(settings, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**settings)


def test_merged_report_adds_frames_and_takes_the_common_step():
    def report(steps, frames, queued, returns, mean, lag):
        return {"learner_steps": steps, "frames_produced": frames + queued, "frames_consumed": frames,
                "frames_queued": queued, "queue_size": 1, "learner_busy_s": 2.0,
                "new_episode_returns": returns, "episodes": len(returns), "episode_return_mean": mean,
                "metrics": {"loss": 1.5, "policy_lag_mean": lag, "policy_lag_max": lag},
                "done": False, "error": None, "non_finite": None, "last_checkpoint": None}

    merged = merge_reports([report(5, 100, 20, [1.0], 1.0, 2.0), report(4, 80, 0, [3.0, 3.0], 3.0, 4.0)])
    assert merged["learner_steps"] == 4
    assert merged["frames_consumed"] == 180 and merged["frames_queued"] == 20
    assert merged["frames_produced"] == merged["frames_consumed"] + merged["frames_queued"]
    assert merged["episodes"] == 3 and merged["episode_return_mean"] == pytest.approx(7 / 3)
    assert merged["metrics"] == {"loss": 1.5, "policy_lag_mean": 3.0, "policy_lag_max": 4.0}


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


def test_a_multi_host_run_is_not_resumed(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "checkpoint").write_text('model_checkpoint_path: "ckpt-1"\n')
    (tmp_path / "config.json").write_text(json.dumps(TrainConfig(learner_hosts=2).to_json()))
    saved = load_run_config(str(tmp_path))
    with pytest.raises(ValueError, match="cannot resume with learner_hosts 2: .* --learner-hosts 1"):
        check_resumable(saved)
    check_resumable(resumed_config(saved, {"learner_hosts": 1}))  # the way out


# --- through Ray -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def reference_replicator():
    """One single-device Replicator for this module's in-process learners."""
    from impala_rep import Replicator

    return Replicator("cpu")


def test_two_hosts_stay_identical_and_equal_one_learner_on_the_whole_batch(local_ray,
                                                                          reference_replicator):
    config = TrainConfig(num_actors=2, learner_hosts=2, unroll_length=T, batch_size=B,
                         total_frames=STEPS * T * B, queue_capacity=2, learning_rate=0.05,
                         hidden_sizes=(8,))
    factory = functools.partial(mlp_agent, A, (8,))
    group = create_learner_group(config, (OBS,), factory)
    try:
        group.wait_started()
        version, published = ray.get(group.chief.latest_weights.remote())
        initial = ray.get(published[0])
        assert version == 0
        batches = [random_unroll(T=T, B=B, obs_size=OBS, num_actions=A, seed=s) for s in range(STEPS)]
        for batch in batches:  # host k gets columns [k B/2, (k+1) B/2) of every batch
            ray.get([host.enqueue.remote(slice_columns(batch, k * B // 2, (k + 1) * B // 2))
                     for k, host in enumerate(group.hosts)])
        report = group.report()
        for _ in range(600):
            if report["done"]:
                break
            report = group.report()
            time.sleep(0.1)
        assert report["done"] and report["error"] is None, report["error"]
        assert report["learner_steps"] == STEPS
        assert report["frames_consumed"] == STEPS * T * B
        assert group.stop()
        weights = ray.get([host.get_weights.remote() for host in group.hosts])
    finally:
        group.kill()
    assert [version for version, _ in weights] == [STEPS, STEPS]
    for a, b in zip(weights[0][1], weights[1][1]):
        np.testing.assert_array_equal(a, b)

    # The reference: one learner, no group, the same start, every whole batch.
    from impala_rep.learner.learner import Learner
    from impala_rep.learner.ray_learner import learner_hyperparams

    learner = Learner(agent=factory(), replicator=reference_replicator,
                      hyperparams=learner_hyperparams(config), observation_shape=(OBS,))
    learner.agent.set_weights(initial)
    for batch in batches:
        learner.step(batch)
    for got, want in zip(weights[0][1], learner.get_weights()[1]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_train_cartpole_with_two_learner_hosts(local_ray, reference_replicator, tmp_path):
    logdir = tmp_path / "run"
    config = TrainConfig(num_actors=2, learner_hosts=2, envs_per_actor=16, unroll_length=20,
                         batch_size=16, total_frames=16_000, seed=4, logdir=str(logdir),
                         report_every_s=0.5, checkpoint_every_s=0.5)
    result = train(config)

    steps = config.total_learner_steps()
    assert result.learner_steps == steps
    assert result.frames == steps * config.steps_per_update  # each host: half of every batch
    records = [json.loads(line) for line in (logdir / "metrics.jsonl").read_text().splitlines()]
    for record in records:
        assert record["frames_produced"] == record["frames"] + record["frames_queued"]
    assert result.episodes > 0
    # Host 0 keeps the checkpoints (the other host saved into scratch directories).
    newest = (logdir / "checkpoints" / "checkpoint").read_text()
    assert f"ckpt-{steps}" in newest

    # The chief's checkpoint restores onto a one-host learner (the way to resume it),
    # with the run's total frame count, not just the chief's half.
    from impala_rep.learner.checkpointing import RunCheckpoint
    from impala_rep.learner.learner import Learner
    from impala_rep.learner.ray_learner import learner_hyperparams
    from impala_rep.training import default_agent_factory

    learner = Learner(agent=default_agent_factory(config, (4,), 2)(), replicator=reference_replicator,
                      hyperparams=learner_hyperparams(config), observation_shape=(4,))
    path, counters = RunCheckpoint(learner=learner, directory=logdir / "checkpoints").restore()
    assert path.endswith(f"ckpt-{steps}") and learner.num_steps == steps
    assert counters.frames == result.frames
