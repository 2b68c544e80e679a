"""`--launcher local`: learner and actors in one process, no Ray, the same outputs as under Ray.

One local run of SMALL, in a subprocess of its own (it shows that a local run imports no Ray),
serves every test that needs a finished run: each takes a copy of its folder. The resumes of
that run go through the command in the test's process (tests/in_process_cli.py).
"""

import inspect
import json
import pathlib
import re
import shutil
import subprocess
import sys
import textwrap
import time

import pytest
from in_process_cli import command_in_process

from impala_rep.run.run_log import read_metrics

# A target KL that stops every batch's passes early, the last ones' too (the actors' lag
# alone gives a kl of ~1e-4 as the rate decays to 0; a target near that made the check of
# early stops after a resume depend on how many reports fell mid-run): the learning-rate
# schedule must still follow the frames (below), and local and Ray runs must still agree.
SMALL = dict(
    env="CartPole-v1",
    num_actors=2,
    envs_per_actor=16,
    unroll_length=20,
    batch_size=16,
    total_frames=40_000,
    seed=4,
    report_every=0.5,
    checkpoint_every=1.0,
    target_kl=1e-5,
)


def train_in_subprocess(keys: dict, *, resume: bool = False) -> subprocess.CompletedProcess:
    """`train()` with the local launcher in a fresh process; prints whether Ray was imported."""
    code = textwrap.dedent(f"""
        import sys
        from impala_rep.config import TrainConfig
        from impala_rep.run.training import train
        result = train(TrainConfig.from_keys({keys!r}), resume={resume!r})
        print("RESULT", result.learner_steps, result.frames)
        print("RAY IMPORTED", any(m.split(".")[0] == "ray" for m in sys.modules))
    """)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)


def result_of(proc: subprocess.CompletedProcess) -> tuple[int, int]:
    """(learner steps, frames) that `train_in_subprocess` printed."""
    steps, frames = proc.stdout.split("RESULT ")[1].split()[:2]
    return int(steps), int(frames)


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    """A finished local run of SMALL: (its folder, the subprocess's result). Read it, or copy
    it with `copy_of` before writing to it."""
    logdir = tmp_path_factory.mktemp("local") / "run"
    return logdir, train_in_subprocess({**SMALL, "launcher": "local", "logdir": str(logdir)})


def copy_of(run, tmp_path):
    """A copy of the shared run's folder, to resume or break (checkpoint paths are relative)."""
    logdir, proc = run
    assert proc.returncode == 0, proc.stderr[-3000:]
    return pathlib.Path(shutil.copytree(logdir, tmp_path / "run"))


@pytest.mark.launches
def test_a_local_run_starts_no_ray_and_checkpoints_its_final_state(local_run):
    # Its resume (the counters continue, the new end is reached) is tested through the
    # command, with another batch size, in
    # test_a_resume_with_another_batch_size_keeps_the_learning_rate_where_the_frames_are.
    logdir, proc = local_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "RAY IMPORTED False" in proc.stdout  # no Ray started, not even imported
    steps, frames = result_of(proc)
    assert frames >= SMALL["total_frames"]
    assert steps >= SMALL["total_frames"] // (SMALL["unroll_length"] * SMALL["batch_size"])
    index = (logdir / "checkpoints" / "checkpoint").read_text()
    assert f'"ckpt-{steps}"' in index  # the final checkpoint is of the final state
    last = read_metrics(logdir)[-1]
    assert last["frames_produced"] == last["frames"] + last["frames_queued"]


def test_local_and_ray_runs_write_the_same_records(local_ray, local_run, tmp_path):
    from impala_rep.config import TrainConfig
    from impala_rep.run.training import train

    ray_dir, (local_dir, proc) = tmp_path / "ray", local_run
    train(TrainConfig.from_keys({**SMALL, "logdir": str(ray_dir)}))
    assert proc.returncode == 0, proc.stderr[-3000:]
    ray_records, local_records = read_metrics(ray_dir), read_metrics(local_dir)
    assert set(ray_records[-1]) == set(local_records[-1])
    assert ray_records[-1]["frames"] >= SMALL["total_frames"] <= local_records[-1]["frames"]
    ray_config = json.loads((ray_dir / "config.json").read_text())
    local_config = json.loads((local_dir / "config.json").read_text())
    assert (
        local_config["run"].pop("launcher") == "local"
        and ray_config["run"].pop("launcher") == "ray"
    )
    ray_config["run"].pop("logdir"), local_config["run"].pop("logdir")
    assert ray_config == local_config
    assert sorted(p.name for p in ray_dir.iterdir()) == sorted(p.name for p in local_dir.iterdir())


# A signal stopping a local run (SIGINT: 130, a checkpoint of the final state): the last run
# of test_shutdown.py's two-host test, resumed on one host with --launcher local.


@pytest.mark.launches
def test_a_resume_with_another_batch_size_keeps_the_learning_rate_where_the_frames_are(
    local_run, tmp_path
):
    # 40k frames at B=16 (T*B = 320 per step), then resumed to 80k at B=32 (640 per step).
    # The rate decays linearly over frames: at 40k frames of 80k it is half the initial one
    # (counting steps instead, 125 done of 125 + 63 would give 1/3 left, ~0.33 lr0).
    logdir = copy_of(local_run, tmp_path)
    steps, frames = result_of(local_run[1])
    done = len(read_metrics(logdir))
    # Through the command, as a user resumes: only the flags given change the saved config.
    # (In this process: the local launcher's run, tests/in_process_cli.py.)
    more = command_in_process(
        "train", "--resume", str(logdir), "--total-frames", "80000", "--batch-size", "32"
    )
    assert more.returncode == 0, more.stderr[-3000:]
    assert f"resumed from {logdir / 'checkpoints'}" in more.stdout
    # The summary's time and speed are this command's: the frames it trained over its time.
    restored = int(
        re.search(r"learner step [\d,]+, ([\d,]+) frames\)", more.stdout)[1].replace(",", "")
    )
    table = dict(re.split(r"\s{2,}", line.strip()) for line in more.stdout.splitlines()[-11:-1])
    wall = float(table["wall time (this command)"].removesuffix(" s"))
    total = int(table["env frames (learner-consumed)"].replace(",", ""))
    fps = float(table["frames / s (this command)"].replace(",", ""))
    assert fps == pytest.approx((total - restored) / wall, rel=0.05)
    assert json.loads((logdir / "config.json").read_text())["learner"]["batch_size"] == 32
    lr0, total, per_step = 5e-3, 80_000, 20 * 32
    records = read_metrics(logdir)
    # The counters continue from the checkpoint (of the final state), to the new end.
    after = records[done:]
    assert after[0]["learner_steps"] >= steps and after[0]["frames"] >= frames
    assert after[-1]["frames"] >= total
    # The target KL cut batches short, before and after the resume.
    for part in (records[:done], records[done:]):
        assert any(r.get("passes", 8) < 8 for r in part)
    for record in records[done:]:
        if record["learning_rate"] is None:
            continue
        # The record's rate is the one its last finished step started with; its frames
        # include that step and may include one more batch already taken from the queue;
        # the restored position is rounded to a whole step.
        upper = lr0 * (1 - (record["frames"] - 3 * per_step) / total)
        lower = lr0 * (1 - record["frames"] / total)
        assert lower - 1e-7 <= record["learning_rate"] <= upper + 1e-7, record


@pytest.mark.launches
@pytest.mark.parametrize("launcher", ["local", "ray"])
def test_a_resume_that_fails_to_restore_leaves_config_json_as_it_was(
    local_run, tmp_path, launcher, request
):
    """Under Ray the actors are already starting, waiting for the learner's first weights,
    when its restore fails: the run still ends at once with the learner's error. The Ray run
    joins the session's Ray (conftest.py) rather than starting one of its own: on a shared
    cluster it must also leave nothing of itself behind."""
    from impala_rep.run.resume import checkpoint_step

    logdir = copy_of(local_run, tmp_path)
    saved = (logdir / "config.json").read_bytes()
    # The driver reads the newest checkpoint's step from TensorFlow's own index.
    steps = [
        int(path.name.split("-")[1].split(".")[0])
        for path in (logdir / "checkpoints").glob("ckpt-*.index")
    ]
    assert steps and checkpoint_step(str(logdir)) == max(steps) > 0
    import tensorflow as tf

    from impala_rep.learner.checkpoint_index import newest_checkpoint

    state = tf.train.get_checkpoint_state(str(logdir / "checkpoints"))
    assert newest_checkpoint(logdir / "checkpoints") == (state.model_checkpoint_path, max(steps))
    for data in (logdir / "checkpoints").glob("ckpt-*.data-*"):
        data.write_bytes(b"not a checkpoint")  # every checkpoint unreadable
    flags = []
    if launcher == "ray":
        ray = request.getfixturevalue("local_ray")
        flags = ["--ray-address", ray.get_runtime_context().gcs_address]
    argv = ["train", "--resume", str(logdir), "--launcher", launcher, *flags]
    argv += ["--total-frames", "60000", "--batch-size", "32"]
    if launcher == "local":
        more = command_in_process(*argv)
    else:  # a driver of its own, joining the session's Ray
        more = subprocess.run(
            [sys.executable, "-m", "impala_rep", *argv],
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert more.returncode == 1, more.stdout + more.stderr
    assert "the learner could not start" in more.stderr and "Traceback" not in more.stderr
    assert (logdir / "config.json").read_bytes() == saved
    if launcher == "ray":  # the learner and the actors were killed: the CPUs are free again
        _wait_for_free_cpus(ray)


def _wait_for_free_cpus(ray, timeout_s: float = 30.0) -> None:
    """Until every CPU of the session's Ray is free (Ray frees a killed actor's shortly after)."""
    deadline = time.monotonic() + timeout_s
    while (free := ray.available_resources().get("CPU", 0)) < ray.cluster_resources()["CPU"]:
        assert time.monotonic() < deadline, f"{free} CPUs free: the run left actors behind"
        time.sleep(0.2)


# The evaluate command playing a run's final checkpoint, quietly, to JSON: test_action_spaces.py's
# Pendulum run (evaluation does not depend on the launcher the run had).


def _mismatches(implementation, protocol) -> list[str]:
    """What `implementation` (an instance) lacks of `protocol`: a missing attribute or method,
    or a method that does not take the protocol's parameters (same names, kinds and defaults;
    any further ones optional)."""
    found = [name for name in protocol.__annotations__ if not hasattr(implementation, name)]
    for name, spec in vars(protocol).items():
        if name.startswith("_") or not callable(spec):
            continue
        method = getattr(type(implementation), name, None)
        if not callable(method):
            found.append(f"{name}: missing")
            continue
        want = list(inspect.signature(spec).parameters.values())[1:]  # without self
        have = list(inspect.signature(method).parameters.values())[1:]
        extra = have[len(want) :]
        if [(p.name, p.kind, p.default) for p in have[: len(want)]] != [
            (p.name, p.kind, p.default) for p in want
        ] or any(
            p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in extra
        ):
            found.append(f"{name}{inspect.signature(method)} for {name}{inspect.signature(spec)}")
    return found


def test_both_launchers_and_their_fleets_follow_the_protocols():
    """The driver holds a launcher only through `training.Launcher`, the supervisor a fleet
    only through `supervisor.ActorFleet`: both launchers answer every call they make, with
    the same parameters. Built without a plan, which only `start` reads: no Ray starts."""
    from impala_rep.run.launch_local import LocalLauncher, _ThreadActorFleet
    from impala_rep.run.launch_ray import RayLauncher, _RayActorFleet
    from impala_rep.run.supervisor import ActorFleet
    from impala_rep.run.training import Launcher

    for launcher in (LocalLauncher(None), RayLauncher(None)):
        assert _mismatches(launcher, Launcher) == [], type(launcher).__name__
    for fleet in (_ThreadActorFleet(None, None), _RayActorFleet(None, None)):
        assert _mismatches(fleet, ActorFleet) == [], type(fleet).__name__
