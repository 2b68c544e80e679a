"""`impala-rep plot LOGDIR [LOGDIR ...]`: PNG plots of a run's metrics.jsonl, or one figure
comparing several runs, seeds of one setting as their mean and range."""

from __future__ import annotations

import json
import os
import pathlib
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from impala_rep.run.run_log import read_metrics

__all__ = [
    "plot_run",
    "plot_runs",
    "group_runs",
    "mean_and_range",
    "cumulative_wall_s",
    "evaluation_series",
]


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


def _series(records: list[dict], key: str) -> list[float]:
    """`key` of every record, NaN where it is missing or None (no return before an episode
    ended): what matplotlib leaves as a gap."""
    return [r.get(key) if r.get(key) is not None else float("nan") for r in records]


def evaluation_series(records: list[dict]) -> tuple[list[float], list[float], list[float]]:
    """The greedy evaluations of `--eval-every` in `records`: the frames their weights had
    trained on, the run's wall time when they were recorded, their mean returns."""
    wall = cumulative_wall_s(records)
    kept = [
        (r["eval_frames"], w, r["eval_return_mean"])
        for r, w in zip(records, wall, strict=True)
        if r.get("eval_return_mean") is not None
    ]
    frames, walls, returns = zip(*kept) if kept else ((), (), ())
    return list(frames), list(walls), list(returns)


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
        return _series(records, key)

    frames, wall = series("frames"), cumulative_wall_s(records)
    eval_frames, eval_wall, eval_returns = evaluation_series(records)
    fig, (by_frames, by_time) = plt.subplots(1, 2, figsize=(11, 4))
    for ax, x, eval_x in ((by_frames, frames, eval_frames), (by_time, wall, eval_wall)):
        ax.plot(x, series("episode_return_mean"), label="actors (last 100 episodes, sampled)")
        if eval_returns:
            ax.plot(eval_x, eval_returns, "o-", label="evaluation (greedy)")
            ax.legend()
        ax.grid(alpha=0.3)
    ylabel = "mean return" if eval_returns else "mean return (last 100 episodes)"
    by_frames.set(xlabel="env frames", ylabel=ylabel, title="Return vs frames")
    by_time.set(
        xlabel="wall time (s, resumed sessions added up)",
        ylabel=ylabel,
        title="Return vs wall time",
    )
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


# Settings that tell nothing about what a run learns (where it ran, how it reported and kept
# checkpoints, how it is supervised): runs differing only in these are seeds of one setting.
_NOT_A_SETTING = (
    "run.seed",
    "run.logdir",
    "run.launcher",
    "run.ray_address",
    "run.report_every_s",
    "run.verbose",
    "run.learner_process",
    "run.eval_every",
    "run.eval_episodes",
    "learner.checkpoint_every_s",
    "learner.xla_cache",
    "learner.loss_grad_norms",
    "actors.max_actor_failures",
    "actors.actor_timeout_s",
)


def settings_of(logdir: str | os.PathLike) -> dict[str, Any]:
    """A run's config.json as `{"section.key": value}`; {} for a run without one."""
    path = pathlib.Path(logdir) / "config.json"
    if not path.is_file():
        return {}
    flat = {}
    for section, values in json.loads(path.read_text()).items():
        if isinstance(values, dict):
            flat.update({f"{section}.{key}": value for key, value in values.items()})
        else:  # the flat config.json of earlier versions
            flat[section] = values
    return flat


def group_runs(logdirs: Sequence[str]) -> dict[str, list[str]]:
    """`logdirs` grouped by setting, `{label: [logdir, ...]}` in the order given: runs that
    differ only in their seed form one group, labelled by the settings that tell the groups
    apart (`key=value`, keys without their section), or by the env where none does."""
    settings = [
        {k: v for k, v in settings_of(d).items() if k not in _NOT_A_SETTING} for d in logdirs
    ]
    keys = sorted({k for s in settings for k in s})
    differing = [k for k in keys if len({json.dumps(s.get(k)) for s in settings}) > 1]
    groups: dict[str, list[str]] = {}
    for logdir, setting in zip(logdirs, settings, strict=True):
        parts = [f"{k.rsplit('.', 1)[-1]}={_short(setting.get(k))}" for k in differing]
        label = ", ".join(parts) or str(setting.get("env.id", pathlib.Path(logdir).name))
        groups.setdefault(label, []).append(logdir)
    return groups


def _short(value: Any) -> Any:
    """A file path's last part (an --agent or --env file), anything else as it is."""
    return value.rsplit("/", 1)[-1] if isinstance(value, str) else value


def mean_and_range(
    curves: Sequence[tuple[Sequence[float], Sequence[float]]], grid: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Curves `(x, y)` (x increasing; NaN where y is unknown) on the points of `grid`, linearly
    interpolated: their mean, minimum and maximum at each point. A point beyond a curve's own
    x, or where it has no value yet, counts no value for it (NaN where no curve has one)."""
    values = np.full((len(curves), len(grid)), np.nan)
    for row, (x, y) in zip(values, curves, strict=True):
        x, y = np.asarray(x, float), np.asarray(y, float)
        known = ~np.isnan(y)
        if known.sum() == 0:
            continue
        inside = (grid >= x[known][0]) & (grid <= x[known][-1])
        row[inside] = np.interp(grid[inside], x[known], y[known])
    with warnings.catch_warnings():  # all-NaN columns: NaN is the answer there
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(values, 0), np.nanmin(values, 0), np.nanmax(values, 0)


def plot_runs(logdirs: Sequence[str], *, out: str | os.PathLike) -> pathlib.Path:
    """One figure of several runs, `out` (a PNG): mean return vs frames and vs wall time, each
    setting (`group_runs`) a line, the mean over its seeds with their range shaded. ValueError,
    with nothing written, for a run with no records or an `out` whose folder is not there."""
    out = pathlib.Path(out)
    if not out.parent.is_dir():
        raise ValueError(f"bad --out {str(out)!r}: no folder {str(out.parent)!r} to write it in")
    if out.is_dir():
        raise ValueError(f"bad --out {str(out)!r}: a folder; name the PNG file to write")
    runs = {}
    for logdir in logdirs:
        records = read_metrics(logdir)
        if not records:
            raise ValueError(f"{logdir}/metrics.jsonl has no records yet")
        runs[logdir] = records
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_frames, by_time) = plt.subplots(1, 2, figsize=(12, 4.5))
    for label, members in group_runs(list(logdirs)).items():
        returns = [_series(runs[d], "episode_return_mean") for d in members]
        seeds = f" ({len(members)} seeds)" if len(members) > 1 else ""
        for ax, xs in (
            (by_frames, [[r["frames"] for r in runs[d]] for d in members]),
            (by_time, [cumulative_wall_s(runs[d]) for d in members]),
        ):
            # Up to where the shortest seed ends: past it, a mean of fewer seeds would jump.
            grid = np.linspace(0, min(x[-1] for x in xs), 200)
            mean, low, high = mean_and_range(list(zip(xs, returns, strict=True)), grid)
            (line,) = ax.plot(grid, mean, label=label + seeds)
            if len(members) > 1:
                ax.fill_between(grid, low, high, color=line.get_color(), alpha=0.2)
        evaluations = [evaluation_series(runs[d]) for d in members]
        if all(returns for _, _, returns in evaluations):
            for ax, column in ((by_frames, 0), (by_time, 1)):
                curves = [(e[column], e[2]) for e in evaluations]
                grid = np.linspace(0, min(x[-1] for x, _ in curves), 200)
                mean, _, _ = mean_and_range(curves, grid)
                ax.plot(grid, mean, "--", color=line.get_color(), label=f"{label}{seeds}, greedy")
    # Solid: the actors' last 100 episodes (sampled); dashed: greedy evaluations, where
    # every run of a setting has them (--eval-every).
    by_frames.set(xlabel="env frames", ylabel="mean return (last 100 episodes)")
    by_frames.set_title("Return vs frames")
    by_time.set(xlabel="wall time (s, resumed sessions added up)", ylabel="mean return")
    by_time.set_title("Return vs wall time")
    for ax in (by_frames, by_time):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    # Under both axes: a label names every setting that differs, and can be long.
    handles, labels = by_frames.get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), fontsize="small")
    fig.savefig(out, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return out
