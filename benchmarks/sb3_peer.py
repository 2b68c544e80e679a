"""Side by side with Stable-Baselines3's PPO on rl-baselines3-zoo's hyperparameters: seconds
from launch to SB3's return.

    .venv/bin/python benchmarks/sb3_peer.py [--task cartpole|pendulum|...] [--seeds 1 2 3]
        [--venv runs/benchmarks/sb3-venv] [--label NAME] [--no-record] [-- OUR TRAIN FLAGS ...]

The peer runs in a venv of its own, made on the first run (stable-baselines3, the env extras it
needs and torch, pinned in TORCH to the CPU build in pip's cache; a few minutes), so this
project never depends on SB3 or torch. One at a time, never together, each seed runs:

1. SB3's PPO with the zoo's tuned hyperparameters for the task (`_sb3_ppo.py`), over the zoo's
   budget; on CartPole only until the last 100 episodes average 475 (its registered
   threshold, which the zoo's run reaches before its budget ends);
2. `impala-rep train --env ENV --seed S --report-every 0.25` (default flags and the task's
   budget in learning.py, so the same learning-rate schedule; anything after `--` is added),
   stopped (SIGTERM) once its report reaches the target.

The target is 475 on CartPole; on the other tasks it is SB3's final return (the mean of its
last 100 training episodes at the end of its budget), and SB3's time is the first report at
which it had reached it. Both are timed from their command's launch (Python, imports, Ray's
start included) to the first report at the target over a full window of 100 episodes, each
polled every 0.1 s, both reporting the training policy's (sampled) returns. Prints a row per
run and the ratio of the medians; writes one ledger record per seed
(`benchmarks/results/sb3_peer/TASK/`) holding both systems' figures.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import _common  # noqa: F401  (quiets TensorFlow before it is imported)
import ledger
from _common import MetricsTail, peer_venv, split_train_flags, table
from learning import TASKS, reaches, train_command

ROOT = pathlib.Path(__file__).resolve().parent.parent
PEER = pathlib.Path(__file__).with_name("_sb3_ppo.py")
TORCH = "torch==2.13.0"  # the CPU build in pip's cache; another version downloads CUDA's
SB3 = "stable-baselines3==2.9.2"
# The tasks of learning.py that _sb3_ppo.py has the zoo's hyperparameters for; a fixed target
# where the zoo's run stops at a registered threshold, else None: SB3's final return.
TARGETS = {
    "cartpole": 475.0,
    "pendulum": None,
    "lunarlander-continuous": None,
    "halfcheetah": None,
    "hopper": None,
}
# The gymnasium extras the peer's venv needs for a task, beyond classic control.
EXTRAS = {"lunarlander-continuous": "box2d", "halfcheetah": "mujoco", "hopper": "mujoco"}
_POLL_S = 0.1
_TIMEOUT_S = 3 * 3600  # the zoo's 1M MuJoCo steps, one env, on a slow machine


def run_sb3(python: pathlib.Path, env: str, seed: int, target: float | None) -> dict:
    """SB3's run to `target` (None: over the zoo's whole budget, whose final return becomes
    the target); its figures at the first report that reached the target."""
    launch = time.time()
    command = [str(python), str(PEER), "--env", env, "--launch", str(launch), "--seed", str(seed)]
    if target is not None:
        command += ["--target", str(target)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise SystemExit(f"the SB3 run on {env} took over {_TIMEOUT_S} s: stopped") from None
    if done.returncode != 0:
        raise SystemExit(f"the SB3 run failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    full = [r for r in records if r["window"] == 100]
    if target is None and full:
        target = full[-1]["return"]
    hit = next((r for r in full if target is not None and r["return"] >= target), None)
    return {
        "target": target,
        "seconds_to_target": hit and hit["s"],
        "frames_to_target": hit and hit["frames"],
        "final_return": full[-1]["return"] if full else None,
        "frames": records[-1]["frames"] if records else 0,
        "seconds": round(time.time() - launch, 1),
    }


def run_ours(task_name: str, seed: int, target: float, extra: list[str]) -> dict:
    task = TASKS[task_name]
    logdir = pathlib.Path(tempfile.mkdtemp(prefix="sb3-peer-")) / "run"
    # The task's budget in learning.py (the same learning-rate schedule), reports every 0.25 s
    # so that the target is not rounded up to the next report.
    command = train_command(task, seed, logdir, ["--report-every", "0.25", *extra])
    tail, hit, last = MetricsTail(logdir), None, None
    launch = time.monotonic()
    try:
        with tempfile.TemporaryFile("w+") as stderr:  # a pipe nobody reads could fill up
            process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
            try:
                while hit is None and process.poll() is None:
                    for record in tail.new_records():
                        last = record
                        if reaches(record, target):
                            hit = {
                                "seconds_to_target": round(time.monotonic() - launch, 2),
                                "frames_to_target": record["frames"],
                            }
                            break
                    time.sleep(_POLL_S)
            finally:
                process.send_signal(signal.SIGTERM)  # reached (or ended): a clean stop
                process.wait(timeout=120)
            if hit is None and process.returncode not in (0, -signal.SIGTERM, 143):
                stderr.seek(0)
                raise SystemExit(f"impala-rep train failed:\n{stderr.read()[-2000:]}")
    finally:
        shutil.rmtree(logdir.parent, ignore_errors=True)
    missed = {"seconds_to_target": None, "frames_to_target": None}
    return {
        "command": command,
        **(hit or missed),
        "final_return": last and last["episode_return_mean"],
        "frames": last and last["frames"],
    }


def main() -> None:
    argv, extra = split_train_flags(sys.argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", choices=sorted(TARGETS), default="cartpole")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--venv", default=str(ROOT / "runs" / "benchmarks" / "sb3-venv"))
    parser.add_argument("--label", default="defaults")
    parser.add_argument("--no-record", action="store_true", help="write no ledger record")
    args = parser.parse_args(argv)
    python = peer_venv(pathlib.Path(args.venv), [[TORCH], [SB3, TORCH]])
    if args.task in EXTRAS:
        add_extra(python, EXTRAS[args.task])
    env = TASKS[args.task].env
    rows, ours_s, sb3_s = [], [], []
    for seed in args.seeds:
        print(f"seed {seed}: SB3 PPO on {env} ...", flush=True)
        peer = run_sb3(python, env, seed, TARGETS[args.task])
        if peer["target"] is None:
            raise SystemExit(f"the SB3 run on {env} ended no 100 episodes: no target")
        print(f"seed {seed}: impala-rep, to {peer['target']:.1f} ...", flush=True)
        ours = run_ours(args.task, seed, peer["target"], extra)
        for name, r in (("SB3 PPO (rl-zoo)", peer), ("impala-rep", ours)):
            reached = r["seconds_to_target"] is not None
            rows.append(
                [
                    name,
                    seed,
                    f"{peer['target']:.1f}",
                    f"{r['seconds_to_target']:.1f}" if reached else "not reached",
                    f"{r['frames_to_target']:,}" if reached else "–",
                ]
            )
        ours_s.append(ours["seconds_to_target"])
        sb3_s.append(peer["seconds_to_target"])
        if not args.no_record:
            path = ledger.write_record(
                benchmark="sb3_peer",
                task=args.task,
                label=args.label,
                seed=seed,
                command=ours["command"],
                settings={
                    "env": env,
                    "target": peer["target"],
                    "target_is": "a fixed threshold"
                    if TARGETS[args.task] is not None
                    else "SB3's final return",
                    "our_flags": extra,
                    "peer": SB3,
                },
                figures={"impala_rep": ours_without_command(ours), "sb3_ppo": peer},
            )
            print(f"wrote {path.relative_to(ROOT)}")
    print(table(["system", "seed", "target", "s from launch", "frames"], rows))
    if None not in ours_s and None not in sb3_s:
        ratio = statistics.median(ours_s) / statistics.median(sb3_s)
        print(f"median: impala-rep {ratio:.2f}× SB3 PPO's seconds to the target (goal ≤ 0.5×)")


def add_extra(python: pathlib.Path, extra: str) -> None:
    """gymnasium's `extra` (box2d, mujoco) in the peer's venv, once."""
    module = {"box2d": "Box2D", "mujoco": "mujoco"}[extra]
    if subprocess.run([str(python), "-c", f"import {module}"], capture_output=True).returncode:
        print(f"adding gymnasium[{extra}] to the peer's venv", flush=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", f"gymnasium[{extra}]"], check=True
        )


def ours_without_command(ours: dict) -> dict:
    return {key: value for key, value in ours.items() if key != "command"}


if __name__ == "__main__":
    main()
