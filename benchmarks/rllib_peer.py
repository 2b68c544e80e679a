"""Side by side with RLlib's IMPALA on CartPole-v1: env frames/s and time to 475 from launch.

    .venv/bin/python benchmarks/rllib_peer.py [--seeds 1] [--rllib-seconds 600]
        [--venv runs/benchmarks/rllib-venv] [-- OUR TRAIN FLAGS ...]

The peer runs in a venv of its own, made on the first run (`ray[rllib]` at this venv's Ray
version and torch, pinned in TORCH; a few minutes), so this project never depends on RLlib
or torch. One at a time, never together, each
seed runs:

1. RLlib's IMPALA (new API stack, torch) with its tuned example's settings
   (`tuned_examples/impala/cartpole_impala.py`: batch 500, lr 5e-4, vf 0.05, entropy 0,
   shared layers) on 2 env runners × 8 envs, until its mean return reaches 475 or
   `--rllib-seconds` pass (`_rllib_impala_cartpole.py`);
2. `impala-rep train --env CartPole-v1 --seed S` (1M frames, default flags, 2 actors;
   anything after `--` is added), as `learning.py` runs it.

Both are timed from their command's launch (imports and Ray start included). Prints the
median env frames/s (ours: the reports' `env_fps`; RLlib: each training iteration's
frames over its seconds, the first, which holds the build, left out), frames/s over the
whole run, and frames and seconds to 475; writes `runs/benchmarks/rllib_peer.json`.
The whole-run rates are of runs of different lengths (ours 1M frames, RLlib's until 475),
so start-up weighs differently in each; our frames are those the learner consumed, RLlib's
those its env runners sampled.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import statistics
import subprocess
import sys
import time

import _common  # noqa: F401  (quiets TensorFlow before it is imported)
from _common import peer_venv, split_train_flags, table, write_json
from learning import TASKS, run_one

from impala_rep.run.run_log import read_metrics

ROOT = pathlib.Path(__file__).resolve().parent.parent
PEER = pathlib.Path(__file__).with_name("_rllib_impala_cartpole.py")
# Pinned so that a CPU build of it already in pip's cache is used: any other version
# downloads a CUDA build.
TORCH = "torch==2.13.0"
TARGET = 475.0


def run_rllib(python: pathlib.Path, seed: int, seconds: float) -> dict:
    launch = time.time()
    # Bounded: an iteration takes seconds, so a peer still running long after its time is stuck
    # (as one is with one CPU slot per core: its learner's aggregator never starts).
    process = subprocess.run(
        [
            str(python),
            str(PEER),
            "--launch",
            str(launch),
            "--seconds",
            str(seconds),
            "--target",
            str(TARGET),
            "--seed",
            str(seed),
        ],
        capture_output=True,
        text=True,
        timeout=seconds + 300,
    )
    wall_s = time.time() - launch
    records = [json.loads(line) for line in process.stdout.splitlines() if line.startswith("{")]
    if process.returncode != 0 or len(records) < 2:  # a rate needs two iterations
        raise SystemExit(
            f"the RLlib run failed (exit {process.returncode}):\n{process.stderr[-3000:]}"
        )
    rates = [
        (b["frames"] - a["frames"]) / (b["s"] - a["s"])
        for a, b in zip(records, records[1:])
        if b["s"] > a["s"]
    ]
    hit = next((r for r in records if r["return"] is not None and r["return"] >= TARGET), None)
    return {
        "seed": seed,
        "median_env_fps": statistics.median(rates),
        "fps_from_launch": records[-1]["frames"] / wall_s,
        "frames": records[-1]["frames"],
        "seconds": wall_s,
        "final_return": records[-1]["return"],
        "frames_to_475": hit and hit["frames"],
        "seconds_to_475": hit and round(hit["s"], 1),
    }


def run_ours(seed: int, logdir: pathlib.Path, extra: list[str]) -> dict:
    result = run_one(TASKS["cartpole"], seed, logdir, ["--num-actors", "2", *extra])
    return {
        "seed": seed,
        "median_env_fps": statistics.median(r["env_fps"] for r in read_metrics(logdir)),
        "fps_from_launch": result["frames_per_s_from_launch"],
        "frames": result["frames"],
        "seconds": result["seconds"],
        "final_return": result["final_return"],
        "frames_to_475": result["frames_to_threshold"],
        "seconds_to_475": result["seconds_to_threshold"],
    }


def main() -> None:
    argv, extra = split_train_flags(sys.argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    parser.add_argument("--rllib-seconds", type=float, default=600.0)
    parser.add_argument("--venv", default=str(ROOT / "runs" / "benchmarks" / "rllib-venv"))
    parser.add_argument("--out", default=str(ROOT / "runs" / "benchmarks" / "rllib_peer"))
    args = parser.parse_args(argv)
    import ray

    rllib = f"ray[rllib]=={ray.__version__}"
    python = peer_venv(pathlib.Path(args.venv), [[TORCH], [rllib, TORCH]])
    out = pathlib.Path(args.out)
    rows, results = [], []
    for seed in args.seeds:
        print(f"seed {seed}: RLlib IMPALA ...", flush=True)
        peer = run_rllib(python, seed, args.rllib_seconds)
        print(f"seed {seed}: impala-rep {' '.join(extra)} ...", flush=True)
        logdir = out / f"ours-s{seed}"
        shutil.rmtree(logdir, ignore_errors=True)
        ours = run_ours(seed, logdir, extra)
        results.append({"seed": seed, "rllib": peer, "ours": ours})
        for name, r in (("RLlib IMPALA", peer), ("impala-rep", ours)):
            rows.append(
                [
                    name,
                    seed,
                    f"{r['median_env_fps']:,.0f}",
                    f"{r['fps_from_launch']:,.0f}",
                    f"{r['frames']:,}",
                    f"{r['seconds']:.0f}",
                    r["final_return"],
                    f"{r['frames_to_475']:,}" if r["frames_to_475"] else "not reached",
                    r["seconds_to_475"] or "–",
                ]
            )
        rows.append(
            [
                "ratio",
                seed,
                f"{ours['median_env_fps'] / peer['median_env_fps']:.1f}×",
                f"{ours['fps_from_launch'] / peer['fps_from_launch']:.1f}×",
                "",
                "",
                "",
                "",
                (
                    f"{peer['seconds_to_475'] / ours['seconds_to_475']:.1f}× sooner"
                    if peer["seconds_to_475"] and ours["seconds_to_475"]
                    else ""
                ),
            ]
        )
    print(
        table(
            [
                "system",
                "seed",
                "median env frames/s",
                "frames/s from launch",
                "frames",
                "run s",
                "final return",
                "frames to 475",
                "s to 475 from launch",
            ],
            rows,
        )
    )
    write_json(
        str(out) + ".json", {"machine": _common.machine(), "our_flags": extra, "results": results}
    )


if __name__ == "__main__":
    main()
