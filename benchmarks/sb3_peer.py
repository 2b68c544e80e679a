"""Side by side with Stable-Baselines3's PPO on CartPole-v1: seconds from launch to a 100-episode
mean return of 475.

    .venv/bin/python benchmarks/sb3_peer.py [--seeds 1 2 3] [--venv runs/benchmarks/sb3-venv]
        [--label NAME] [--no-record] [-- OUR TRAIN FLAGS ...]

The peer runs in a venv of its own, made on the first run (stable-baselines3 and torch, pinned
in TORCH to the CPU build in pip's cache; a few minutes), so this project never depends on SB3
or torch. One at a time, never together, each seed runs:

1. SB3's PPO with rl-baselines3-zoo's tuned CartPole-v1 hyperparameters
   (`_sb3_ppo_cartpole.py`), until the last 100 episodes average 475 or the zoo's 100k steps
   are spent;
2. `impala-rep train --env CartPole-v1 --seed S --report-every 0.25` (default flags, the 1M
   frames `learning.py` gives CartPole, so the same learning-rate schedule; anything after
   `--` is added), stopped (SIGTERM) once its report reaches 475.

Both are timed from their command's launch (Python, imports, Ray's start included) to the
first report at 475 over a full window of 100 episodes, each polled every 0.1 s. Prints a
row per run and the ratio of the medians; writes one ledger record per seed
(`benchmarks/results/sb3_peer/cartpole/`) holding both systems' figures.
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
PEER = pathlib.Path(__file__).with_name("_sb3_ppo_cartpole.py")
TORCH = "torch==2.13.0"  # the CPU build in pip's cache; another version downloads CUDA's
SB3 = "stable-baselines3==2.9.2"
TARGET = 475.0
_POLL_S = 0.1


def run_sb3(python: pathlib.Path, seed: int) -> dict:
    launch = time.time()
    done = subprocess.run(
        [str(python), str(PEER), "--launch", str(launch), "--seed", str(seed)],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if done.returncode != 0:
        raise SystemExit(f"the SB3 run failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    hit = next((r for r in records if r["window"] == 100 and r["return"] >= TARGET), None)
    return {
        "seconds_to_475": hit and hit["s"],
        "frames_to_475": hit and hit["frames"],
        "frames": records[-1]["frames"] if records else 0,
        "seconds": round(time.time() - launch, 1),
    }


def run_ours(seed: int, extra: list[str]) -> dict:
    task = TASKS["cartpole"]
    logdir = pathlib.Path(tempfile.mkdtemp(prefix="sb3-peer-")) / "run"
    # The 1M frames learning.py gives CartPole (the same learning-rate schedule), reports
    # every 0.25 s so that the threshold is not rounded up to the next report.
    command = train_command(task, seed, logdir, ["--report-every", "0.25", *extra])
    tail, hit = MetricsTail(logdir), None
    launch = time.monotonic()
    try:
        with tempfile.TemporaryFile("w+") as stderr:  # a pipe nobody reads could fill up
            process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
            try:
                while hit is None and process.poll() is None:
                    for record in tail.new_records():
                        if reaches(record, TARGET):
                            hit = {
                                "seconds_to_475": round(time.monotonic() - launch, 2),
                                "frames_to_475": record["frames"],
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
    return {"command": command, **(hit or {"seconds_to_475": None, "frames_to_475": None})}


def main() -> None:
    argv, extra = split_train_flags(sys.argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--venv", default=str(ROOT / "runs" / "benchmarks" / "sb3-venv"))
    parser.add_argument("--label", default="defaults")
    parser.add_argument("--no-record", action="store_true", help="write no ledger record")
    args = parser.parse_args(argv)
    python = peer_venv(pathlib.Path(args.venv), [[TORCH], [SB3, TORCH]])
    rows, ours_s, sb3_s = [], [], []
    for seed in args.seeds:
        print(f"seed {seed}: SB3 PPO ...", flush=True)
        peer = run_sb3(python, seed)
        print(f"seed {seed}: impala-rep ...", flush=True)
        ours = run_ours(seed, extra)
        for name, r in (("SB3 PPO (rl-zoo)", peer), ("impala-rep", ours)):
            reached = r["seconds_to_475"] is not None
            rows.append(
                [
                    name,
                    seed,
                    f"{r['seconds_to_475']:.1f}" if reached else "not reached",
                    f"{r['frames_to_475']:,}" if reached else "–",
                ]
            )
        ours_s.append(ours["seconds_to_475"])
        sb3_s.append(peer["seconds_to_475"])
        if not args.no_record:
            path = ledger.write_record(
                benchmark="sb3_peer",
                task="cartpole",
                label=args.label,
                seed=seed,
                command=ours["command"],
                settings={"threshold": TARGET, "our_flags": extra, "peer": SB3},
                figures={"impala_rep": ours_without_command(ours), "sb3_ppo": peer},
            )
            print(f"wrote {path.relative_to(ROOT)}")
    print(table(["system", "seed", "s from launch to 475", "frames to 475"], rows))
    if None not in ours_s and None not in sb3_s:
        ratio = statistics.median(ours_s) / statistics.median(sb3_s)
        print(f"median: impala-rep {ratio:.2f}× SB3 PPO's seconds to 475 (target ≤ 0.5×)")


def ours_without_command(ours: dict) -> dict:
    return {key: value for key, value in ours.items() if key != "command"}


if __name__ == "__main__":
    main()
