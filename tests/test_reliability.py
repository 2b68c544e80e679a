"""Failures for real, through Ray: a SIGKILLed learner (reported as such, not as the actors'
failures that follow) and --resume onto 2 replicas, an env that crashes on every start. (A
SIGKILLed actor: test_training.py; signals to the command: test_shutdown.py.)"""

import contextlib
import json
import os
import pathlib
import re
import signal
import threading

import pytest

ray = pytest.importorskip("ray")

from impala_rep.config import TrainConfig  # noqa: E402
from impala_rep.run.resume import load_run_config, resumed_config  # noqa: E402
from impala_rep.run.training import TrainingFailed, train  # noqa: E402

SMALL = dict(
    env="CartPole-v1", envs_per_actor=16, unroll_length=20, batch_size=16, report_every=0.5
)


def parent_pid(pid: int) -> int:
    stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])  # the field after the (command name)


def is_descendant(pid: int, ancestor: int) -> bool:
    try:
        while pid > 1:
            pid = parent_pid(pid)
            if pid == ancestor:
                return True
    except OSError:
        pass
    return False


def ray_worker_pids(class_name: str) -> set[int]:
    """PIDs of this test session's Ray workers hosting `class_name` actors (Ray titles them
    ray::<class>). Only descendants of this process: other Ray sessions on the machine
    are not ours to kill."""
    pids = set()
    for entry in pathlib.Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if cmdline.startswith(f"ray::{class_name}".encode()) and is_descendant(
                int(entry.name), os.getpid()
            ):
                pids.add(int(entry.name))
    return pids


@contextlib.contextmanager
def killing_when(condition, class_name: str):
    """While the block runs, in the background: once `condition()` holds, SIGKILL one new
    `class_name` process. Yields an Event set when the kill was delivered. No deadline (a slow
    box reaches the condition late, not never): polling stops when the block ends, so a
    condition still true after a normal finish cannot kill the next test's process."""
    before = ray_worker_pids(class_name)
    stop, killed, failed = threading.Event(), threading.Event(), []

    def run():
        try:
            while not stop.wait(0.1):
                pids = ray_worker_pids(class_name) - before
                if pids and condition() and not stop.is_set():
                    os.kill(min(pids), signal.SIGKILL)
                    killed.set()
                    return
        except Exception as err:  # noqa: BLE001 - raised in the test's thread, below
            failed.append(err)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield killed
    finally:
        stop.set()
        thread.join()
    if failed:
        raise failed[0]


def records(logdir):
    return [json.loads(line) for line in (logdir / "metrics.jsonl").read_text().splitlines()]


# A killed actor, replaced and counted: test_training.py's learning run (its fault, beside the
# learning it must not spoil).


def test_killed_learner_stops_the_run_and_resume_continues_on_two_replicas(local_ray, tmp_path):
    logdir = tmp_path / "run"
    config = TrainConfig.from_keys(
        dict(
            SMALL,
            # Once the learner is gone every actor's loop fails: with more actors than
            # max_actor_failures that is a "crash loop", but the cause is the learner.
            num_actors=2,
            max_actor_failures=1,
            total_frames=300_000,
            seed=3,
            logdir=str(logdir),
            checkpoint_every=0.5,
            learner_devices="cpu",
            learner_process="ray",  # a process of its own, to kill
        )
    )
    checkpointed_once = (logdir / "checkpoints" / "checkpoint").exists
    with killing_when(checkpointed_once, "LearnerHost") as killed:
        with pytest.raises(TrainingFailed) as failed:
            train(config)
    assert killed.is_set()
    message = str(failed.value)
    assert message.startswith("the learner process died"), message
    assert "actors keep failing" not in message
    assert f"impala-rep train --resume {logdir}" in message
    step = int(re.search(r"learner step ([\d,]+)", message).group(1).replace(",", ""))
    assert step >= 1
    first_run = len(records(logdir))

    # Resume onto 2 learner replicas, with an end 10 batches past the checkpoint (every pass
    # counts as a step: no target KL) so the test stays short.
    checkpointed = step // config.learner.passes * config.steps_per_update
    resumed = resumed_config(
        load_run_config(str(logdir)),
        {"learner_devices": "cpu:2", "total_frames": checkpointed + 10 * config.steps_per_update},
    )
    result = train(resumed, resume=True)

    # Records of frames trained after the checkpoint (then lost with the learner) are
    # dropped on resume, so that frames and episodes never go backwards in metrics.jsonl.
    events = [json.loads(line) for line in (logdir / "events.jsonl").read_text().splitlines()]
    # The resumed command's events: `resumed`, then its own `startup` once it trained a frame.
    resumed_event = [e for e in events if e["event"] == "resumed"][-1]
    assert events[-1]["event"] == "startup"
    assert resumed_event["event"] == "resumed" and resumed_event["checkpoint"].endswith(
        f"ckpt-{step}"
    )
    everything = records(logdir)
    after = everything[first_run - resumed_event["dropped_records"] :]
    assert after, "metrics.jsonl was appended to"
    assert after[0]["learner_steps"] >= step  # counters continue from the checkpoint
    assert after[0]["frames"] >= checkpointed
    for earlier, later in zip(everything, everything[1:]):
        assert later["frames"] >= earlier["frames"] and later["episodes"] >= earlier["episodes"]
    assert result.learner_steps > step
    for record in records(logdir):
        assert record["frames_produced"] == record["frames"] + record["frames_queued"]
    assert json.loads((logdir / "config.json").read_text())["learner"]["devices"] == "cpu:2"
    newest = pathlib.Path(logdir / "checkpoints" / "checkpoint").read_text()
    assert f"ckpt-{result.learner_steps}" in newest


def test_an_env_that_keeps_crashing_stops_the_run(local_ray, tmp_path):
    # A batch larger than the unrolls the actors send before the run stops: no step is taken.
    config = TrainConfig.from_keys(
        dict(
            SMALL,
            env="crashing_env:CrashingCartPole-v1",
            num_actors=2,
            batch_size=256,
            total_frames=1_000_000,
            # The second failure ends the run, the other first actor's as a rule: no wait for
            # a replacement to start and crash too (replacements' failures counting:
            # test_supervisor.py; through a run, test_local_launcher.py).
            max_actor_failures=1,
            logdir=str(tmp_path / "run"),
        )
    )
    # An existing empty directory (a new one, removed: test_bad_input.py, through the command).
    (tmp_path / "run").mkdir()
    with pytest.raises(
        TrainingFailed,
        match=r"actors keep failing: 2 actor failures within 600 s "
        r"\(limit 1\).*RuntimeError: simulated env crash",
    ):
        train(config)
    # It failed before its first step: nothing to resume, so nothing of it is left; the
    # directory the run was given empty is emptied again, not removed.
    assert (tmp_path / "run").is_dir() and not any((tmp_path / "run").iterdir())
