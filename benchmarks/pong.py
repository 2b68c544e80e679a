r"""A long, resumable Pong run with the `atari` preset: mean return vs env frames.

    .venv/bin/python benchmarks/pong.py --logdir runs/pong [--total-frames 20000000] \
        [-- TRAIN FLAGS]
    .venv/bin/python benchmarks/pong.py --compare runs/pong runs/other --out comparison.png

Starts `impala-rep train --env ALE/Pong-v5 --preset atari --num-actors 2` in
LOGDIR (with any `impala-rep train` flags given after `--`, e.g.
`-- --batch-size 8 --rmsprop-epsilon 1e-4`), or, if LOGDIR already holds a
checkpoint, resumes it (`--resume`, the run's saved settings): stop
it at any time with Ctrl-C (a checkpoint is saved) and run the same command
again to continue. At the end (or on Ctrl-C) it prints the mean return per
million frames and draws LOGDIR/return.png. Target: +18 within 20M env frames
(the IMPALA paper's shallow network reaches it); on 2 CPU cores this takes
days, so run it as far as the machine allows. Needs the atari extra.
"""

from __future__ import annotations

import argparse
import json
import pathlib

import _common  # noqa: F401  (quiets TensorFlow before it is imported)
from _common import table

from impala_rep.run.cli import main as cli_main
from impala_rep.run.plotting import cumulative_wall_s, plot_run
from impala_rep.run.run_log import read_metrics


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


def plot_comparison(logdirs: list[str], out: str) -> pathlib.Path:
    """Mean return vs env frames of several runs in one PNG, each labelled with its settings,
    titled with their env ids."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from impala_rep.config import TrainConfig

    fig, ax = plt.subplots(figsize=(7, 4.5))
    envs = []  # the title names the runs' own envs, not "Pong" whatever they are
    for logdir in logdirs:
        config = TrainConfig.from_json(
            json.loads((pathlib.Path(logdir) / "config.json").read_text())
        )
        envs += [config.env.id] if config.env.id not in envs else []
        points = [
            (r["frames"], r["episode_return_mean"])
            for r in read_metrics(logdir)
            if r["episode_return_mean"] is not None
        ]
        optimizer = config.optimizer
        # The optimizer's own epsilon: the other one is not used by the run.
        epsilon = (
            optimizer.rmsprop_epsilon
            if optimizer.optimizer == "rmsprop"
            else optimizer.adam_epsilon
        )
        label = (
            f"{config.env.id}, {config.actors.num_actors}x{config.actors.envs_per_actor} envs, "
            f"B={config.learner.batch_size}, {config.learner.passes} pass(es), "
            f"{optimizer.optimizer} lr {optimizer.learning_rate:g} eps {epsilon:g}, "
            f"seed {config.run.seed}"
        )
        ax.plot([f / 1e6 for f, _ in points], [m for _, m in points], label=label)
    ax.set(
        xlabel="env frames (millions)",
        ylabel="mean return (last 100 episodes)",
        title=", ".join(envs),
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = pathlib.Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logdir", default="runs/pong")
    parser.add_argument("--total-frames", type=int, default=20_000_000)
    parser.add_argument("--num-actors", type=int, default=2)
    parser.add_argument(
        "train_flags",
        nargs="*",
        metavar="-- TRAIN FLAGS",
        help="more `impala-rep train` flags for a new run (after `--`)",
    )
    parser.add_argument(
        "--compare",
        nargs="+",
        metavar="LOGDIR",
        help="train nothing: draw these runs' return vs frames into --out",
    )
    parser.add_argument("--out", default="runs/pong-comparison.png")
    args = parser.parse_args()
    if args.compare:
        print(plot_comparison(args.compare, args.out))
        return 0
    if (pathlib.Path(args.logdir) / "checkpoints" / "checkpoint").is_file():
        argv = ["train", "--resume", args.logdir, "--total-frames", str(args.total_frames)]
    else:
        argv = [
            "train",
            "--env",
            "ALE/Pong-v5",
            "--preset",
            "atari",
            "--num-actors",
            str(args.num_actors),
            "--total-frames",
            str(args.total_frames),
            "--checkpoint-every",
            "300",
            "--logdir",
            args.logdir,
            *args.train_flags,
        ]
    print("impala-rep " + " ".join(argv))
    code = cli_main(argv)
    print()
    print(
        table(
            ["env frames", "mean return (last 100 episodes)", "wall h (all sessions)"],
            returns_by_million(args.logdir),
        )
    )
    for path in plot_run(args.logdir):
        print(path)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
