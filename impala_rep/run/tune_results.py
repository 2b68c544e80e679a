"""What `impala-rep tune` leaves beside Ray Tune's own files: a results table (results.md,
also printed), one figure of every member's curve with the best one's lineage
(population.png), and the best trial's settings as a config file `impala-rep train --config`
takes (best-config.json)."""

from __future__ import annotations

import json
import math
import pathlib
from typing import Any, TextIO

from impala_rep.config import TrainConfig
from impala_rep.run.tuning import BEST_FILE, FIGURE_FILE, RESULTS_FILE, TuneSpec, best_config

__all__ = ["write_results", "trial_rows", "lineage"]


def trial_rows(results, spec: TuneSpec) -> list[dict[str, Any]]:
    """One row per trial: its name, its final searched values, frames, last and best metric,
    the exploits it made (PBT) and its error, best last metric first."""
    rows = []
    for result in results:
        frame = result.metrics_dataframe
        metric = spec.metric
        values = [] if frame is None or metric not in frame else frame[metric].dropna().tolist()
        rows.append(
            {
                "trial": _name(result),
                **{d.key: result.config.get(d.key) for d in spec.space},
                "frames": int(result.metrics.get("frames", 0)) if result.metrics else 0,
                "last": values[-1] if values else None,
                "best": max(values) if values else None,
                "error": None if result.error is None else str(result.error).splitlines()[0],
            }
        )
    rows.sort(key=lambda r: -math.inf if r["last"] is None else r["last"], reverse=True)
    return rows


def _name(result) -> str:
    """The trial's id (its directory is trial-ID)."""
    return pathlib.Path(result.path).name.removeprefix("trial-") if result.path else "?"


def lineage(root: pathlib.Path, trial_id: str) -> list[tuple[int, int]]:
    """The exploits PBT made for `trial_id`, in order: (its Tune iteration then, the index
    of the member whose checkpoint it took), from Tune's pbt_policy_ID.txt (a line per exploit:
    its tag, the other's tag "INDEX_...", their iterations, their configs)."""
    path = root / f"pbt_policy_{trial_id}.txt"
    if not path.is_file():
        return []
    events = []
    for line in path.read_text().splitlines():
        _, donor_tag, iteration, *_ = json.loads(line)
        events.append((int(iteration), int(str(donor_tag).split("_", 1)[0])))
    return events


def write_results(root: pathlib.Path, results, spec: TuneSpec, base: TrainConfig, *, out: TextIO):
    rows = trial_rows(results, spec)
    keys = [d.key for d in spec.space]
    header = ["trial", *keys, "frames", f"last {spec.metric}", "best", "error"]
    table = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cells = [row["trial"], *(_cell(row[k]) for k in keys), f"{row['frames']:,}"]
        cells += [_cell(row["last"]), _cell(row["best"]), row["error"] or ""]
        table.append("| " + " | ".join(cells) + " |")
    text = "\n".join(table) + "\n"
    (root / RESULTS_FILE).write_text(text)
    print("\n" + text, file=out)
    _figure(root, results, spec)
    if any(row["last"] is not None for row in rows):
        best = best_config(results, spec, base)
        (root / BEST_FILE).write_text(json.dumps(best.to_json(), indent=2, sort_keys=True) + "\n")
        print(
            f"best: {rows[0]['trial']} ({spec.metric} {rows[0]['last']:.1f}); its settings: "
            f"{root / BEST_FILE} (impala-rep train --config {root / BEST_FILE})",
            file=out,
        )
    print(f"table: {root / RESULTS_FILE}; figure: {root / FIGURE_FILE}", file=out)


def _cell(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _figure(root: pathlib.Path, results, spec: TuneSpec) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    best = None
    try:
        best = results.get_best_result(metric=spec.metric, mode="max", scope="last")
    except RuntimeError:  # no trial reported the metric
        pass
    for result in results:
        frame = result.metrics_dataframe
        if frame is None or spec.metric not in frame:
            continue
        frame = frame.dropna(subset=[spec.metric])
        is_best = best is not None and result.path == best.path
        ax.plot(
            frame["frames"],
            frame[spec.metric],
            lw=2.5 if is_best else 1.0,
            alpha=1.0 if is_best else 0.6,
            label=f"{_name(result)} (best)" if is_best else _name(result),
        )
        if is_best:
            prefix = _name(result).rsplit("_", 1)[0]
            at = dict(zip(frame["training_iteration"], frame["frames"], strict=True))
            for iteration, donor in lineage(root, _name(result)):
                if iteration in at:
                    ax.axvline(at[iteration], color="k", lw=0.8, ls=":")
                    ax.annotate(
                        f"copied {prefix}_{donor:05d}",
                        (at[iteration], ax.get_ylim()[0]),
                        rotation=90,
                        fontsize=7,
                    )
    ax.set(xlabel="env frames", ylabel=spec.metric, title=f"{spec.scheduler}: every member")
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(root / FIGURE_FILE, dpi=100)
    plt.close(fig)
