"""Start-up: seconds from `impala-rep train`'s launch to its first trained frame, by stage.

    .venv/bin/python benchmarks/startup.py [--repeats 3] [--env CartPole-v1] [-- TRAIN FLAGS ...]

The start-up target is a ratio measured in one run of this script: the first
trained frame within 2× the cost of starting the embedded Ray plus one TensorFlow
import. So it first times those two, each in a new process (`cpu_profile.startup_costs`),
then launches `impala-rep train --env ENV --total-frames 300000 --report-every 0.2` as a
user would, `--repeats` times, one after the other. Each run's process tree is read from
/proc every 0.1 s (when Ray's first process, the learner's and an actor's appear) and its
metrics.jsonl followed: the first record with frames > 0 is the first trained frame. The
reports come every 0.2 s instead of the default 2 s so that the stage is not rounded up
to the next report; each run is stopped (SIGTERM) once it has trained.
"""

from __future__ import annotations

import argparse
import pathlib
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import _common  # noqa: F401  (quiets TensorFlow before it is imported)
from _common import MetricsTail, machine, split_train_flags, table, write_json
from _procs import process_tree, role
from cpu_profile import startup_costs

_SAMPLE_EVERY_S = 0.1


def one_start(argv: list[str], logdir: pathlib.Path) -> dict[str, float]:
    command = [
        sys.executable,
        "-m",
        "impala_rep",
        "train",
        *argv,
        "--total-frames",
        "300000",
        "--report-every",
        "0.2",
        "--logdir",
        str(logdir),
    ]
    launch = time.monotonic()
    with tempfile.TemporaryFile("w+") as stderr:  # a file: a pipe nobody reads can fill up
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr, text=True)
        tail, seen = MetricsTail(logdir), {}
        try:
            while process.poll() is None:
                for pid in process_tree(process.pid):
                    seen.setdefault(role(pid), time.monotonic() - launch)
                if any(r["frames"] > 0 for r in tail.new_records()):
                    seen["first trained frame"] = time.monotonic() - launch
                    break
                time.sleep(_SAMPLE_EVERY_S)
        finally:
            process.send_signal(signal.SIGTERM)  # a clean stop, checkpoint and all
            try:
                process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if "first trained frame" not in seen:
            stderr.seek(0)
            raise SystemExit(
                f"the run ended before training (exit {process.returncode}):\n"
                f"{stderr.read()[-2000:]}"
            )
    return seen


def main() -> int:
    argv, extra = split_train_flags(sys.argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--out", default="runs/benchmarks/startup.json")
    args = parser.parse_args(argv)
    costs = startup_costs()
    budget = costs["ray_start_s"] + costs["tf_import_s"]
    stages = ("ray", "learner", "actor", "first trained frame")
    rows, runs = [], []
    for repeat in range(args.repeats):
        logdir = pathlib.Path(tempfile.mkdtemp(prefix="startup-")) / "run"
        try:
            seen = one_start(["--env", args.env, *extra], logdir)
        finally:
            shutil.rmtree(logdir.parent, ignore_errors=True)
        runs.append(seen)
        rows.append(
            [
                repeat + 1,
                *(f"{seen.get(s, float('nan')):.1f}" for s in stages),
                f"{seen['first trained frame'] / budget:.2f}",
            ]
        )
    firsts = [r["first trained frame"] for r in runs]
    print(
        f"Ray start {costs['ray_start_s']:.1f} s + one TensorFlow import "
        f"{costs['tf_import_s']:.1f} s = {budget:.1f} s (each in a new process)"
    )
    print(
        table(
            [
                "run",
                "Ray's first process (s)",
                "the learner's",
                "an actor's",
                "first trained frame",
                "÷ (Ray start + TF import)",
            ],
            rows,
        )
    )
    print(
        f"first trained frame: median {statistics.median(firsts):.1f} s = "
        f"{statistics.median(firsts) / budget:.2f}× (target ≤ 2×)"
    )
    write_json(
        args.out,
        {
            "benchmark": "startup",
            "env": args.env,
            "flags": extra,
            "machine": machine(),
            "costs": costs,
            "runs": runs,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
