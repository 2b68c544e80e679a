"""Plots of a run, including one resumed after a stop, and of several runs in one figure."""

import json

import numpy as np
import pytest

from impala_rep.run.plotting import (
    cumulative_wall_s,
    evaluation_series,
    group_runs,
    mean_and_range,
    plot_run,
    plot_runs,
)


def test_resumed_sessions_add_up_on_the_wall_time_axis():
    records = [{"wall_s": w} for w in (1.0, 3.0, 10.0, 2.0, 5.0, 0.5, 4.0)]
    assert cumulative_wall_s(records) == [1.0, 3.0, 10.0, 12.0, 15.0, 15.5, 19.0]


def test_plot_run_writes_both_pngs_for_a_resumed_run(tmp_path):
    lines = []
    for session in range(2):
        for i in range(5):
            lines.append(
                {
                    "frames": 1000 * (5 * session + i),
                    "wall_s": 2.0 * i,
                    "episode_return_mean": float(10 * session + i) if i else None,
                    "env_fps": 500.0,
                    "learner_fps": 500.0,
                }
            )
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    paths = plot_run(str(tmp_path))
    assert [p.name for p in paths] == ["return.png", "throughput.png"]
    assert all(p.stat().st_size > 1000 for p in paths)


def _fake_run(path, *, seed, lr, returns, seconds=1.0):
    """A run folder as `train` leaves it, its config.json and metrics.jsonl only."""
    path.mkdir()
    config = {"env": {"id": "CartPole-v1"}, "run": {"seed": seed, "logdir": str(path)}}
    config["optimizer"] = {"learning_rate": lr}
    (path / "config.json").write_text(json.dumps(config))
    records = [
        {"frames": 1000 * i, "wall_s": seconds * i, "episode_return_mean": r}
        for i, r in enumerate(returns)
    ]
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def test_runs_differing_only_in_seed_are_one_setting_labelled_by_what_differs(tmp_path):
    a1 = _fake_run(tmp_path / "a1", seed=1, lr=0.01, returns=[None, 1.0])
    a2 = _fake_run(tmp_path / "a2", seed=2, lr=0.01, returns=[None, 2.0])
    b1 = _fake_run(tmp_path / "b1", seed=1, lr=0.001, returns=[None, 3.0])
    assert group_runs([a1, b1, a2]) == {"learning_rate=0.01": [a1, a2], "learning_rate=0.001": [b1]}
    assert group_runs([a1, a2]) == {"CartPole-v1": [a1, a2]}


def test_seeds_are_drawn_as_their_mean_and_range_on_a_common_grid():
    grid = np.array([0.0, 1.0, 2.0, 3.0])
    curves = [([0.0, 2.0], [0.0, 4.0]), ([0.0, 1.0, 3.0], [np.nan, 1.0, 3.0])]
    mean, low, high = mean_and_range(curves, grid)
    # Curve 1 at 0, 1, 2 (nothing past its x=2): 0, 2, 4. Curve 2 from its first value (x=1):
    # 1, 2, 3 at 1, 2, 3.
    np.testing.assert_allclose(mean, [0.0, 1.5, 3.0, 3.0])
    np.testing.assert_allclose(low, [0.0, 1.0, 2.0, 3.0])
    np.testing.assert_allclose(high, [0.0, 2.0, 4.0, 3.0])


def test_several_runs_are_one_figure_and_a_run_without_records_is_refused(tmp_path):
    runs = [
        _fake_run(tmp_path / f"r{seed}", seed=seed, lr=0.01, returns=[None, 1.0, seed * 2.0])
        for seed in (1, 2, 3)
    ]
    out = plot_runs(runs, out=tmp_path / "compared.png")
    assert out.stat().st_size > 1000
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "metrics.jsonl").write_text("")
    with pytest.raises(ValueError, match="has no records yet"):
        plot_runs([*runs, str(empty)], out=tmp_path / "other.png")
    with pytest.raises(ValueError, match="^bad --out .*: no folder"):
        plot_runs(runs, out=tmp_path / "missing" / "x.png")
    assert not (tmp_path / "other.png").exists()


def test_evaluations_are_drawn_at_the_frames_of_their_weights_and_do_not_make_a_setting(tmp_path):
    """`--eval-every` records carry the frames the evaluated weights had trained on, which
    are earlier than the record's own; a run with evaluations and one without are seeds of
    one setting (evaluating does not change what a run learns)."""
    with_eval = _fake_run(tmp_path / "a", seed=1, lr=0.01, returns=[None, 1.0, 2.0, 3.0])
    records = [json.loads(line) for line in open(f"{with_eval}/metrics.jsonl")]
    records[2].update(eval_frames=1500, eval_return_mean=7.0, eval_return_std=0.0)
    records[3].update(eval_frames=3000, eval_return_mean=None, eval_episodes=0)  # none ended
    (tmp_path / "a" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    config = json.loads((tmp_path / "a" / "config.json").read_text())
    config["run"]["eval_every"] = 1000
    (tmp_path / "a" / "config.json").write_text(json.dumps(config))
    assert evaluation_series(records) == ([1500], [2.0], [7.0])
    without = _fake_run(tmp_path / "b", seed=2, lr=0.01, returns=[None, 1.0, 2.0, 3.0])
    assert list(group_runs([with_eval, without])) == ["CartPole-v1"]
    assert all(p.stat().st_size > 1000 for p in plot_run(with_eval))
    assert plot_runs([with_eval, without], out=tmp_path / "both.png").stat().st_size > 1000
