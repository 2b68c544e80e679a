"""Frames and wall seconds until CartPole's last-100-episode mean return reaches 475.

    .venv/bin/python benchmarks/cartpole.py [--seeds 1 2 3] [--out runs/benchmarks/cartpole.json]

Each seed is a full `impala-rep train` run (default settings, 2 actors, 1M
frames) on an embedded local Ray; wall seconds count from the start of the run,
Ray start-up included. Target on a 2-core machine: <= 1M frames and <= 180 s
for every seed.
"""

from __future__ import annotations

import argparse
import tempfile

import _common  # noqa: F401  (quiets TensorFlow before it is imported)
from _common import machine, table, write_json

from impala_rep.config import TrainConfig
from impala_rep.run.training import train

TARGET_RETURN, TARGET_FRAMES, TARGET_SECONDS = 475.0, 1_000_000, 180.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--num-actors", type=int, default=2)
    parser.add_argument("--out", default="runs/benchmarks/cartpole.json")
    args = parser.parse_args()
    results = []
    for seed in args.seeds:
        with tempfile.TemporaryDirectory() as logdir:
            config = TrainConfig.from_keys(dict(env="CartPole-v1", num_actors=args.num_actors,
                                                total_frames=TARGET_FRAMES, seed=seed,
                                                logdir=logdir + "/run"))
            result = train(config)
        hit = next((r for r in result.records
                    if r["episode_return_mean"] is not None and r["episode_return_mean"] >= TARGET_RETURN), None)
        results.append({
            "seed": seed,
            "frames_to_475": hit["frames"] if hit else None,
            "seconds_to_475": hit["wall_s"] if hit else None,
            "final_return": result.episode_return_mean,
            "run_seconds": round(result.wall_s, 1),
            "met_target": bool(hit and hit["frames"] <= TARGET_FRAMES and hit["wall_s"] <= TARGET_SECONDS),
        })
    rows = [(r["seed"], f"{r['frames_to_475']:,}" if r["frames_to_475"] else "not reached",
             r["seconds_to_475"] if r["seconds_to_475"] is not None else "-",
             f"{r['final_return']:.1f}" if r["final_return"] is not None else "-", r["run_seconds"],
             "yes" if r["met_target"] else "NO") for r in results]
    print()
    print(table(["seed", "frames to 475", "seconds to 475", "final return", "run s", "target met"], rows))
    write_json(args.out, {"benchmark": "cartpole", "machine": machine(), "num_actors": args.num_actors,
                          "config": TrainConfig.from_keys(dict(num_actors=args.num_actors)).to_json(), "results": results})


if __name__ == "__main__":
    main()
