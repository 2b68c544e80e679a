"""Start-up: seconds from `impala-rep train`'s launch to its first trained frame, by stage.

    .venv/bin/python benchmarks/startup.py [--repeats 3] [--env CartPole-v1] [--label NAME]
        [--no-record] [-- TRAIN FLAGS ...]

The target is a ratio measured in one run of this script: the first trained frame within
1.0× the sum of two bare costs, each its own new process timed from launch to exit:
`python -c "import tensorflow"` and `python -c "import ray; ray.init(); ray.shutdown()"`.
Each repeat measures both, then launches `impala-rep train --env ENV --total-frames 300000`
as a user would, stops it (SIGTERM) once it has trained, and reads the run's `startup` event
(events.jsonl, `impala_rep/startup.py`): when Ray had started, the learner's process began,
TensorFlow was imported in it, the learner was built, the first unroll came in and the first
step ended, each placed against this script's launch of the command. Runs go one at a time.

Every repeat's run uses one XLA compilation cache of this script's own (`--xla-cache`, a new
temporary directory): the first repeat compiles the learner's step into it (cold, as a
machine's first run of a setting), the others load it (warm, as every later run does). The
target is judged on the warm repeats; the cold one shows what compiling costs.

Prints a table of the stages per repeat and the median ratios; writes one ledger record per
repeat (`benchmarks/results/startup/TASK/`, `ledger.py`).
"""

from __future__ import annotations

import argparse
import json
import os
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
from _common import split_train_flags, table

from impala_rep.startup import STAGES

ROOT = pathlib.Path(__file__).resolve().parent.parent
_POLL_S = 0.05
_BARE = {
    "tf_import_s": "import tensorflow",
    "ray_init_shutdown_s": "import ray; ray.init(); ray.shutdown()",
}


def bare_costs() -> dict[str, float]:
    """Seconds of each bare cost, a new process each, from launch to exit."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    costs = {}
    for name, code in _BARE.items():
        launch = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, env=env, capture_output=True)
        costs[name] = round(time.perf_counter() - launch, 2)
    return costs


def startup_event(logdir: pathlib.Path) -> dict | None:
    path = logdir / "events.jsonl"
    if not path.is_file():
        return None
    for line in path.read_text().splitlines():
        if line.endswith("}"):
            event = json.loads(line)
            if event.get("event") == "startup":
                return event
    return None


def one_start(command: list[str], logdir: pathlib.Path) -> dict[str, float]:
    """The stages of one launch, in seconds from it."""
    launch = time.time()
    with tempfile.TemporaryFile("w+") as stderr:  # a file: a pipe nobody reads can fill up
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
        event = None
        try:
            while event is None and process.poll() is None:
                time.sleep(_POLL_S)
                event = startup_event(logdir)
        finally:
            process.send_signal(signal.SIGTERM)  # a clean stop, checkpoint and all
            try:
                process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if event is None:
            stderr.seek(0)
            raise SystemExit(
                f"the run ended before training (exit {process.returncode}):\n"
                f"{stderr.read()[-2000:]}"
            )
    offset = event["called_at"] - launch  # the train() call, from the launch
    stages = {"train() called": offset}
    stages.update({name: offset + s for name, s in event["seconds"].items()})
    return {name: round(s, 2) for name, s in stages.items()}


def main() -> int:
    argv, extra = split_train_flags(sys.argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--label", default="defaults")
    parser.add_argument("--no-record", action="store_true", help="write no ledger record")
    args = parser.parse_args(argv)
    columns = ("train() called", *STAGES)
    rows, ratios = [], {"cold": [], "warm": []}
    cache = tempfile.mkdtemp(prefix="startup-xla-cache-")
    for repeat in range(1, args.repeats + 1):
        xla_cache = "cold" if repeat == 1 else "warm"
        costs = bare_costs()
        budget = sum(costs.values())
        base = [
            str(ROOT / ".venv" / "bin" / "impala-rep"),
            "train",
            "--env",
            args.env,
            "--total-frames",
            "300000",
            "--xla-cache",
            cache,
            *extra,
        ]
        logdir = pathlib.Path(tempfile.mkdtemp(prefix="startup-")) / "run"
        command = [*base, "--logdir", str(logdir)]
        try:
            stages = one_start(command, logdir)
        finally:
            shutil.rmtree(logdir.parent, ignore_errors=True)
        first = stages["first trained frame"]
        ratios[xla_cache].append(first / budget)
        rows.append(
            [
                repeat,
                xla_cache,
                f"{costs['tf_import_s']:.1f}",
                f"{costs['ray_init_shutdown_s']:.1f}",
                *(f"{stages[c]:.1f}" if c in stages else "–" for c in columns),
                f"{first / budget:.2f}",
            ]
        )
        if not args.no_record:
            path = ledger.write_record(
                benchmark="startup",
                task=args.env.lower().split("-")[0],
                label=args.label,
                seed=repeat,
                command=[
                    *base[: -2 - len(extra)],
                    "--xla-cache",
                    "CACHE",
                    *extra,
                    "--logdir",
                    "LOGDIR",
                ],
                settings={"flags": extra},
                figures={
                    "xla_cache": xla_cache,
                    **costs,
                    "stages_s": stages,
                    "first_trained_frame_s": first,
                    "ratio": round(first / budget, 3),
                },
            )
            print(f"wrote {path.relative_to(ROOT)}", flush=True)
    print(
        table(
            [
                "repeat",
                "XLA cache",
                "bare TF import",
                "bare Ray init+shutdown",
                *(f"{c} (s)" for c in columns),
                "first frame ÷ bare sum",
            ],
            rows,
        )
    )
    shutil.rmtree(cache, ignore_errors=True)
    for kind, values in ratios.items():
        if values:
            print(f"{kind} XLA cache: median ratio {statistics.median(values):.2f}", end="")
            print(" (target ≤ 1.0)" if kind == "warm" else "")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
