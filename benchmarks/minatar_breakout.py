"""Frames and wall seconds until MinAtar Breakout's last-100-episode mean return reaches
given scores.

    .venv/bin/python benchmarks/minatar_breakout.py [--seed 1] [--total-frames 15000000]
        [--target-return R] [--out runs/benchmarks/minatar_breakout.json]

One full `impala_rep.run.training.train` run on MinAtar/Breakout-v1 (needs the
minatar extra): MinAtar's own settings (sticky actions 0.1, difficulty ramping,
the minimal 3-action set), the `auto` network (MinAtar's one-conv network, see
impala_rep/networks.py), SETTINGS below for the rest, on an embedded local Ray.
Wall seconds count from the start of the run, Ray start-up included; frames
are env frames (MinAtar has no frame skip: one frame per agent step).

The table gives, for each score in THRESHOLDS (and `--target-return`, e.g. a
published score), the first report whose mean return over the last 100
episodes reaches it. A run stops at `--total-frames` (the learning rate decays
to 0 over them), so choose it to fit the time you have.
"""

from __future__ import annotations

import argparse

import _common  # noqa: F401  (quiets TensorFlow before it is imported)
from _common import machine, table, write_json

from impala_rep.config import TrainConfig
from impala_rep.run.training import train

ENV = "MinAtar/Breakout-v1"
THRESHOLDS = (5.0, 10.0, 15.0, 20.0, 30.0)
# The TrainConfig defaults (discount 0.99, entropy 0.01, baseline 0.5, RMSProp
# eps 0.01, clip 40, rewards clipped to [-1, 1], which leaves Breakout's +1
# bricks as they are) but the learning rate: of 1e-3, 3e-3 and 5e-3 (one 3M-frame
# run each), 3e-3 had the highest return at 3M frames.
SETTINGS = {"learning_rate": 3e-3, "envs_per_actor": 64, "unroll_length": 20, "batch_size": 32}


def first_reaching(records: list[dict], score: float) -> dict | None:
    """The first metrics record whose last-100-episode mean return is >= `score`."""
    return next(
        (
            r
            for r in records
            if r["episode_return_mean"] is not None and r["episode_return_mean"] >= score
        ),
        None,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--num-actors", type=int, default=2)
    parser.add_argument("--total-frames", type=int, default=15_000_000)
    parser.add_argument("--learning-rate", type=float, default=SETTINGS["learning_rate"])
    parser.add_argument(
        "--target-return",
        type=float,
        default=None,
        help="also report frames and seconds to this score (e.g. a published one)",
    )
    parser.add_argument("--out", default="runs/benchmarks/minatar_breakout.json")
    args = parser.parse_args()
    config = TrainConfig.from_keys(
        dict(
            SETTINGS,
            env=ENV,
            num_actors=args.num_actors,
            total_frames=args.total_frames,
            seed=args.seed,
            learning_rate=args.learning_rate,
        )
    )
    result = train(config)  # the records it returns are all the JSON needs: no logdir
    scores = sorted(
        set(THRESHOLDS) | ({args.target_return} if args.target_return is not None else set())
    )
    rows, reached = [], []
    for score in scores:
        hit = first_reaching(result.records, score)
        reached.append(
            {
                "return": score,
                "frames": hit["frames"] if hit else None,
                "seconds": hit["wall_s"] if hit else None,
            }
        )
        rows.append(
            (
                f"{score:g}" + (" (target)" if score == args.target_return else ""),
                f"{hit['frames']:,}" if hit else "not reached",
                f"{hit['wall_s']:.0f}" if hit else "-",
            )
        )
    best = max(
        (r["episode_return_mean"] for r in result.records if r["episode_return_mean"] is not None),
        default=None,
    )
    last = result.records[-1] if result.records else {}
    print()
    print(table(["mean return (last 100 episodes)", "frames", "seconds"], rows))
    print(
        f"\nfinal mean return {result.episode_return_mean}, best {best}, "
        f"{last.get('frames', 0):,} frames in {result.wall_s:.0f} s "
        f"({last.get('frames', 0) / max(result.wall_s, 1e-9):,.0f} frames/s overall)"
    )
    write_json(
        args.out,
        {
            "benchmark": "minatar_breakout",
            "machine": machine(),
            "config": config.to_json(),
            "reached": reached,
            "final_return": result.episode_return_mean,
            "best_return": best,
            "run_seconds": round(result.wall_s, 1),
            "records": result.records,
        },
    )


if __name__ == "__main__":
    main()
