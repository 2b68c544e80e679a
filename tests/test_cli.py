"""The impala-rep command: misuse exits 2 with a one-line error; the demo runs."""

import subprocess
import sys

import pytest


def _cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "impala_rep", *args], capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.parametrize(
    "args, message",
    [
        (["demo", "--devices", "cpu:0"], "bad device spec 'cpu:0'"),
        (["demo", "--devices", "banana"], "expected \"auto\", \"cpu\", \"cpu:N\""),
        (["demo", "--steps", "0"], "expected a positive integer, got 0"),
        (["demo", "--batch-size", "x"], "expected a positive integer, got 'x'"),
        (["demo", "--devices", "cpu:4", "--batch-size", "6"], "6 does not split evenly over 4 replicas"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        ([], "required: COMMAND"),
    ],
)
def test_misuse_exits_2_with_one_line_error(args, message):
    proc = _cli(*args, timeout=60)
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("impala-rep") and message in last, proc.stderr


def test_demo_trains_replicated_and_matches_one_device():
    proc = _cli("demo", "--devices", "cpu:2", "--steps", "12", "--batch-size", "32")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "num_replicas=2" in proc.stdout
    last_line = proc.stdout.strip().splitlines()[-1]
    assert last_line.startswith("  max |weight difference| after 12 steps:")
    assert float(last_line.rsplit(" ", 1)[-1]) < 1e-4


@pytest.mark.parametrize(
    "args, message",
    [
        (["train", "--env", "NoSuchEnv-v0"], "unknown environment id 'NoSuchEnv-v0'"),
        (["train", "--num-actors", "0"], "expected a positive integer, got 0"),
        (["train", "--learner-devices", "cpu:2", "--batch-size", "5"],
         "bad batch_size 5: must split evenly over the 2 learner replicas"),
        (["train", "--learner-devices", "gpu:x"], "bad device spec 'gpu:x'"),
        (["train", "--learner-hosts", "0"], "argument --learner-hosts: expected a positive integer, got 0"),
        (["train", "--learner-hosts", "2", "--learner-devices", "cpu:2"],
         "bad learner_devices 'cpu:2': with learner_hosts 2 each host uses its GPUs or one CPU"),
        (["train", "--discount", "1.5"], "bad discount 1.5: must be in [0, 1]"),
        (["train", "--logdir", "{tmp}/file.txt/run"], "cannot be created"),
        (["plot", "/"], "/ is not a run directory"),
        (["train", "--sticky-actions", "1"], "argument --sticky-actions: expected a probability in [0, 1), got 1"),
        (["train", "--sticky-actions", "0.2"], "bad sticky_actions 0.2: sticky actions apply to Atari"),
        (["train", "--episodic-life", "--logdir", "{tmp}/run"],
         "bad episodic_life True: a life loss ending the episode applies to Atari ids"),
    ],
)
def test_train_and_plot_misuse_exit_2(args, message, tmp_path):
    (tmp_path / "file.txt").write_text("not a directory")
    proc = _cli(*[a.replace("{tmp}", str(tmp_path)) for a in args], timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("impala-rep") and message in last, proc.stderr[-2000:]


def test_train_refuses_non_empty_logdir_and_writes_nothing(tmp_path):
    (tmp_path / "keep.txt").write_text("x")
    proc = _cli("train", "--logdir", str(tmp_path), timeout=120)
    assert proc.returncode == 2
    assert "is not empty" in proc.stderr.strip().splitlines()[-1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]


def test_atari_presets_select_the_paper_settings_and_flags_override():
    import dataclasses

    from impala_rep.cli import config_from_args, parse_args

    paper = config_from_args(parse_args(["train", "--env", "ALE/Pong-v5", "--preset", "atari-paper"]))
    assert (paper.learning_rate, paper.unroll_length, paper.batch_size, paper.discount) == (6e-4, 20, 32, 0.99)
    assert (paper.baseline_cost, paper.entropy_cost, paper.rmsprop_epsilon, paper.max_grad_norm) == (0.5, 0.01, 0.01, 40.0)
    assert (paper.rmsprop_decay, paper.network, paper.reward_clipping) == (0.99, "shallow", "abs_one")
    # `atari` differs from the paper in exactly the two settings config.py explains.
    atari = config_from_args(parse_args(["train", "--env", "ALE/Pong-v5", "--preset", "atari"]))
    differ = {f.name for f in dataclasses.fields(paper) if getattr(paper, f.name) != getattr(atari, f.name)}
    assert differ == {"batch_size", "rmsprop_epsilon"}
    assert (atari.batch_size, atari.rmsprop_epsilon) == (8, 1e-4)
    override = config_from_args(parse_args(["train", "--preset", "atari", "--learning-rate", "1e-3",
                                         "--network", "deep", "--use-lstm"]))
    assert override.learning_rate == 1e-3 and override.network == "deep" and override.use_lstm
    assert override.unroll_length == 20
    cartpole = config_from_args(parse_args(["train"]))
    assert cartpole.learning_rate == 5e-3 and cartpole.network == "auto"


def test_env_option_misuse_writes_nothing(tmp_path):
    proc = _cli("train", "--env", "MinAtar/Breakout-v1", "--episodic-life", "--logdir",
                str(tmp_path / "run"), timeout=120)
    assert proc.returncode == 2
    assert "not 'MinAtar/Breakout-v1'" in proc.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "run").exists()


def test_sticky_actions_and_episodic_life_flags_reach_the_config():
    from impala_rep.cli import config_from_args, parse_args

    default = config_from_args(parse_args(["train", "--env", "ALE/Pong-v5"]))
    assert default.sticky_actions is None and default.episodic_life is False  # the env's own
    chosen = config_from_args(parse_args(["train", "--env", "ALE/Pong-v5", "--preset", "atari",
                                          "--sticky-actions", "0", "--episodic-life"]))
    assert chosen.sticky_actions == 0.0 and chosen.episodic_life is True
    minatar = config_from_args(parse_args(["train", "--env", "MinAtar/Breakout-v1", "--sticky-actions", "0.25"]))
    assert minatar.sticky_actions == 0.25


def _fake_run(path, **changes):
    """A run directory as `train` leaves it, minus the (TensorFlow) checkpoint data: config.json
    and the checkpoint index, which is what `--resume` checks before anything starts."""
    import json

    from impala_rep.config import TrainConfig

    (path / "checkpoints").mkdir(parents=True)
    (path / "checkpoints" / "checkpoint").write_text('model_checkpoint_path: "ckpt-7"\n')
    (path / "config.json").write_text(json.dumps(TrainConfig(logdir=str(path), **changes).to_json()))
    return path


@pytest.mark.parametrize(
    "setup, args, message",
    [
        ("none", [], "cannot resume '{run}': not a directory"),
        ("empty", [], "not a run directory (no config.json"),
        ("no-checkpoint", [], "it holds no checkpoint"),
        ("run", ["--env", "Acrobot-v1"], "cannot resume with env 'Acrobot-v1': the checkpoint was "
                                         "trained with env 'CartPole-v1'"),
        ("run", ["--network", "shallow"], "cannot resume with network 'shallow'"),
        ("run", ["--use-lstm"], "cannot resume with use_lstm True"),
        ("run", ["--preset", "atari"], "--preset cannot be combined with --resume"),
        ("run", ["--logdir", "{tmp}/other"], "differs from --resume"),
        ("run", ["--num-actors", "0"], "expected a positive integer, got 0"),
        ("run", ["--learner-devices", "cpu:3"], "bad batch_size 32: must split evenly over the 3"),
    ],
)
def test_resume_misuse_exits_2_and_writes_nothing(tmp_path, setup, args, message):
    run = tmp_path / "run"
    if setup == "empty":
        run.mkdir()
    elif setup == "no-checkpoint":
        run.mkdir()
        (run / "config.json").write_text("{}")
    elif setup == "run":
        _fake_run(run)
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    argv = [a.replace("{tmp}", str(tmp_path)) for a in ["train", "--resume", str(run), *args]]
    proc = _cli(*argv, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("impala-rep") and message.replace("{run}", str(run)) in last, last
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before


def test_resume_keeps_saved_settings_and_applies_given_flags(tmp_path):
    from impala_rep.cli import explicit_args, parse_args, resume_config_from_args

    run = _fake_run(tmp_path / "run", num_actors=3, learning_rate=1e-3, seed=9)
    argv = ["train", "--resume", str(run), "--num-actors", "1", "--learner-devices", "cpu:2"]
    config = resume_config_from_args(parse_args(argv), explicit_args(argv))
    assert (config.num_actors, config.learner_devices) == (1, "cpu:2")  # given: changed
    assert (config.learning_rate, config.seed) == (1e-3, 9)  # not given: as saved, not the defaults
    assert config.logdir == str(run)
