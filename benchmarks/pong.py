"""A long, resumable Pong run with the paper's settings: mean return vs env frames.

    .venv/bin/python benchmarks/pong.py --logdir runs/pong [--total-frames 20000000]

Starts `impala-rep train --env ALE/Pong-v5 --preset atari --num-actors 2` in
LOGDIR, or, if LOGDIR already holds a checkpoint, resumes it (`--resume`): stop
it at any time with Ctrl-C (a checkpoint is saved) and run the same command
again to continue. At the end (or on Ctrl-C) it prints the mean return per
million frames and draws LOGDIR/return.png. Target: +18 within 20M env frames
(the IMPALA paper's shallow network reaches it); on 2 CPU cores this takes
days, so run it as far as the machine allows. Needs the atari extra.
"""

from __future__ import annotations

import argparse
import pathlib

import _common  # noqa: F401  (quiets TensorFlow before it is imported)
from _common import table

from impala_rep.cli import main as cli_main
from impala_rep.plotting import cumulative_wall_s, plot_run
from impala_rep.run_log import read_metrics


def returns_by_million(logdir: str) -> list[tuple[str, str, str]]:
    """(frames bucket, last mean return in it, wall hours so far) per million env frames."""
    rows, bucket = [], None
    records = read_metrics(logdir)
    for record, wall_s in zip(records, cumulative_wall_s(records)):
        if record["episode_return_mean"] is None:
            continue
        current = record["frames"] // 1_000_000
        if current != bucket:
            rows.append([f"{current}M", None, None])
            bucket = current
        rows[-1][1] = f"{record['episode_return_mean']:.1f}"
        rows[-1][2] = f"{wall_s / 3600:.2f}"
    return [tuple(r) for r in rows]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logdir", default="runs/pong")
    parser.add_argument("--total-frames", type=int, default=20_000_000)
    parser.add_argument("--num-actors", type=int, default=2)
    args = parser.parse_args()
    if (pathlib.Path(args.logdir) / "checkpoints" / "checkpoint").is_file():
        argv = ["train", "--resume", args.logdir, "--total-frames", str(args.total_frames)]
    else:
        argv = ["train", "--env", "ALE/Pong-v5", "--preset", "atari", "--num-actors",
                str(args.num_actors), "--total-frames", str(args.total_frames),
                "--checkpoint-every", "300", "--logdir", args.logdir]
    print("impala-rep " + " ".join(argv))
    code = cli_main(argv)
    print()
    print(table(["env frames", "mean return (last 100 episodes)", "wall h (all sessions)"],
                returns_by_million(args.logdir)))
    for path in plot_run(args.logdir):
        print(path)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
