"""Checkpoints: counters saved with the learner, a corrupt newest checkpoint, non-finite steps."""

import pathlib

import numpy as np
import pytest
from fresh_python import run_fresh_python
from random_unrolls import random_unroll

from impala_rep import Replicator
from impala_rep.agent import MLPAgent
from impala_rep.config import OptimizerConfig
from impala_rep.learner.checkpointing import RunCheckpoint, RunCounters
from impala_rep.learner.learner import Learner, NonFiniteError

T, B, A, OBS = 4, 6, 3, 5


@pytest.fixture(scope="module")
def replicator():
    return Replicator("cpu")


def make_learner(replicator):
    return Learner(
        agent=MLPAgent(num_actions=A, hidden_sizes=(8,)),
        replicator=replicator,
        observation_shape=(OBS,),
        total_steps=50,
        optimizer=OptimizerConfig(learning_rate=1e-2),
    )


def batch(seed=0):
    return random_unroll(T=T, B=B, obs_size=OBS, num_actions=A, seed=seed)


def weights(learner):
    return [w.copy() for w in learner.get_weights()[1]]


def test_run_checkpoint_round_trips_learner_state_and_counters(replicator, tmp_path):
    learner = make_learner(replicator)
    learner.step(batch(0))
    saver = RunCheckpoint(learner=learner, directory=tmp_path, window=4)
    returns = (1.0, 2.0, 3.0, 4.0, 5.0)
    saver.save(RunCounters(frames=240, episodes=7, recent_returns=returns))

    other = make_learner(replicator)
    path, counters = RunCheckpoint(learner=other, directory=tmp_path, window=4).restore()
    assert pathlib.Path(path).name == "ckpt-1"
    assert counters == RunCounters(frames=240, episodes=7, recent_returns=(2.0, 3.0, 4.0, 5.0))
    assert other.num_steps == 1
    for a, b in zip(weights(learner), weights(other)):
        np.testing.assert_array_equal(a, b)
    # The optimizer's step counter (the learning-rate schedule's position) came along.
    assert int(other.optimizer.optimizer.iterations.numpy()) == 1


def corrupt(prefix: str) -> None:
    """Overwrites the middle of a checkpoint's data file, as a disk fault would."""
    data = next(pathlib.Path(prefix).parent.glob(pathlib.Path(prefix).name + ".data-*"))
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 4 : len(raw) // 2] = b"\xff" * (len(raw) // 2 - len(raw) // 4)
    data.write_bytes(bytes(raw))


@pytest.mark.parametrize("damage", ["corrupt", "truncate", "delete"])
def test_unreadable_newest_checkpoint_falls_back_to_the_previous(replicator, tmp_path, damage):
    learner = make_learner(replicator)
    saver = RunCheckpoint(learner=learner, directory=tmp_path)
    learner.step(batch(0))
    saver.save(RunCounters(frames=24, episodes=1, recent_returns=(9.0,)))
    good = weights(learner)
    learner.step(batch(1))
    newest = saver.save(RunCounters(frames=48, episodes=2, recent_returns=(9.0, 8.0)))
    data = next(pathlib.Path(tmp_path).glob(pathlib.Path(newest).name + ".data-*"))
    if damage == "corrupt":
        corrupt(newest)
    elif damage == "truncate":
        data.write_bytes(data.read_bytes()[:10])
    else:
        data.unlink()

    restored = make_learner(replicator)
    path, counters = RunCheckpoint(learner=restored, directory=tmp_path).restore()
    assert pathlib.Path(path).name == "ckpt-1"
    assert counters.frames == 24 and restored.num_steps == 1
    for a, b in zip(good, weights(restored)):
        np.testing.assert_array_equal(a, b)


def test_no_readable_checkpoint_raises(replicator, tmp_path):
    learner = make_learner(replicator)
    saver = RunCheckpoint(learner=learner, directory=tmp_path)
    with pytest.raises(FileNotFoundError, match="no checkpoint in"):
        saver.restore()
    newest = saver.save(RunCounters(frames=0, episodes=0, recent_returns=()))
    corrupt(newest)
    with pytest.raises(FileNotFoundError, match="no readable checkpoint"):
        saver.restore()


def test_non_finite_loss_raises_and_leaves_the_weights_alone(replicator):
    learner = make_learner(replicator)
    learner.step(batch(0))
    before = weights(learner)
    bad = batch(1)
    bad.rewards[2, 3] = np.nan
    with pytest.raises(NonFiniteError, match=r"non-finite .*loss.* at learner step 1") as info:
        learner.step(bad)
    assert "loss" in info.value.metrics and "grad_norm" in info.value.metrics
    assert learner.num_steps == 1
    for a, b in zip(before, weights(learner)):
        np.testing.assert_array_equal(a, b)
    assert all(np.all(np.isfinite(w)) for w in weights(learner))


def example_agent_module():
    import importlib.util

    path = pathlib.Path(__file__).resolve().parent.parent / "examples" / "custom_agent.py"
    spec = importlib.util.spec_from_file_location("custom_agent_example", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_non_trainable_agent_state_is_checkpointed_and_restored(replicator, tmp_path):
    # The example agent's batch-norm moving statistics: updated by learner steps, not by
    # gradients; a resumed run must continue from them, not from their initial values.
    module = example_agent_module()

    def learner():
        return Learner(
            agent=module.make_agent(observation_shape=(OBS,), num_actions=A),
            replicator=replicator,
            observation_shape=(OBS,),
            total_steps=50,
            optimizer=OptimizerConfig(learning_rate=1e-2),
        )

    trained = learner()
    fresh_statistics = [v.numpy().copy() for v in trained.agent.non_trainable_variables]
    for seed in range(3):
        trained.step(batch(seed))
    statistics = [v.numpy().copy() for v in trained.agent.non_trainable_variables]
    assert max(np.abs(s - f).max() for s, f in zip(statistics, fresh_statistics)) > 1e-3
    RunCheckpoint(learner=trained, directory=tmp_path, window=4).save(
        RunCounters(frames=0, episodes=0, recent_returns=())
    )

    resumed = learner()
    RunCheckpoint(learner=resumed, directory=tmp_path, window=4).restore()
    for restored, saved in zip(resumed.agent.non_trainable_variables, statistics):
        np.testing.assert_array_equal(restored.numpy(), saved)
    for a, b in zip(weights(trained), weights(resumed)):
        np.testing.assert_array_equal(a, b)


def test_agents_without_non_trainable_state_keep_the_checkpoint_layout(replicator, tmp_path):
    import tensorflow as tf

    learner = make_learner(replicator)
    path = learner.save(tmp_path)
    names = [name for name, _ in tf.train.list_variables(path)]
    assert any(name.startswith("agent/") for name in names)
    assert not any(name.startswith("agent_state") for name in names)


@pytest.mark.launches
def test_checkpoint_step_reads_the_index_without_tensorflow(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    index = tmp_path / "checkpoints" / "checkpoint"
    index.write_text(
        f'model_checkpoint_path: "{tmp_path}/checkpoints/ckpt-1234"\n'
        f'all_model_checkpoint_paths: "{tmp_path}/checkpoints/ckpt-1000"\n'
        f'all_model_checkpoint_paths: "{tmp_path}/checkpoints/ckpt-1234"\n'
    )
    # In a process of its own: the driver that reads it has not imported TensorFlow.
    probe = (
        "import sys; from impala_rep.run.resume import checkpoint_step; "
        "from impala_rep.learner.checkpoint_index import newest_checkpoint; "
        f"print(checkpoint_step({str(tmp_path)!r}), "
        f"newest_checkpoint({str(tmp_path / 'checkpoints')!r})[0]); "
        "assert 'tensorflow' not in sys.modules, 'imported'"
    )
    assert run_fresh_python(probe).split() == ["1234", f"{tmp_path}/checkpoints/ckpt-1234"]
    from impala_rep.learner.checkpoint_index import newest_checkpoint
    from impala_rep.run.resume import checkpoint_step

    index.write_text('model_checkpoint_path: "ckpt-7"\n')  # relative: to the directory
    assert checkpoint_step(str(tmp_path)) == 7
    assert newest_checkpoint(tmp_path / "checkpoints") == (
        str(tmp_path / "checkpoints" / "ckpt-7"),
        7,
    )
    index.write_text('model_checkpoint_path: "/r\\303\\251sum\\"\\303\\251/ckpt-9"\n')  # C escapes
    assert newest_checkpoint(tmp_path / "checkpoints") == ('/résum"é/ckpt-9', 9)
    index.unlink()
    assert (
        checkpoint_step(str(tmp_path)) == 0 and newest_checkpoint(tmp_path / "checkpoints") is None
    )


def test_an_index_that_names_no_run_checkpoint_is_none(tmp_path):
    from impala_rep.learner.checkpoint_index import newest_checkpoint

    index = tmp_path / "checkpoint"
    index.write_text('model_checkpoint_path: "/tmp/run-1/checkpoints/model"\n')  # no -<step>
    assert newest_checkpoint(tmp_path) is None
    index.write_bytes(b'model_checkpoint_path: "\xff"\n')  # not UTF-8: not TensorFlow's
    assert newest_checkpoint(tmp_path) is None
    index.write_text('model_checkpoint_path: "/tmp/run-1/checkpoints/ckpt-12"\n')
    assert newest_checkpoint(tmp_path) == ("/tmp/run-1/checkpoints/ckpt-12", 12)
