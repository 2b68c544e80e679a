"""Population-based training against independent runs of the defaults, same total frames.

    .venv/bin/python benchmarks/pbt.py [--env LunarLander-v3] [--total-frames 1000000]
        [--population 4] [--repetitions 2] [--space KEY=KIND:VALUES ...]
        [--out runs/benchmarks/pbt] [-- TRAIN FLAGS ...]

Each repetition runs two `impala-rep tune` experiments, one at a time, in alternating order:
`independent`, `--scheduler none` over `--space seed=grid:...` (the defaults, one member per
seed), and `pbt`, `--scheduler pbt` over the learning rate and the entropy cost (the settings
the IMPALA paper perturbs, with RMSProp's epsilon; `--space` replaces them), each member
starting from a sampled value. Every member of both has the same actors and the same frames, and
they train side by side, so the two share the machine alike. Per experiment: each member's final
100-episode mean, the best of them, the best member's greedy evaluation (100 episodes,
`impala-rep evaluate`), the command's wall time and the members' frames per second of it (what
PBT's bookkeeping, its checkpoints and restarts, costs shows as the difference). One ledger
record per experiment in `benchmarks/results/pbt/TASK/`.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import time

import _common  # noqa: F401  (quiets TensorFlow before it is imported)
import ledger
from _common import split_train_flags, table

from impala_rep.run.run_log import read_metrics

ROOT = pathlib.Path(__file__).resolve().parent.parent
IMPALA_REP = str(ROOT / ".venv" / "bin" / "impala-rep")
PBT_SPACE = ["learning_rate=loguniform:5e-4,2e-2", "entropy_cost=choice:0,0.001,0.003,0.01,0.03"]


def experiment(kind: str, *, args, repetition: int, extra: list[str]) -> dict:
    task = args.env.lower().replace("/", "-")
    out = pathlib.Path(args.out) / task / f"{kind}-r{repetition}"
    seeds = [repetition * 100 + i for i in range(args.population)]
    if kind == "independent":
        space = []  # the defaults: only the seed varies
        search = ["--scheduler", "none", "--population", "1"]
        search += ["--space", "seed=grid:" + ",".join(map(str, seeds))]
    else:
        space = args.space or PBT_SPACE
        search = ["--scheduler", "pbt", "--population", str(args.population)]
        search += [arg for spec in space for arg in ("--space", spec)]
        search += ["--seed", str(seeds[0])]
    command = [
        IMPALA_REP, "tune", "--out", str(out), *search,
        "--env", args.env, "--total-frames", str(args.total_frames),
        "--num-actors", str(args.num_actors), *extra,
    ]  # fmt: skip
    print(f"{kind} r{repetition}: {' '.join(command[1:])}", flush=True)
    start = time.monotonic()
    proc = subprocess.run(command, capture_output=True, text=True)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        sys.exit(f"{kind} r{repetition} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    members = []
    for run in sorted(out.glob("trial-*/run")):
        records = read_metrics(run)
        members.append(
            {
                "trial": run.parent.name,
                "final_return": records[-1]["episode_return_mean"],
                "frames": records[-1]["frames"],
                "config": json.loads((run / "config.json").read_text()),
            }
        )
    best = max(members, key=lambda m: m["final_return"] if m["final_return"] is not None else -1e9)
    best_run = out / best["trial"] / "run"
    scores = best_run / "evaluation.json"
    subprocess.run(
        [IMPALA_REP, "evaluate", str(best_run), "--json", str(scores)],
        check=True,
        capture_output=True,
    )
    figures = {
        "member_final_returns": [m["final_return"] for m in members],
        "best_final_return": best["final_return"],
        "best_greedy_return": json.loads(scores.read_text())["mean_return"],
        "best_learning_rate": best["config"]["optimizer"]["learning_rate"],
        "best_entropy_cost": best["config"]["loss"]["entropy_cost"],
        "wall_s": round(wall, 1),
        "frames": sum(m["frames"] for m in members),
        "frames_per_second": round(sum(m["frames"] for m in members) / wall),
    }
    if args.no_record:
        return figures
    path = ledger.write_record(
        benchmark="pbt",
        task=task,
        label=kind,
        seed=repetition,
        command=command,
        figures=figures,
        settings={
            "population": args.population,
            "total_frames": args.total_frames,
            "space": space,
        },
    )
    print(f"  recorded {path.relative_to(ROOT)}", flush=True)
    return figures


def main() -> None:
    ours, extra = split_train_flags(sys.argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="LunarLander-v3")
    parser.add_argument("--total-frames", type=int, default=1_000_000)
    parser.add_argument("--population", type=int, default=4)
    parser.add_argument("--num-actors", type=int, default=1)
    parser.add_argument("--repetitions", type=int, default=2)
    parser.add_argument("--out", default="runs/benchmarks/pbt")
    parser.add_argument("--no-record", action="store_true", help="write no ledger record")
    parser.add_argument(
        "--kinds", nargs="+", choices=("independent", "pbt"), default=("independent", "pbt")
    )
    parser.add_argument("--first-repetition", type=int, default=1)
    parser.add_argument(
        "--space",
        action="append",
        default=[],
        metavar="KEY=KIND:VALUES",
        help="the pbt population's space, as impala-rep tune's --space (repeatable); "
        "default: the learning rate and the entropy cost",
    )
    args = parser.parse_args(ours)
    rows = []
    first = args.first_repetition
    for repetition in range(first, first + args.repetitions):
        order = ["independent", "pbt"] if repetition % 2 else ["pbt", "independent"]
        for kind in [k for k in order if k in args.kinds]:
            f = experiment(kind, args=args, repetition=repetition, extra=extra)
            finals = ", ".join(f"{r:.0f}" for r in f["member_final_returns"] if r is not None)
            rows.append(
                [repetition, kind, finals, f"{f['best_final_return']:.1f}",
                 f"{f['best_greedy_return']:.1f}", f"{f['frames_per_second']:,}", f["wall_s"]]
            )  # fmt: skip
    print(
        table(
            [
                "rep",
                "population",
                "members' final returns",
                "best",
                "best, greedy",
                "frames/s (all members)",
                "wall s",
            ],
            rows,
        )  # fmt: skip
    )


if __name__ == "__main__":
    main()
