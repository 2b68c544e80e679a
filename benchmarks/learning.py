"""Learning benchmark suite: frames and seconds from launch to each task's threshold.

    .venv/bin/python benchmarks/learning.py [--tasks cartpole acrobot ...] [--seeds 1 2 3]
        [--label NAME] [--out runs/benchmarks/learning] [-- TRAIN FLAGS ...]
    .venv/bin/python benchmarks/learning.py --merge LABEL LABEL ... --label NAME

Each (task, seed) is one `impala-rep train` command, run the way a user runs it (a new
process, embedded Ray, `--env` and `--seed` and the task's frame budget; anything after
`--` is passed on, e.g. `-- --passes 2` to measure an option). Runs go one at a time:
two learning runs at once on a small machine slow each other down. While a run goes,
its `metrics.jsonl` is read every 0.5 s, so "seconds" count from the command's launch
(Python, TensorFlow and Ray start-up included) to the report that first reached the
threshold with 100 episodes ended, as a user watching the console would see it.

Prints one row per run (every seed, never only the best), with the published figure of
an anchor (`benchmarks/anchors.json`) beside it; writes one record per run into the
results ledger (`benchmarks/results/learning/TASK/`, `ledger.py`; `--no-record` writes
none), `OUT/LABEL.json` and one figure of return curves, `OUT/LABEL.png` (a panel per
task, a line per seed). Logs of every run stay in `OUT/LABEL/TASK-sSEED/`.

Thresholds are gymnasium's registered `reward_threshold`s for classic control (CartPole
475, Acrobot -100, MountainCar -110); for toy_text, where no learning figures are
published, the anchor is the optimal policy's expected return (benchmarks/optimal_returns.py)
and the threshold sits a stated step below it. The return is the mean over the last 100
episodes of the behaviour policy (stochastic, as it trains). rl-baselines3-zoo publishes
a trained agent's deterministic evaluation instead, so after each run its final checkpoint
is also played greedily for 100 episodes (`impala-rep evaluate LOGDIR --json
LOGDIR/evaluation.json`), the figure to set beside the zoo's; `--merge ... --evaluate`
adds that column to runs saved before it existed. `--no-evaluate` skips it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

import _common  # noqa: F401  (quiets TensorFlow before it is imported)
import ledger
from _common import MetricsTail, split_train_flags, table, write_json

from impala_rep.learner.accounting import RETURN_WINDOW
from impala_rep.run.run_log import read_metrics

ROOT = pathlib.Path(__file__).resolve().parent.parent
IMPALA_REP = str(ROOT / ".venv" / "bin" / "impala-rep")  # the command, as a user runs it


@dataclasses.dataclass(frozen=True)
class Task:
    env: str
    frames: int  # the run's budget: the learning rate decays to 0 over it
    threshold: float  # mean return over the last 100 episodes
    flags: tuple[str, ...] = ()


# Thresholds: gymnasium's registered reward_threshold for classic control; a stated step
# below the optimum for toy_text (benchmarks/optimal_returns.py). Anchors: benchmarks/anchors.json.
TASKS = {
    "cartpole": Task("CartPole-v1", 1_000_000, 475.0),
    "acrobot": Task("Acrobot-v1", 1_000_000, -100.0),
    "mountaincar": Task("MountainCar-v0", 1_000_000, -110.0),
    # gymnasium's toy_text, one-hot coded (envs/factory.py).
    "frozenlake": Task("FrozenLake-v1", 1_000_000, 0.70),
    "taxi": Task("Taxi-v4", 1_000_000, 7.0),
    "cliffwalking": Task("CliffWalking-v1", 1_000_000, -15.0),
    "blackjack": Task("Blackjack-v1", 1_000_000, -0.10),
    # Registered ids no default was chosen on: held out, to check that the defaults generalise.
    "frozenlake8x8": Task("FrozenLake8x8-v1", 1_000_000, 0.85),
    "cliffwalking-slippery": Task("CliffWalkingSlippery-v1", 1_000_000, -75.0),
    "minatar-breakout": Task("MinAtar/Breakout-v1", 3_000_000, 10.0),
    # Continuous control (a Gaussian policy). Pendulum has no registered threshold: -250 is
    # the goal issue "Any gymnasium task" set, within 500k frames.
    "pendulum": Task("Pendulum-v1", 500_000, -250.0),
    # The zoo's 1M-step budget; the thresholds are 70% of its PPO's greedy scores (issue "Any
    # gymnasium task"), and 200 for LunarLanderContinuous (its registered threshold).
    "halfcheetah": Task("HalfCheetah-v5", 1_000_000, 4073.0),
    "hopper": Task("Hopper-v5", 1_000_000, 1687.0),
    "lunarlander-continuous": Task("LunarLanderContinuous-v3", 1_000_000, 200.0),
    # Continuous control no default was chosen on: held out, to check that the continuous
    # defaults generalise. 70% of the zoo's PPO after 1M steps, as above; MountainCarContinuous
    # its registered threshold (the zoo's PPO needs tuned noise to reach it).
    "walker2d": Task("Walker2d-v5", 1_000_000, 2435.0),
    "swimmer": Task("Swimmer-v5", 1_000_000, 197.0),
    "ant": Task("Ant-v5", 1_000_000, 929.0),
    "mountaincar-continuous": Task("MountainCarContinuous-v0", 1_000_000, 90.0),
    # Dict observations: the egocentric 7x7 image alone (the mission string is constant here).
    "minigrid-doorkey": Task(
        "MiniGrid-DoorKey-5x5-v0", 1_000_000, 0.9, ("--observation-keys", "image")
    ),
    "pong": Task("PongNoFrameskip-v4", 20_000_000, 18.0, ("--preset", "atari")),
}
DEFAULT_TASKS = ("cartpole", "acrobot", "mountaincar", "minatar-breakout")
EVAL_EPISODES = 100
EVAL_FRAME_BUDGET = 2_000_000  # 100 classic-control episodes take at most 50k


def train_command(task: Task, seed: int, logdir: pathlib.Path, extra: list[str]) -> list[str]:
    """`impala-rep train` of `task` on `seed` into `logdir`, as a user runs it."""
    return [
        IMPALA_REP,
        "train",
        "--env",
        task.env,
        "--seed",
        str(seed),
        "--total-frames",
        str(task.frames),
        "--logdir",
        str(logdir),
        *task.flags,
        *extra,
    ]


def run_one(task: Task, seed: int, logdir: pathlib.Path, extra: list[str]) -> dict:
    """One `impala-rep train` command; the first record at the threshold, timed from launch."""
    command = train_command(task, seed, logdir, extra)
    tail = MetricsTail(logdir)
    start = time.monotonic()
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    hit = None
    while True:
        finished = process.poll() is not None
        for record in tail.new_records():
            if hit is None and reaches(record, task.threshold):
                hit = {"frames": record["frames"], "seconds": round(time.monotonic() - start, 1)}
        if finished:
            break
        time.sleep(0.5)
    seconds = round(time.monotonic() - start, 1)
    stderr = process.stderr.read()
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed (exit {process.returncode}):\n{stderr}")
    records = read_metrics(logdir)
    fps = sorted(r["frames"] / r["wall_s"] for r in records if r["wall_s"] > 0)
    curve = [
        (r["frames"], r["episode_return_mean"])
        for r in records
        if r["episode_return_mean"] is not None
    ]
    returns = [mean for _, mean in curve]
    return {
        "seed": seed,
        "command": command,
        "frames_to_threshold": hit and hit["frames"],
        "seconds_to_threshold": hit and hit["seconds"],
        "final_return": returns[-1] if returns else None,
        "late_return": late_return(curve, records[-1]["frames"]),
        "best_return": max(
            (r["episode_return_mean"] for r in records if full_window(r)), default=None
        ),
        "frames": records[-1]["frames"],
        "seconds": seconds,
        "curve": curve,
        "frames_per_s_from_launch": round(records[-1]["frames"] / seconds),
        "median_cumulative_fps": round(statistics.median(fps)) if fps else None,
    }


_FIGURES = (
    "frames_to_threshold",
    "seconds_to_threshold",
    "final_return",
    "late_return",
    "best_return",
    "frames",
    "seconds",
    "frames_per_s_from_launch",
    "median_cumulative_fps",
    "greedy_return",
    "greedy_std",
    "greedy_unfinished",
)


def record(name: str, task: Task, run: dict, *, label: str, extra: list[str]) -> None:
    """The run's record in the results ledger."""
    path = ledger.write_record(
        benchmark="learning",
        task=name,
        label=label,
        seed=run["seed"],
        command=run["command"],
        figures={key: run.get(key) for key in _FIGURES},
        curve=run["curve"],
        settings={
            "env": task.env,
            "threshold": task.threshold,
            "total_frames": task.frames,
            "task_flags": list(task.flags),
            "extra_flags": extra,
            "evaluation_episodes": EVAL_EPISODES,
        },
    )
    print(f"  recorded {path.relative_to(ledger.ROOT)}", flush=True)


def evaluate(logdir: pathlib.Path) -> dict:
    """The run's final checkpoint played greedily for 100 episodes (`impala-rep evaluate`).

    A greedy policy can play on forever where an env has no time limit (MinAtar,
    CliffWalking): after EVAL_FRAME_BUDGET env frames the evaluation is recorded as
    unfinished instead of stopping the suite."""
    out = logdir / "evaluation.json"
    command = [
        IMPALA_REP,
        "evaluate",
        str(logdir),
        "--episodes",
        str(EVAL_EPISODES),
        "--frame-budget",
        str(EVAL_FRAME_BUDGET),
        "--json",
        str(out),
    ]
    done = subprocess.run(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT
    )  # a run's --agent file path is relative to where it ran
    if done.returncode == 1 and "episodes ended within" in done.stderr:
        return {
            "greedy_return": None,
            "greedy_std": None,
            "greedy_unfinished": done.stderr.strip().splitlines()[-1],
        }
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed (exit {done.returncode}):\n{done.stderr}")
    result = json.loads(out.read_text())
    return {
        "greedy_return": round(result["mean_return"], 4),
        "greedy_std": round(result["std_return"], 4),
    }


def full_window(record: dict) -> bool:
    """Whether a metrics.jsonl record's return mean is over a full window of 100 episodes.

    Before 100 episodes have ended the mean is over the few that have, and on a task without
    a time limit those are the lucky short ones: CliffWalkingSlippery's first report, one
    episode of -43, sat above its -75 where the next was -914."""
    return (
        record.get("episode_return_mean") is not None and record.get("episodes", 0) >= RETURN_WINDOW
    )


def reaches(record: dict, threshold: float) -> bool:
    """Whether a record's return mean, over a full window, is at the threshold."""
    return full_window(record) and record["episode_return_mean"] >= threshold


def late_return(curve: list[tuple[int, float]], frames: int) -> float | None:
    """The mean of the reports' 100-episode means (`curve`: (frames, mean) pairs) over the
    run's last quarter of `frames`: where reports are more than 100 episodes apart
    (Blackjack: ~650), it averages thousands of episodes, steadier than the final report's
    100 (a Blackjack mean varies by about 0.1)."""
    late = [mean for at, mean in curve if at >= 0.75 * frames]
    return round(statistics.fmean(late), 4) if late else None


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _greedy(run: dict) -> str:
    if run.get("greedy_unfinished"):
        return "unfinished"
    if run.get("greedy_return") is None:
        return "-"
    return f"{run['greedy_return']:.3g} ± {run['greedy_std']:.2g}"


def print_table(results: dict[str, list[dict]]) -> None:
    anchors = ledger.load_anchors()
    rows = []
    for name, runs in results.items():
        for run in runs:
            rows.append(
                (
                    TASKS[name].env,
                    run["seed"],
                    f"{TASKS[name].threshold:g}",
                    f"{run['frames_to_threshold']:,}"
                    if run["frames_to_threshold"]
                    else "not reached",
                    run["seconds_to_threshold"] if run["seconds_to_threshold"] is not None else "-",
                    _number(run["final_return"]),
                    _number(run.get("late_return")),
                    _greedy(run),
                    f"{run['frames']:,}",
                    run["seconds"],
                    anchors[name]["figure"],
                )
            )
    print(
        table(
            [
                "task",
                "seed",
                "threshold",
                "frames to threshold",
                "s from launch",
                "final return",
                "last-quarter mean",
                f"greedy, {EVAL_EPISODES} episodes",
                "frames",
                "run s",
                "anchor",
            ],
            rows,
        )
    )


# A line style per seed in a figure of several settings: eight that tell apart at a glance
# (matplotlib's four named ones repeat from a fifth seed on).
_SEED_STYLES = (
    "-",
    "--",
    ":",
    "-.",
    (0, (5, 1)),
    (0, (3, 1, 1, 1, 1, 1)),
    (0, (1, 4)),
    (0, (8, 2, 1, 2)),
)


def draw(results: dict[str, list[dict]], path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(4.2 * len(results), 3.6), squeeze=False)
    # Runs with different training flags (merged settings) get a colour per setting and a line
    # style per seed, so one figure compares settings; one setting (e.g. merged seed batches)
    # keeps a colour per seed.
    settings = sorted(
        {" ".join(run.get("train_flags", ())) for runs in results.values() for run in runs}
    )
    seeds = sorted({run["seed"] for runs in results.values() for run in runs})
    for ax, (name, runs) in zip(axes[0], results.items()):
        labelled = set()  # one legend entry per setting: a legend per run hid the curves
        for run in runs:
            frames, returns = zip(*run["curve"]) if run["curve"] else ((), ())
            setting = " ".join(run.get("train_flags", ()))
            if len(settings) > 1:
                label = (
                    None
                    if setting in labelled
                    else f"{setting or 'defaults'} (a line style per seed)"
                )
                labelled.add(setting)
                ax.plot(
                    frames,
                    returns,
                    label=label,
                    color=f"C{settings.index(setting) % 10}",
                    linestyle=_SEED_STYLES[seeds.index(run["seed"]) % len(_SEED_STYLES)],
                )
            else:
                ax.plot(frames, returns, label=f"seed {run['seed']}")
        ax.axhline(TASKS[name].threshold, color="grey", linestyle="--", linewidth=1)
        ax.set(title=TASKS[name].env, xlabel="env frames", ylabel="mean return (last 100 episodes)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    argv, extra = split_train_flags(sys.argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", choices=sorted(TASKS), default=list(DEFAULT_TASKS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument(
        "--label", default="defaults", help="names the output files and run folders"
    )
    parser.add_argument("--out", default="runs/benchmarks/learning")
    parser.add_argument(
        "--merge",
        nargs="+",
        metavar="LABEL",
        help="run nothing: combine the saved OUT/LABEL.json of earlier invocations "
        "(e.g. other seeds) into one table, figure and JSON under --label",
    )
    parser.add_argument(
        "--evaluate",
        action="store_true",
        help="with --merge: play the merged runs' final checkpoints greedily "
        "where their saved results have no such figure",
    )
    parser.add_argument(
        "--no-evaluate", action="store_true", help="skip the greedy evaluation after each run"
    )
    parser.add_argument(
        "--no-record",
        action="store_true",
        help="write no record into the results ledger (benchmarks/results/)",
    )
    args = parser.parse_args(argv)
    out = pathlib.Path(args.out)
    results: dict[str, list[dict]] = {}
    for label in args.merge or ():
        saved = json.loads((out / f"{label}.json").read_text())
        for name, runs in saved["results"].items():
            for run in runs:  # files written before late_return was recorded
                run.setdefault("train_flags", saved.get("train_flags", []))
                run.setdefault("late_return", late_return(run["curve"], run["frames"]))
                run.setdefault("logdir", str(out / label / f"{name}-s{run['seed']}"))
                if args.evaluate and run.get("greedy_return") is None:
                    print(f"evaluating {run['logdir']} ...", flush=True)
                    run.update(evaluate(pathlib.Path(run["logdir"])))
            results.setdefault(name, []).extend(runs)
    planned = [
        (name, seed, out / args.label / f"{name}-s{seed}")
        for name in ([] if args.merge else args.tasks)
        for seed in args.seeds
    ]
    # Every run's folder checked before the first run: a taken one found at its turn would
    # stop the invocation halfway.
    for _, _, logdir in planned:
        if logdir.exists():
            raise SystemExit(f"{logdir} exists: choose another --label or remove it")
    for name, seed, logdir in planned:
        task = TASKS[name]
        print(f"{name} seed {seed}: {task.env}, {task.frames:,} frames ...", flush=True)
        run = run_one(task, seed, logdir, extra)
        run["logdir"] = str(logdir)
        run["train_flags"] = extra
        if not args.no_evaluate:
            run.update(evaluate(logdir))
        results.setdefault(name, []).append(run)
        if not args.no_record:
            record(name, task, run, label=args.label, extra=extra)
        print(
            f"  threshold {task.threshold:g}: "
            + (
                f"{run['frames_to_threshold']:,} frames, {run['seconds_to_threshold']} s"
                if run["frames_to_threshold"] is not None
                else "not reached"
            )
            + f"; final {run['final_return']}; greedy {_greedy(run)}; run {run['seconds']} s",
            flush=True,
        )
    print()
    print_table(results)
    figure = out / f"{args.label}.png"
    draw(results, figure)
    print(f"wrote {figure}")
    write_json(
        str(out / f"{args.label}.json"),
        {
            "benchmark": "learning",
            "label": args.label,
            "train_flags": extra,
            "merged_from": args.merge,
            "tasks": {name: dataclasses.asdict(TASKS[name]) for name in results},
            "results": results,
            "cpus": os.cpu_count(),
        },
    )


if __name__ == "__main__":
    main()
