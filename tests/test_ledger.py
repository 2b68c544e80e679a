"""The results ledger (benchmarks/ledger.py) and the results the docs render from it."""

import json
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "docs"))

import ledger  # noqa: E402


def _write(
    results,
    *,
    task="cartpole",
    label="defaults",
    seed=1,
    frames=100_000,
    seconds=20.0,
    extra=(),
    greedy=500.0,
):
    return ledger.write_record(
        benchmark="learning",
        task=task,
        label=label,
        seed=seed,
        command=[str(ROOT / ".venv" / "bin" / "impala-rep"), "train", "--seed", str(seed)],
        figures={
            "frames_to_threshold": frames,
            "seconds_to_threshold": seconds,
            "final_return": 490.0,
            "greedy_return": greedy,
            "greedy_std": 0.0,
            "frames": 1_000_000,
            "seconds": 40.0,
        },
        curve=[(0, 10.0), (frames or 1_000_000, 480.0)],
        settings={
            "env": "CartPole-v1",
            "threshold": 475.0,
            "total_frames": 1_000_000,
            "extra_flags": list(extra),
        },
        results=results,
    )


@pytest.mark.launches
def test_a_record_says_what_ran_where_and_what_it_measured(tmp_path):
    path = _write(tmp_path / "results")
    record = json.loads(path.read_text())
    assert path.parent == tmp_path / "results" / "learning" / "cartpole"
    assert record["command"][0] == ".venv/bin/impala-rep"  # relative to the checkout
    assert len(record["code"]["commit"]) == 40 and isinstance(record["code"]["dirty"], bool)
    assert record["versions"]["tensorflow"] and record["versions"]["python"]
    assert record["cpu"]["cores"] >= 1 and record["cpu"]["model"]
    assert record["figures"]["frames_to_threshold"] == 100_000
    assert record["curve"] == [[0, 10.0], [100_000, 480.0]]
    assert record["date"].endswith("+00:00")


@pytest.mark.launches
def test_the_newest_batch_is_one_invocations_seeds(tmp_path):
    results = tmp_path / "results"
    old = _write(results, label="old", seed=1, frames=900_000)
    record = json.loads(old.read_text())  # an earlier invocation's
    old.write_text(json.dumps({**record, "date": "2000-01-01T00:00:00+00:00"}))
    for seed, frames in ((1, 100_000), (2, 300_000), (3, None)):
        _write(results, label="new", seed=seed, frames=frames, seconds=frames and frames / 10_000)
    batch = ledger.newest_batch(ledger.load_records("learning", results))
    assert [r["seed"] for r in batch] == [1, 2, 3] and {r["label"] for r in batch} == {"new"}
    spread = ledger.spread(r["figures"]["frames_to_threshold"] for r in batch)
    assert spread == {"median": 200_000, "low": 100_000, "high": 300_000, "count": 2}
    assert ledger.spread([None, None]) is None


@pytest.mark.launches
def test_the_results_table_takes_default_runs_only(tmp_path):
    import generate

    results = tmp_path / "results"
    for seed in (1, 2, 3):
        _write(results, seed=seed, frames=100_000 * seed, seconds=10.0 * seed)
    _write(results, label="passes1", seed=1, frames=5_000, extra=("--passes", "1"))  # not defaults
    rows = generate.learning_rows(results)
    assert [row["task"] for row in rows] == ["cartpole"]
    row = rows[0]
    assert row["seeds"] == [1, 2, 3] and row["reached"] == 3
    assert row["frames"]["median"] == 200_000
    table = generate.results_table(rows)
    assert "| CartPole-v1 (475) | 3 | 200k (100k to 300k) | 20 (10 to 30) | 500 |" in table


@pytest.mark.parametrize("task", ["cartpole", "pong"])
def test_every_task_has_an_anchor_with_a_source(task):
    anchors = ledger.load_anchors()
    assert anchors[task]["figure"] and anchors[task]["source"]
