"""A quiet console: a CPU-only `train` prints its own lines and nothing that looks like an error.

Run for real through the command: under the local launcher here, with `--verbose`
TensorFlow's own lines come back; under Ray, on test_action_spaces.py's Pendulum run (one
run fewer for the suite).
"""

import os
import pathlib
import subprocess
import sys

import pytest

TESTS_DIR = pathlib.Path(__file__).parent

# The run's own lines: its "impala-rep: ..." messages, the progress line and the summary table.
OWN = ("impala-rep", "[", "  ")


def _train(*args, env=None, cwd=None):
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "impala_rep",
            "train",
            "--total-frames",
            "8000",
            "--envs-per-actor",
            "16",
            "--batch-size",
            "16",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=cwd,
    )


def foreign_lines(output: str) -> list[str]:
    """The lines of `output` that are not the run's own."""
    return [line for line in output.splitlines() if line.strip() and not line.startswith(OWN)]


@pytest.mark.launches
def test_a_run_whose_episodes_never_end_says_so_once_and_the_time_limit_flag_ends_them(tmp_path):
    """An env with no time limit and no terminal state (CliffWalking-v1 is one until its
    policy finds the goal) never ends an episode, so the return stays n/a. After 1,000 steps
    in each env the console says why, once; with --max-episode-steps episodes are truncated
    there and a return appears (tests/endless_env.py pays 1 a step: exactly the limit).
    The first run's console is all its own (the quiet console under --launcher local); the
    second is --verbose: TensorFlow's own lines come back on stderr."""
    common = (
        "--env",
        "endless_env:Endless-v0",
        "--launcher",
        "local",
        "--num-actors",
        "1",
        "--envs-per-actor",
        "4",
        "--batch-size",
        "4",
    )
    # TensorFlow's log level as in a user's shell: unset.
    as_a_user = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    proc = _train(
        *common,
        "--total-frames",
        "6000",
        "--logdir",
        str(tmp_path / "open"),
        env=as_a_user,
        cwd=TESTS_DIR,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert foreign_lines(proc.stdout) == []
    assert foreign_lines(proc.stderr) == []
    hints = [line for line in proc.stdout.splitlines() if "no episode has ended" in line]
    assert len(hints) == 1, proc.stdout
    assert "--max-episode-steps N ends episodes after N steps" in hints[0]
    assert "final mean return (last 100)   n/a" in proc.stdout

    proc = _train(
        *common,
        "--total-frames",
        "4000",
        "--max-episode-steps",
        "100",
        "--verbose",
        "--logdir",
        str(tmp_path / "limited"),
        cwd=TESTS_DIR,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "no episode has ended" not in proc.stdout
    assert "final mean return (last 100)   100.0" in proc.stdout, proc.stdout
    foreign = foreign_lines(proc.stderr)
    assert any("cuda" in line.lower() or "onednn" in line.lower() for line in foreign), proc.stderr


def test_a_report_in_which_nothing_moved_is_not_shown_until_30_s_pass():
    """The learner tracing its first step left a "0 f/s" line right after the first one: a
    line only when frames moved, or when 30 s passed without one (the run is alive)."""
    import io

    from impala_rep.run.monitor import _Progress

    out = io.StringIO()
    progress = _Progress(out, total_frames=10_000)

    def report(wall_s, frames, produced):
        progress.update(
            {
                "wall_s": wall_s,
                "frames": frames,
                "frames_produced": produced,
                "env_fps": 0.0,
                "learner_fps": 0.0,
                "episode_return_mean": None,
                "policy_lag_mean": None,
            }
        )
        return out.getvalue().count("\n")

    assert report(2.0, 640, 640) == 1
    assert report(4.0, 640, 640) == 1  # nothing moved: no line
    assert report(6.0, 640, 1280) == 2  # the actors produced: a line
    assert report(20.0, 640, 1280) == 2
    assert report(36.5, 640, 1280) == 3  # 30 s without a line: one anyway
    assert report(38.5, 1280, 1280) == 4


def test_the_last_report_past_the_total_reads_as_done():
    """The learner consumes whole batches, so a run of 20,000 frames ends at 20,480: its
    last line said "[102.4%] ... ETA -0s"."""
    import io

    from impala_rep.run.monitor import _Progress

    out = io.StringIO()
    _Progress(out, total_frames=20_000).update(
        {
            "wall_s": 9.0,
            "frames": 20_480,
            "frames_produced": 20_480,
            "env_fps": 7_000.0,
            "learner_fps": 6_500.0,
            "episode_return_mean": 43.0,
            "policy_lag_mean": 128.0,
        }
    )
    line = out.getvalue()
    assert line.startswith("[100.0%] frames     20,480/20,000") and line.rstrip().endswith(
        "ETA     0s"
    )


def test_the_summary_gives_a_resumed_runs_speed_of_the_frames_its_command_trained():
    from impala_rep.config import TrainConfig
    from impala_rep.run.monitor import TrainResult, _summary_table

    config = TrainConfig.from_keys({"env": "CartPole-v1"})

    def rows(frames_at_start):
        result = TrainResult(
            frames=50_000,
            wall_s=10.0,
            learner_steps=1,
            episodes=1,
            episode_return_mean=None,
            records=[],
            frames_at_start=frames_at_start,
        )
        table = _summary_table(result, config)
        return dict(line.strip().split("  ", 1) for line in table.splitlines())

    fresh, resumed = rows(0), rows(40_000)
    assert fresh["frames / s (overall)"].strip() == "5,000"
    assert resumed["frames / s (this command)"].strip() == "1,000"  # 10k frames in 10 s
    assert resumed["wall time (this command)"].strip() == "10.0 s"
    assert resumed["env frames (learner-consumed)"].strip() == "50,000"
