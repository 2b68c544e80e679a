"""The benchmark scripts' own logic (their measurements run outside the suite)."""

import json
import pathlib
import subprocess
import sys
import time

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "benchmarks"))

import _procs  # noqa: E402
import projection  # noqa: E402


@pytest.mark.launches
def test_an_exited_unreaped_process_is_gone_not_rays():
    """A zombie has no command line; counting it as Ray's moved all the actors' CPU there."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline, stat = time.monotonic() + 30, pathlib.Path(f"/proc/{child.pid}/stat")
        while stat.read_text().rsplit(") ", 1)[1][0] != "Z":  # not reaped: nothing waits yet
            assert time.monotonic() < deadline, "the child did not exit"
            time.sleep(0.05)
        assert pathlib.Path(f"/proc/{child.pid}/cmdline").read_bytes() == b""
        assert _procs.role(child.pid) == "gone"
        assert _procs.cpu_seconds(child.pid) is not None  # its last CPU reading is kept
    finally:
        child.wait()
    assert _procs.role(child.pid) == "gone"  # reaped: no /proc entry at all
    assert _procs.role(_procs.os.getpid()) == "ray"  # neither train nor a Ray actor


def test_projection_takes_the_side_that_saturates_first():
    profile = {
        "run": {
            "frames": 1_000_000,
            "cpu_s": {"actor": 20.0, "learner": 40.0},
            "cpu_s_startup": {"actor": 10.0, "learner": 15.0},
        }
    }
    actor_fps, learner_fps = projection.rates(profile)
    assert actor_fps == pytest.approx(100_000) and learner_fps == pytest.approx(40_000)
    rows = projection.project(actor_fps, learner_fps, 0.5, actors=[1, 4], devices=[1, 4])
    expected = {
        (1, 1): (40_000, "learner"),
        (1, 4): (80_000, "learner"),
        (4, 1): (40_000, "learner"),
        (4, 4): (80_000, "learner"),
    }
    rows += projection.project(10_000.0, learner_fps, 1.0, actors=[2], devices=[4])
    expected[(2, 4)] = (20_000, "actors")
    for n, k, _, _, got, side in rows:
        assert (float(got.replace(",", "")), side) == expected[(n, k)]


def test_train_flags_are_what_follows_the_double_dash():
    from _common import split_train_flags

    assert split_train_flags(["--seeds", "1", "--", "--passes", "1"]) == (
        ["--seeds", "1"],
        ["--passes", "1"],
    )
    assert split_train_flags(["--seeds", "1"]) == (["--seeds", "1"], [])
    assert split_train_flags(["--"]) == ([], [])


def _play(env_id: str, policy, episodes: int, seed: int = 0) -> np.ndarray:
    import gymnasium

    env = gymnasium.make(env_id)
    returns = []
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed + episode)
        total, done = 0.0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(policy(obs))
            total, done = total + reward, terminated or truncated
        returns.append(total)
    env.close()
    return np.asarray(returns)


def test_the_blackjack_optimum_is_what_its_policy_scores_in_gymnasiums_env():
    import optimal_returns

    def policy(obs):  # gymnasium's observation: (the hand's value, the dealer's card, usable ace)
        value, dealer_card, usable = obs
        return int(optimal_returns.blackjack_hits(value - 10 * usable, bool(usable), dealer_card))

    returns = _play("Blackjack-v1", policy, episodes=20_000)
    standard_error = returns.std() / np.sqrt(len(returns))
    assert abs(returns.mean() - optimal_returns.blackjack_optimum()) < 4 * standard_error
    # The DP is not vacuous: always sticking loses far more.
    assert _play("Blackjack-v1", lambda obs: 0, episodes=2_000).mean() < -0.1


def test_the_taxi_optimum_is_what_its_greedy_policy_scores_in_gymnasiums_env():
    import optimal_returns

    optimum, greedy = optimal_returns.tabular_optimum("Taxi-v4", 200)
    returns = _play("Taxi-v4", lambda obs: int(greedy[obs]), episodes=2_000)
    standard_error = returns.std() / np.sqrt(len(returns))
    assert abs(returns.mean() - optimum) < 4 * standard_error


def test_the_late_return_averages_the_reports_of_the_last_quarter_of_frames():
    import learning

    curve = [(100, -5.0), (700, 1.0), (750, 2.0), (900, 4.0), (1000, 6.0)]
    assert learning.late_return(curve, 1000) == pytest.approx(4.0)  # 750, 900 and 1000
    assert learning.late_return([(100, 1.0)], 1000) is None  # nothing reported that late


def test_a_threshold_counts_only_once_a_full_window_of_episodes_has_ended():
    import learning

    lucky_start = {"episode_return_mean": -43.0, "episodes": 1}  # CliffWalkingSlippery's first
    assert not learning.reaches(lucky_start, -75.0)
    assert not learning.reaches({"episode_return_mean": -70.0, "episodes": 99}, -75.0)
    assert learning.reaches({"episode_return_mean": -70.0, "episodes": 100}, -75.0)
    assert not learning.reaches({"episode_return_mean": -80.0, "episodes": 5000}, -75.0)
    assert not learning.reaches({"episode_return_mean": None, "episodes": 0}, -75.0)


# A run evaluated greedily, its figures those of `evaluate_run`: the --merge --evaluate test
# below (one evaluation fewer for the suite).
@pytest.mark.launches
def test_the_suite_records_a_run_that_never_ends_as_unfinished(tmp_path, monkeypatch):
    import learning
    from test_evaluation import saved_run

    monkeypatch.setenv("PYTHONPATH", str(pathlib.Path(__file__).resolve().parent))  # endless_env
    saved_run(tmp_path / "endless", env="endless_env:Endless-v0")
    monkeypatch.setattr(learning, "EVAL_FRAME_BUDGET", 1000)
    result = learning.evaluate(tmp_path / "endless")
    assert result["greedy_return"] is None
    assert "only 0 of 100 episodes ended within 1,000 frames" in result["greedy_unfinished"]
    assert learning._greedy(result) == "unfinished"


@pytest.mark.launches
def test_merge_with_evaluate_adds_the_greedy_figure_to_saved_runs_that_lack_it(
    tmp_path, monkeypatch, capsys
):
    import learning
    from test_evaluation import saved_run

    from impala_rep.run.evaluation import evaluate_run

    out = tmp_path / "learning"
    (out / "old").mkdir(parents=True)
    saved_run(out / "old" / "cartpole-s1", env="CartPole-v1")
    run = {
        "seed": 1,
        "frames_to_threshold": None,
        "seconds_to_threshold": None,
        "final_return": 20.0,
        "best_return": None,
        "frames": 1234,
        "seconds": 9.0,
        "curve": [(1234, 20.0)],
    }
    (out / "old.json").write_text(json.dumps({"results": {"cartpole": [run]}}))
    monkeypatch.setattr(
        sys,
        "argv",
        ["learning.py", "--merge", "old", "--evaluate", "--label", "new", "--out", str(out)],
    )
    learning.main()
    merged = json.loads((out / "new.json").read_text())["results"]["cartpole"][0]
    played = json.loads((out / "old" / "cartpole-s1" / "evaluation.json").read_text())
    assert merged["greedy_return"] == round(played["mean_return"], 4)
    assert len(played["returns"]) == learning.EVAL_EPISODES
    # The suite's greedy figures are those of the same checkpoint played in this process.
    expected = evaluate_run(str(out / "old" / "cartpole-s1"), episodes=learning.EVAL_EPISODES)
    assert {k: merged.get(k) for k in ("greedy_return", "greedy_std", "greedy_unfinished")} == {
        "greedy_return": round(expected.mean_return, 4),
        "greedy_std": round(expected.std_return, 4),
        "greedy_unfinished": None,
    }
    assert f"{merged['greedy_return']:.3g} ± " in capsys.readouterr().out  # the table's column


def test_a_taken_run_folder_is_refused_before_the_first_run(tmp_path, monkeypatch):
    """A label whose folder for a later task exists stops the suite before it runs anything,
    not halfway through."""
    import learning

    out = tmp_path / "learning"
    (out / "mine" / "acrobot-s1").mkdir(parents=True)
    ran = []
    monkeypatch.setattr(learning, "run_one", lambda *args: ran.append(args))
    monkeypatch.setattr(
        sys,
        "argv",
        ["learning.py", "--tasks", "cartpole", "acrobot", "--seeds", "1"]
        + ["--label", "mine", "--out", str(out), "--no-record"],
    )
    with pytest.raises(SystemExit, match="acrobot-s1 exists: choose another --label or remove it"):
        learning.main()
    assert ran == [] and not (out / "mine" / "cartpole-s1").exists()


def test_the_policy_cost_table_puts_the_reference_first_and_shows_each_cases_newest_figures(
    tmp_path,
):
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "docs"))
    from generate import policy_cost_section

    def record(task, policy_ratio, when, reference="pendulum"):
        """A record as `ledger.write_record` writes it (without its git calls: no process),
        dated a second apart."""
        folder = tmp_path / "policy_cost" / task
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{when}-{task}.json").write_text(
            json.dumps(
                {
                    "benchmark": "policy_cost",
                    "task": task,
                    "label": "defaults",
                    "seed": 0,
                    "date": f"2026-01-01T00:00:0{when}+00:00",
                    "code": {"commit": "0" * 40, "dirty": False},
                    "cpu": {"model": "a CPU", "cores": 2},
                    "settings": {"env": f"{task}-env", "policy": "p", "reference": reference},
                    "figures": {
                        "policy_us": 1.0,
                        "learner_us": 2.0,
                        "policy_us_ratio": policy_ratio,
                        "learner_us_ratio": 1.0,
                    },
                }
            )
        )

    record("lunarlander", 9.0, when=0, reference="cartpole")  # ratios to another reference
    record("halfcheetah", 1.75, when=1)
    record("pendulum", 1.0, when=2)
    record("halfcheetah", 1.25, when=3)  # a repeat at the same commit and label: the newest
    rows = [line for line in policy_cost_section(tmp_path).splitlines() if "-env |" in line]
    assert [row.split(" | ")[0] for row in rows] == ["| pendulum-env", "| halfcheetah-env"]
    assert "| 1.25× |" in rows[1] and "1.75" not in policy_cost_section(tmp_path)
