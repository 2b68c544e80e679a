"""Plots of a run, including one resumed after a stop."""

import json

from impala_rep.run.plotting import cumulative_wall_s, plot_run


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
