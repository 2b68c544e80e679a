"""End-to-end env frames/s on Pong with 1, 2 and 4 actors and the shallow IMPALA network.

    .venv/bin/python benchmarks/atari_throughput.py [--actors 1 2 4] [--frames 600000] \\
        [--preset atari]

A preset's Atari settings (default `atari`; `atari-paper` for batch 32) on ALE/Pong-v5, one
training run per actor count; steady-state rates exclude the first third of each run. Also
reported: the share of time the learner waits for data, and the raw batched
Pong stepping rate measured in the same run. Target: >= 4,000 env frames/s end
to end with 2 actors on a 2-core machine. Needs the atari extra.
"""

from __future__ import annotations

import argparse

from throughput import measure

from impala_rep.config.presets import PRESETS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actors", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--frames", type=int, default=600_000, help="env frames per run")
    parser.add_argument("--preset", choices=["atari", "atari-paper"], default="atari")
    parser.add_argument("--out", default="runs/benchmarks/atari_throughput.json")
    args = parser.parse_args()
    settings = {**PRESETS[args.preset], "env": "ALE/Pong-v5"}
    measure(
        name="atari_throughput",
        settings=settings,
        actor_counts=args.actors,
        frames=args.frames,
        out=args.out,
    )


if __name__ == "__main__":
    main()
