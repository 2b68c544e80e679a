"""Ctrl-C and SIGTERM to `impala-rep train` for real: exit codes, a checkpoint, flushed logs,
and no Ray process left behind; a second Ctrl-C exits at once. The two-host run's resume also
has an actor hang, replaced (the local launcher's case: test_hung_actors.py). A dead learner
reported as such, not as the actors' crash loop that follows: test_reliability.py."""

import json
import os
import pathlib
import re
import resource
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("ray")

from test_reliability import is_descendant  # noqa: E402

from impala_rep.run.ray_setup import is_loopback  # noqa: E402
from impala_rep.run.run_log import read_metrics  # noqa: E402

TESTS_DIR = pathlib.Path(__file__).parent


def descendants(pid: int) -> set[int]:
    return {
        int(p.name)
        for p in pathlib.Path("/proc").iterdir()
        if p.name.isdigit() and is_descendant(int(p.name), pid)
    }


def alive(pids: set[int]) -> set[int]:
    """The pids still running (zombies count as gone: they have exited)."""
    running = set()
    for pid in pids:
        try:
            state = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            running.add(pid)
    return running


def left_behind(pids: set[int], *, within: float = 10.0) -> set[int]:
    """The pids still running after up to `within` seconds. Ray's workers exit on their own
    once the driver has gone, within about a second on an idle machine and later on loaded
    cores, which `within` leaves room for. An orphan never exits."""
    deadline = time.monotonic() + within
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return alive(pids)


def listening_addresses(pids: set[int]) -> set[str]:
    """ "ADDRESS:PORT" on which any of `pids` listens, as `ss -ltnp` shows them."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    return {
        line.split()[3] for line in out.splitlines() if any(f"pid={pid}," in line for pid in pids)
    }


def listening_ports(pids: set[int]) -> set[int]:
    """TCP ports on which any of `pids` listens (from /proc: socket inodes of each process
    matched against /proc/net/tcp{,6} entries in state LISTEN)."""
    inodes = set()
    for pid in pids:
        try:
            for fd in pathlib.Path(f"/proc/{pid}/fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in pathlib.Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def start_training(
    logdir: pathlib.Path, *flags: str, env_id: str = "CartPole-v1", environ=None
) -> subprocess.Popen:
    command = [
        sys.executable,
        "-m",
        "impala_rep",
        "train",
        "--env",
        env_id,
        "--num-actors",
        "1",
        "--envs-per-actor",
        "16",
        "--batch-size",
        "16",
        # Reports every 0.5 s: the tests wait for one that shows training.
        "--total-frames",
        "100000000",
        "--report-every",
        "0.5",
        "--logdir",
        str(logdir),
        *flags,
    ]
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environ
    )


def wait_until(process: subprocess.Popen, ready, what: str, timeout: float) -> None:
    """Polls `ready()` while `process` runs; kills it if `ready` does not hold in time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stdout.read()
        if ready():
            return
        time.sleep(0.05)
    process.kill()
    raise AssertionError(f"{what} did not happen in time")


def wait_for_training(process: subprocess.Popen, logdir: pathlib.Path, timeout=180.0) -> None:
    """Until a report shows learner steps (Ray, the learner and the actor are all up)."""
    metrics = logdir / "metrics.jsonl"

    def trained() -> bool:
        lines = metrics.read_text().splitlines() if metrics.exists() else []
        return bool(lines) and json.loads(lines[-1])["learner_steps"] > 0

    wait_until(process, trained, "training", timeout)


# A signal's graceful stop, with a checkpoint of the final state, is the two-host test's below:
# under Ray (SIGTERM: 143, no orphans) and, with the learner in the driver as here, under the
# local launcher (SIGINT: 130). Both launchers end in the same `stop_learner` (stop, then save).
@pytest.mark.launches
def test_a_second_ctrl_c_exits_at_once_without_orphans(tmp_path):
    logdir = tmp_path / "run"
    process = start_training(logdir)
    wait_for_training(process, logdir)
    spawned = descendants(process.pid)
    assert len(spawned) >= 3  # Ray's own processes and the actor; the learner is the driver's
    # The embedded Ray runs without its dashboard: nothing of the run serves port 8265.
    assert not listening_ports(spawned | {process.pid}) & {8265}
    # And every server of the run (raylet, GCS, workers, the driver) listens on loopback only.
    addresses = listening_addresses(spawned | {process.pid})
    assert len(addresses) >= 4, addresses
    assert all(is_loopback(address.rsplit(":", 1)[0]) for address in addresses), addresses
    process.send_signal(signal.SIGINT)
    # Signals do not queue: a second one sent before Python ran the first handler
    # would merge with it. Wait for the first to be acknowledged.
    seen = []
    for line in process.stdout:
        seen.append(line)
        if "stopping after the current step" in line:
            break
    process.send_signal(signal.SIGINT)
    started = time.monotonic()
    out, _ = process.communicate(timeout=60)
    out = "".join(seen) + out
    assert process.returncode == 130, out
    assert "second SIGINT: exiting now" in out
    assert time.monotonic() - started < 30
    assert not left_behind(spawned), f"orphaned processes: {left_behind(spawned, within=0)}"


def wait_for_ray_to_start(process: subprocess.Popen, timeout=120.0) -> None:
    """Until the embedded Ray's raylet runs under the command (start-up under way, no
    learner step yet)."""

    def raylet() -> bool:
        for pid in descendants(process.pid):
            try:
                if "raylet" in pathlib.Path(f"/proc/{pid}/cmdline").read_text():
                    return True
            except OSError:
                continue
        return False

    wait_until(process, raylet, "Ray's start", timeout)


# SIGTERM only: SIGINT takes the same path (StopSignals), tested with --launcher local (the
# two-host test's last run, below) and, under Ray, by the second Ctrl-C test above.
@pytest.mark.launches
@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143)])
def test_a_signal_during_start_up_exits_cleanly_and_keeps_nothing(tmp_path, signum, code):
    logdir = tmp_path / "run"
    process = start_training(logdir)
    wait_for_ray_to_start(process)
    spawned = descendants(process.pid)
    process.send_signal(signum)
    out, _ = process.communicate(timeout=120)

    assert process.returncode == code, out
    assert "Traceback" not in out, out
    # Nothing to resume from: a new run stopped before its first checkpoint keeps nothing,
    # so the same command can run again.
    assert not logdir.exists(), sorted(p.name for p in logdir.iterdir())
    assert (
        f"stopped before the first checkpoint: nothing of this run was kept ({logdir} removed)"
        in out
    )
    assert not left_behind(spawned), f"orphaned processes: {left_behind(spawned, within=0)}"


@pytest.mark.launches
def test_a_signal_while_checking_inputs_exits_before_anything_is_written(tmp_path):
    logdir = tmp_path / "run"
    process = start_training(logdir)
    time.sleep(1.0)  # importing TensorFlow and checking the inputs: nothing started yet
    assert process.poll() is None
    process.send_signal(signal.SIGTERM)
    out, _ = process.communicate(timeout=60)
    assert process.returncode == 143, out
    assert "Traceback" not in out, out
    assert not logdir.exists()


@pytest.mark.launches
def test_a_failed_log_write_stops_the_run_with_a_checkpoint(tmp_path):
    logdir = tmp_path / "run"
    process = start_training(logdir, "--learner-process", "ray")
    wait_for_training(process, logdir)
    spawned = descendants(process.pid)
    # A real write fault in the driver alone (its processes are all started): a file
    # size limit just above metrics.jsonl, so its next record fails with EFBIG, as a
    # full disk fails with ENOSPC. The learner, a process of its own here, writes the
    # checkpoints and is unlimited.
    size = (logdir / "metrics.jsonl").stat().st_size
    resource.prlimit(process.pid, resource.RLIMIT_FSIZE, (size + 1, size + 1))
    out, _ = process.communicate(timeout=180)

    assert process.returncode == 1, out
    assert (
        f"impala-rep: error: cannot write the run's logs in {logdir}: "
        "OSError: [Errno 27] File too large" in out
    )
    # The step is printed with thousands separators ("learner step 1,808").
    match = re.search(
        r"the last good checkpoint is (\S+) \(learner step (\d{1,3}(?:,\d{3})*)\); "
        r"continue with: impala-rep train --resume (\S+)",
        out,
    )
    assert match and match[3] == str(logdir), out
    step = match[2].replace(",", "")
    assert match[1] == str(logdir / "checkpoints" / f"ckpt-{step}"), out
    index = (logdir / "checkpoints" / "checkpoint").read_text()
    assert (
        f'model_checkpoint_path: "ckpt-{step}"' in index
    )  # the stop's own checkpoint is the newest
    assert not left_behind(spawned), f"orphaned processes: {left_behind(spawned, within=0)}"


@pytest.mark.launches
def test_a_stopped_two_host_run_resumes_on_two_hosts_then_one_and_continues_its_counters(tmp_path):
    """A long job's life: on two learner hosts, stopped by SIGTERM as a preemption stops it;
    resumed on two hosts, where an actor hangs and is replaced; resumed on one host, where
    Ctrl-C stops it. Each stop keeps a checkpoint of its final state, and the counters go on.
    (One test through every stage: each two-host run costs a Ray start and four processes'
    TensorFlow import.)"""
    logdir = tmp_path / "run"
    # Checkpoints every 0.5 s too: the hosts agree on a periodic save mid-run (the resumed runs
    # keep the setting). A batch is 16 unrolls (start_training's --batch-size) of 20 steps,
    # 320 frames (160 from each host), each trained on 2 times: the totals below count in those.
    unroll, passes = 20, 2
    batch_frames = 16 * unroll
    # CartPole whose envs hang once the marker is free (tests/hanging_env.py): claimed already
    # (no env hangs) until the resume on two hosts frees it, where an actor hangs.
    marker = tmp_path / "hung"
    marker.touch()
    path = os.pathsep.join(p for p in (str(TESTS_DIR), os.environ.get("PYTHONPATH")) if p)
    environ = dict(os.environ, HANGING_ENV_MARKER=str(marker), PYTHONPATH=path)
    process = start_training(
        logdir,
        "--learner-hosts",
        "2",
        "--num-actors",
        "2",
        "--unroll-length",
        str(unroll),
        "--passes",
        str(passes),
        "--checkpoint-every",
        "0.5",
        "--actor-timeout",
        "12",
        env_id="hanging_env:HangingCartPole-v1",
        environ=environ,
    )
    wait_for_training(process, logdir)
    # What listens beyond loopback, measured: only TensorFlow's gRPC server of each learner
    # host (it binds 0.0.0.0, hard-coded in TF's GrpcServer; docs/guide/long-jobs.md says so).
    spawned = descendants(process.pid)
    hosts = {
        pid
        for pid in spawned
        if pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"ray::LearnerHost")
    }
    assert len(hosts) == 2
    beyond_loopback = {
        address
        for address in listening_addresses(spawned | {process.pid})
        if not is_loopback(address.rsplit(":", 1)[0])
    }
    assert beyond_loopback <= listening_addresses(hosts)
    assert len(beyond_loopback) == 2 and all(
        a.rsplit(":", 1)[0] in ("0.0.0.0", "*") for a in beyond_loopback
    ), beyond_loopback
    process.send_signal(signal.SIGTERM)  # as a preemption does
    out, _ = process.communicate(timeout=180)
    assert process.returncode == 143, out
    assert "stopping after the current step, saving a checkpoint" in out
    assert "continue with: impala-rep train --resume" in out
    stopped = read_metrics(logdir)[-1]
    step, frames = stopped["learner_steps"], stopped["frames"]
    # The checkpoint is of the final state, and the accounting holds at the stop.
    assert f'"ckpt-{step}"' in (logdir / "checkpoints" / "checkpoint").read_text()
    assert stopped["frames_produced"] == stopped["frames"] + stopped["frames_queued"]
    assert not left_behind(spawned), f"orphaned processes: {left_behind(spawned, within=0)}"

    # Only the flags given change the saved config: still 2 hosts, a new frame total. There an
    # actor hangs (alive, sending nothing: the first env past hanging_env's FAULT_AFTER steps
    # claims the freed marker and sleeps). Actor s feeds host s % 2, so the hung actor's host has
    # no batch and both hosts wait: reaching the total proves the replacement. A replacement's
    # start-up (a process, its envs: tens of seconds on a loaded machine) does not count against
    # the limit on silence (a second restart would fail the test).
    marker.unlink()
    resumed = subprocess.run(
        [
            sys.executable,
            "-m",
            "impala_rep",
            "train",
            "--resume",
            str(logdir),
            "--total-frames",
            str(frames + 3200),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=environ,
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert (
        f"resumed from {logdir / 'checkpoints' / f'ckpt-{step}'} (learner step {step:,}, "
        f"{frames:,} frames)" in resumed.stdout
    )
    records = read_metrics(logdir)
    after = records[records.index(stopped) + 1 :]  # the stop's record is the checkpoint's: kept
    assert after[0]["learner_steps"] >= step and after[0]["frames"] >= frames
    assert after[0]["episodes"] >= stopped["episodes"]  # the hosts' shares add up to the total
    # The run ends exactly at its total: the stop kept whole batches, and 3200 is 10 of them.
    assert records[-1]["frames"] == frames + 3200
    assert records[-1]["learner_steps"] == (frames + 3200) // batch_frames * passes
    assert json.loads((logdir / "config.json").read_text())["learner"]["hosts"] == 2
    assert marker.exists()  # an env really hung
    events = [json.loads(line) for line in (logdir / "events.jsonl").read_text().splitlines()]
    resumed_at = max(i for i, e in enumerate(events) if e["event"] == "resumed")
    failures = [e for e in events[resumed_at:] if e["event"] == "actor_restart"]
    assert len(failures) == 1, failures
    assert "sent no unroll for" in failures[0]["cause"] and "hung, replaced" in failures[0]["cause"]
    assert records[-1]["actor_restarts"] == 1
    assert "hung, replaced" in resumed.stdout + resumed.stderr  # the console says it too

    # And onto one host: the chief's checkpoint holds the whole run's counters, and does not
    # depend on the number of hosts. In one process (--launcher local): the learner is the same,
    # and the suite saves a Ray start and two processes' TensorFlow import. There Ctrl-C stops
    # it: with the learner in the driver, the same stop as SIGTERM's (StopSignals, 128 + the
    # signal's number), a checkpoint of the final state, and the console says how to go on.
    ended = records[-1]["learner_steps"]
    single = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "impala_rep",
            "train",
            "--resume",
            str(logdir),
            "--learner-hosts",
            "1",
            "--launcher",
            "local",
            "--total-frames",
            "100000000",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=environ,
    )

    def trained_on_one_host() -> bool:
        lines = (logdir / "metrics.jsonl").read_text().splitlines()[len(records) :]
        try:
            return any(json.loads(line)["learner_steps"] > ended for line in lines[:-1])
        except ValueError:
            return False

    wait_until(single, trained_on_one_host, "training on one host", timeout=180)
    single.send_signal(signal.SIGINT)
    out, _ = single.communicate(timeout=120)
    assert single.returncode == 130, out
    assert (
        f"resumed from {logdir / 'checkpoints' / f'ckpt-{ended}'} (learner step {ended:,}, "
        f"{frames + 3200:,} frames)" in out
    )
    assert "stopping after the current step, saving a checkpoint" in out
    assert "continue with: impala-rep train --resume" in out
    more = read_metrics(logdir)
    third = more[len(records) :]
    assert third[0]["learner_steps"] >= ended and third[0]["frames"] >= frames + 3200
    assert third[0]["episodes"] >= records[-1]["episodes"]
    last = more[-1]
    assert last["learner_steps"] > ended
    assert f'"ckpt-{last["learner_steps"]}"' in (logdir / "checkpoints" / "checkpoint").read_text()
    assert last["frames_produced"] == last["frames"] + last["frames_queued"]
    assert json.loads((logdir / "config.json").read_text())["learner"]["hosts"] == 1
