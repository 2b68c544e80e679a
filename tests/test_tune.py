"""`impala-rep tune`: the search space and the experiment checked before anything starts, and a
population trained, stopped, resumed and summed up through the command on Ray Tune."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from in_process_cli import refused_in_process

from impala_rep.config import TrainConfig
from impala_rep.run.tuning import Dimension, TuneSpec, check_spec, parse_dimension


@pytest.mark.parametrize(
    "text, dimension",
    [
        (
            "learning_rate=loguniform:1e-4,1e-2",
            Dimension("learning_rate", "loguniform", (1e-4, 1e-2)),
        ),
        ("entropy_cost=choice:0,0.01", Dimension("entropy_cost", "choice", (0.0, 0.01))),
        ("batch_size=grid:16,32", Dimension("batch_size", "grid", (16, 32))),
        (
            "hidden_sizes=grid:64,64;256,256",
            Dimension("hidden_sizes", "grid", ((64, 64), (256, 256))),
        ),
        ("use_lstm=choice:on,off", Dimension("use_lstm", "choice", (True, False))),
        (
            "clip_rho_threshold=choice:1.0,none",
            Dimension("clip_rho_threshold", "choice", (1.0, None)),
        ),
    ],
)
def test_a_space_is_read_with_each_settings_own_parser(text, dimension):
    assert parse_dimension(text) == dimension
    assert parse_dimension(dimension.text()) == dimension


@pytest.mark.parametrize(
    "text, message",
    [
        ("learning_rate", "expected KEY=KIND:VALUES"),
        ("no_such=grid:1,2", "no setting 'no_such'"),
        ("logdir=grid:a,b", "logdir says where a trial runs, not what it learns"),
        (
            "learning_rate=normal:0,1",
            "kind 'normal' is not one of grid, choice, uniform, loguniform",
        ),
        ("batch_size=grid:16,x", "expected a positive integer, got 'x'"),
        ("batch_size=uniform:16,32", "uniform takes LOW,HIGH of a number setting"),
        ("learning_rate=loguniform:0,1", "needs LOW < HIGH, LOW > 0"),
        ("learning_rate=uniform:0.1", "uniform takes LOW,HIGH of a number setting"),
        ("batch_size=grid:16,16", "a value is given twice"),
        ("discount=choice:0.9,2", "bad discount 2.0"),
    ],
)
def test_a_bad_space_is_named_with_what_is_allowed(text, message):
    with pytest.raises(ValueError, match="^bad --space") as err:
        parse_dimension(text)
    assert message in str(err.value)


def _spec(tmp_path, *space, **kwargs):
    return TuneSpec(
        space=tuple(parse_dimension(s) for s in space), out=str(tmp_path / "x"), **kwargs
    )


def test_an_experiment_that_cannot_run_is_refused_before_anything_is_written(tmp_path):
    base = TrainConfig()
    check_spec(_spec(tmp_path, "learning_rate=loguniform:1e-4,1e-2"), base)
    cases = [
        (_spec(tmp_path), base, "at least one --space"),
        (_spec(tmp_path, "network=choice:mlp,deep"), base, "network is locked on resume"),
        (_spec(tmp_path, "rnd_cost=choice:0,0.1"), base, "rnd_cost is on or off is locked"),
        (_spec(tmp_path, "batch_size=grid:16,32"), base, "use choice instead of grid"),
        (
            _spec(tmp_path, "learning_rate=choice:1e-3,1e-2", metric="eval_return_mean"),
            base,
            "only with --eval-every",
        ),
        (
            _spec(tmp_path, "learning_rate=choice:1e-3,1e-2", perturb_every=10**6),
            base,
            "must be below --total-frames",
        ),
        (
            _spec(tmp_path, "learning_rate=choice:1e-3,1e-2"),
            base.replace({"launcher": "local"}),
            "tune runs its trials on Ray",
        ),
    ]
    for spec, config, message in cases:
        with pytest.raises(ValueError) as err:
            check_spec(spec, config)
        assert message in str(err.value), str(err.value)
    # A sweep may search what a resume cannot change.
    check_spec(_spec(tmp_path, "network=choice:mlp,deep", scheduler="asha"), base)
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "old").write_text("")
    with pytest.raises(ValueError, match="is not empty"):
        check_spec(_spec(tmp_path, "learning_rate=choice:1e-3,1e-2"), base)
    assert not any((tmp_path / "x").glob("*.json"))


@pytest.mark.parametrize(
    "args, message",
    [
        (["--space", "learning_rate=choice:1e-3,1e-2"], "tune needs --out DIR"),
        (["--out", "OUT", "--space", "x=grid:1"], "bad --space 'x=grid:1': no setting 'x'"),
        (["--out", "OUT", "--space", "network=grid:mlp,deep"], "network is locked on resume"),
        (
            ["--out", "OUT", "--space", "learning_rate=choice:1e-3,1e-2", "--logdir", "L"],
            "bad --logdir: each trial runs in a directory of --out's",
        ),
        (["--resume", "OUT", "--population", "3"], "give no other flags (got --population)"),
    ],
)
def test_the_command_refuses_a_bad_experiment_in_one_line(args, message, tmp_path, capsys):
    args = [str(tmp_path / "out") if a == "OUT" else a for a in args]
    last = refused_in_process(["tune", *args], capsys)
    assert last.startswith("impala-rep") and message in last, last
    assert not (tmp_path / "out").exists()


def test_a_population_larger_than_the_cluster_can_place_is_refused(local_ray, tmp_path, capsys):
    # The session's Ray joined as a cluster of 4 CPUs: a PBT population trains together, and 5
    # members of one actor each cannot all be placed (Tune would run some and leave the rest
    # pending until the others end, which for PBT means never comparing them).
    address = local_ray.get_runtime_context().gcs_address
    args = ["--out", str(tmp_path / "out"), "--ray-address", address, "--num-actors", "1"]
    args += ["--population", "5", "--space", "learning_rate=loguniform:1e-3,1e-2"]
    last = refused_in_process(["tune", *args], capsys)
    assert last.startswith("impala-rep: error: bad --population 5: a PBT population"), last
    assert "the Ray cluster has 4; use a smaller population or fewer actors" in last, last
    assert not (tmp_path / "out").exists()


def test_tunes_resume_is_described_as_resuming_an_experiment(capsys):
    from impala_rep.run.cli import main

    with pytest.raises(SystemExit) as stop:
        main(["tune", "--help"])
    assert stop.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--resume DIR continue the interrupted experiment in DIR (its --out)" in text, text
    assert "continue the run in LOGDIR" not in text


def test_train_takes_a_config_files_settings_as_its_defaults(tmp_path, capsys):
    from impala_rep.run.cli import config_from_args, parse_args

    saved = TrainConfig.from_keys({"learning_rate": 0.0123, "logdir": "/somewhere", "seed": 7})
    path = tmp_path / "best.json"
    path.write_text(json.dumps(saved.to_json()))
    config = config_from_args(parse_args(["train", "--config", str(path), "--seed", "3"]))
    assert config.optimizer.learning_rate == 0.0123 and config.run.seed == 3
    assert config.run.logdir is None  # a new run names its own directory
    path.write_text('{"optimizer": {"no_such": 1}}')
    last = refused_in_process(["train", "--config", str(path)], capsys)
    assert "bad --config" in last and "optimizer.no_such" in last, last
    last = refused_in_process(["train", "--config", str(path), "--resume", "x"], capsys)
    assert "--config cannot be combined with --resume" in last, last


TUNE = [
    "--space", "learning_rate=loguniform:1e-3,2e-2",
    "--population", "2",
    "--perturb-every", "20000",
    "--env", "CartPole-v1",
    "--num-actors", "1",
    "--envs-per-actor", "16",
    "--total-frames", "150000",
    "--checkpoint-every", "0.5",
    "--report-every", "0.5",
]  # fmt: skip


def _tune(*args, **kwargs):
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return subprocess.Popen(
        [sys.executable, "-m", "impala_rep", "tune", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(env, TF_CPP_MIN_LOG_LEVEL="2"),
        **kwargs,
    )


@pytest.mark.launches
def test_a_population_stopped_by_ctrl_c_resumes_and_ends_with_its_table_figure_and_best(tmp_path):
    """PBT on Ray Tune through the command: stopped once its members have reported a
    checkpoint (SIGINT, as Ctrl-C), it says how to continue; `--resume` finishes it, each
    member's run continuing from its checkpoint; then the results table, the figure and the
    best member's settings as a file `train --config` reads."""
    out = tmp_path / "pbt"
    proc = _tune("--out", str(out), *TUNE)
    deadline = time.monotonic() + 240
    while not list(out.glob("trial-*/checkpoint_*")) and time.monotonic() < deadline:
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 1, stderr[-3000:]
    assert f"continue the experiment with: impala-rep tune --resume {out}" in stderr
    assert "ERROR" not in stderr and "Traceback" not in stderr, stderr[-3000:]

    proc = _tune("--resume", str(out))
    stdout, stderr = proc.communicate(timeout=400)
    assert proc.returncode == 0, stderr[-3000:]
    assert "Traceback" not in stderr and "ERROR" not in stderr, stderr[-3000:]
    # The resumed experiment reports its progress as the first did: the end of each trial
    # that was unfinished (one at least: the stop came at a member's first checkpoint).
    assert "tune: trial " in stdout and " done; " in stdout, stdout[-3000:]
    trials = sorted(out.glob("trial-*"))
    assert len(trials) == 2
    # A member stopped mid-run continued from its checkpoint (the stop comes once a member
    # has reported one; a fast one may have ended before it).
    assert any("resumed from" in (t / "console.log").read_text() for t in trials)
    for trial in trials:
        records = [json.loads(line) for line in (trial / "run" / "metrics.jsonl").open()]
        assert records[-1]["frames"] >= 150_000
    # Every exploit Tune logged: the member restarted from a checkpoint, with its settings.
    for policy in out.glob("pbt_policy_*.txt"):
        for line in policy.read_text().splitlines():
            _, _, _, _, donor_config, new_config = json.loads(line)
            ratio = new_config["learning_rate"] / donor_config["learning_rate"]
            resampled = 1e-3 <= new_config["learning_rate"] <= 2e-2
            assert ratio == pytest.approx(1.2) or ratio == pytest.approx(1 / 1.2) or resampled
    table = (out / "results.md").read_text().splitlines()
    assert table[0].startswith("| trial | learning_rate | frames | last episode_return_mean")
    assert len(table) == 2 + 2
    assert table[2] in stdout and "best: " in stdout
    best = TrainConfig.from_json(json.loads((out / "best-config.json").read_text()))
    best_trial = table[2].split(" | ")[0].lstrip("| ")
    final = json.loads((out / f"trial-{best_trial}" / "run" / "config.json").read_text())
    assert best.optimizer.learning_rate == final["optimizer"]["learning_rate"]
    assert best.run.logdir is None and best.env.id == "CartPole-v1"
    assert (out / "population.png").stat().st_size > 1000
