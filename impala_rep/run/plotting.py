"""`impala-rep plot LOGDIR`: PNG plots of a run's metrics.jsonl."""

from __future__ import annotations

import pathlib

from impala_rep.run.run_log import read_metrics

__all__ = ["plot_run", "cumulative_wall_s"]


def cumulative_wall_s(records: list[dict]) -> list[float]:
    """Wall seconds over the whole run: each resumed session's `wall_s` starts again from 0,
    so a drop starts a new session, which continues from where the previous one ended."""
    total, offset, previous = [], 0.0, None
    for record in records:
        wall = record["wall_s"]
        if previous is not None and wall < previous:
            offset += previous
        total.append(offset + wall)
        previous = wall
    return total


def plot_run(logdir: str) -> list[pathlib.Path]:
    """Writes return.png (vs frames and vs wall time) and throughput.png; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")  # files only; no display needed
    import matplotlib.pyplot as plt

    records = read_metrics(logdir)
    if not records:
        raise ValueError(f"{logdir}/metrics.jsonl has no records yet")
    out = pathlib.Path(logdir)

    def series(key):
        return [r.get(key) if r.get(key) is not None else float("nan") for r in records]

    frames, wall = series("frames"), cumulative_wall_s(records)
    fig, (by_frames, by_time) = plt.subplots(1, 2, figsize=(11, 4))
    by_frames.plot(frames, series("episode_return_mean"))
    by_frames.set(
        xlabel="env frames", ylabel="mean return (last 100 episodes)", title="Return vs frames"
    )
    by_time.plot(wall, series("episode_return_mean"))
    by_time.set(
        xlabel="wall time (s, resumed sessions added up)",
        ylabel="mean return (last 100 episodes)",
        title="Return vs wall time",
    )
    for ax in (by_frames, by_time):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return_png = out / "return.png"
    fig.savefig(return_png, dpi=100)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(wall, series("env_fps"), label="actors (env frames/s)")
    ax.plot(wall, series("learner_fps"), label="learner (frames/s)")
    ax.set(xlabel="wall time (s)", ylabel="frames / s", title="Throughput")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    throughput_png = out / "throughput.png"
    fig.savefig(throughput_png, dpi=100)
    plt.close(fig)
    return [return_png, throughput_png]
