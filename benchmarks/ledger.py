"""The results ledger: one JSON record per benchmark run in `benchmarks/results/`.

A record says what ran (the command, the code's commit, the package versions, the CPU) and
what it measured, so every figure the README and the docs show can be traced to a run and
rerun. `write_record` is called by the benchmark scripts as each run ends; the docs
generator (`docs/generate.py`) renders its tables with `load_records`, `newest_batch` and
`spread`.

Published figures to read ours against live in `benchmarks/anchors.json`, each with its
source.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import pathlib
import platform
import statistics
import subprocess
from collections.abc import Iterable
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
ANCHORS = ROOT / "benchmarks" / "anchors.json"

# The packages whose versions decide a run's numbers.
_PACKAGES = ("impala-rep", "tensorflow", "ray", "gymnasium", "numpy", "ale-py", "minatar")


def code_version(root: pathlib.Path = ROOT) -> dict[str, Any]:
    """The commit the run's code is at, and whether the work tree differed from it."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    return {
        "commit": git("rev-parse", "HEAD") or None,
        "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
    }


def package_versions() -> dict[str, str | None]:
    versions = {}
    for name in _PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return {"python": platform.python_version(), **versions}


def cpu() -> dict[str, Any]:
    """The CPU model, the cores this process may use, and the memory."""
    model = None
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {
        "model": model or platform.processor() or None,
        "cores": len(os.sched_getaffinity(0)),
        "memory_gib": round(memory, 1),
    }


def record_name(record: dict[str, Any]) -> str:
    """A record's file name: unique per run, sorted by time within a benchmark and task."""
    stamp = record["date"].replace(":", "").replace("-", "")[:15]
    commit = (record["code"]["commit"] or "nocommit")[:10]
    return f"{stamp}-{commit}-{record['label']}-s{record['seed']}.json"


def write_record(
    *,
    benchmark: str,
    task: str,
    label: str,
    seed: int,
    command: list[str],
    figures: dict[str, Any],
    curve: list[tuple[int, float]] | None = None,
    settings: dict[str, Any] | None = None,
    results: pathlib.Path = RESULTS,
) -> pathlib.Path:
    """Writes one run's record to `results/BENCHMARK/TASK/` and returns its path.

    `command` is the command line as run (paths made relative to the checkout), `figures`
    the run's measurements, `curve` (frames, mean return) pairs, `settings` whatever else
    defines the run (a threshold, the train flags)."""
    record = {
        "benchmark": benchmark,
        "task": task,
        "label": label,
        "seed": seed,
        # timezone.utc, not its upper-case alias: tests/test_docs.py bans that word in source.
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),  # noqa: UP017
        "command": [_relative(part) for part in command],
        "code": code_version(),
        "versions": package_versions(),
        "cpu": cpu(),
        "settings": settings or {},
        "figures": figures,
        "curve": [[int(frames), value] for frames, value in curve or ()],
    }
    path = results / benchmark / task / record_name(record)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path


def _relative(part: str | os.PathLike) -> str:
    text = str(part)
    prefix = str(ROOT) + os.sep
    return text[len(prefix) :] if text.startswith(prefix) else text


def load_records(benchmark: str, results: pathlib.Path = RESULTS) -> list[dict[str, Any]]:
    """Every record of `benchmark`, oldest first, each with its `path` relative to the checkout."""
    records = []
    for path in sorted((results / benchmark).glob("*/*.json")):
        record = json.loads(path.read_text())
        record["path"] = _relative(path)
        records.append(record)
    return sorted(records, key=lambda r: r["date"])


def load_anchors(path: pathlib.Path = ANCHORS) -> dict[str, dict[str, Any]]:
    return json.loads(path.read_text())["anchors"]


def newest_batch(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs of the newest label among `records` (one invocation: every seed it ran)."""
    records = list(records)
    if not records:
        return []
    newest = max(records, key=lambda r: r["date"])
    return sorted(
        (
            r
            for r in records
            if r["label"] == newest["label"] and r["code"]["commit"] == newest["code"]["commit"]
        ),
        key=lambda r: r["seed"],
    )


def spread(values: Iterable[float | None]) -> dict[str, Any] | None:
    """Median, low and high of the values that are not None, and how many there were."""
    known = [v for v in values if v is not None]
    if not known:
        return None
    return {
        "median": statistics.median(known),
        "low": min(known),
        "high": max(known),
        "count": len(known),
    }
