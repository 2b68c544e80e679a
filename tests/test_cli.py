"""The impala-rep command: misuse exits 2 with a one-line error; the demo runs."""

import functools
import pathlib
import subprocess
import sys

import pytest

# The auto rules' test imports a user's loss, which imports TensorFlow in this process.
# Imported here, at collection, as the other files whose tests use it do: its first import
# runs `uname` (platform, for h5py), which `--fast` would take for a test's launch.
import tensorflow  # noqa: F401
from in_process_cli import refused_in_process


def _cli(*args, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "impala_rep", *args], capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["demo", "--devices", "cpu:0"], "bad device spec 'cpu:0'"),
        (["demo", "--devices", "banana"], 'expected "auto", "cpu", "cpu:N"'),
        (["demo", "--steps", "0"], "expected a positive integer, got 0"),
        (["demo", "--batch-size", "x"], "expected a positive integer, got 'x'"),
        (
            ["demo", "--devices", "cpu:4", "--batch-size", "6"],
            "6 does not split evenly over 4 replicas",
        ),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        ([], "required: COMMAND"),
    ],
)
@pytest.mark.launches
def test_misuse_exits_2_with_one_line_error(args, message):
    proc = _cli(*args, timeout=60)
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("impala-rep") and message in last, proc.stderr


@pytest.mark.launches
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
        (
            ["train", "--learner-devices", "cpu:2", "--batch-size", "5"],
            "bad batch_size 5: must split evenly over the 2 learner replicas",
        ),
        (["train", "--learner-devices", "gpu:x"], "bad device spec 'gpu:x'"),
        (
            ["train", "--learner-hosts", "0"],
            "argument --learner-hosts: expected a positive integer, got 0",
        ),
        (
            ["train", "--learner-hosts", "2", "--learner-devices", "cpu:2"],
            "bad learner_devices 'cpu:2': with learner_hosts 2 each host uses its GPUs or one CPU",
        ),
        (["train", "--discount", "1.5"], "bad discount 1.5: must be in [0, 1]"),
        (["train", "--logdir", "{tmp}/file.txt/run"], "cannot be created"),
        (["plot", "/"], "/ is not a run directory"),
        (
            ["plot", "/", "--out", "{tmp}/missing/x.png"],
            "bad --out '{tmp}/missing/x.png': no folder",
        ),
        (
            ["train", "--sticky-actions", "1"],
            "argument --sticky-actions: expected a probability in [0, 1), got 1",
        ),
        (
            ["train", "--sticky-actions", "0.2"],
            "bad sticky_actions 0.2: sticky actions apply to Atari",
        ),
        (
            ["train", "--episodic-life", "--logdir", "{tmp}/run"],
            "bad episodic_life True: a life loss ending the episode applies to Atari ids",
        ),
        (
            ["train", "--max-episode-steps", "0"],
            "argument --max-episode-steps: expected a positive integer, got 0",
        ),
        (
            [
                "train",
                "--env",
                "MinAtar/Breakout-v1",
                "--max-episode-steps",
                "100",
                "--logdir",
                "{tmp}/run",
            ],
            "bad max_episode_steps 100: a time limit applies to gymnasium's own ids, not the "
            "Atari or MinAtar id 'MinAtar/Breakout-v1'",
        ),
        (
            ["train", "--hidden-sizes", "64,x"],
            "argument --hidden-sizes: expected comma-separated positive integers such as 64,64, "
            "got '64,x'",
        ),
        (
            ["train", "--max-grad-norm", "off"],
            "argument --max-grad-norm: expected a number or none, got 'off'",
        ),
        (["train", "--lambda", "1.5"], "bad lambda 1.5: must be in [0, 1]"),
        (
            ["train", "--launcher", "local", "--ray-address", "auto"],
            "bad ray_address 'auto': the local launcher starts no Ray",
        ),
        (
            ["train", "--launcher", "local", "--learner-process", "ray"],
            "bad learner_process 'ray': the local launcher runs the learner in this process",
        ),
        (["train", "--learner-process", "gpu"], "argument --learner-process: invalid choice"),
        (["train", "--report-every", "0"], "bad report_every 0.0: must be a positive number"),
        (["train", "--preset", "pong"], "argument --preset: invalid choice: 'pong'"),
        (["train", "--rnd-cost", "-1"], "bad rnd_cost -1.0: must be >= 0"),
        (["train", "--popart-step-size", "0"], "bad popart_step_size 0.0: must be in (0, 1]"),
        (
            ["train", "--env", "MinAtar/Breakout-v1", "--rnd-cost", "1", "--logdir", "{tmp}/run"],
            "bad rnd_cost 1.0: the novelty bonus needs vector observations, got shape (10, 10, 4)",
        ),
    ],
)
def test_train_and_plot_misuse_exit_2(args, message, tmp_path, capsys):
    (tmp_path / "file.txt").write_text("not a directory")
    last = refused_in_process([a.replace("{tmp}", str(tmp_path)) for a in args], capsys)
    message = message.replace("{tmp}", str(tmp_path))
    assert last.startswith("impala-rep") and message in last, last
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.txt"]  # nothing written


@pytest.mark.launches
def test_the_installed_command_refuses_bad_input_in_one_line(tmp_path):
    """The cases above call `main` in-process; here the console script itself, in a new process."""
    proc = subprocess.run(
        [
            str(pathlib.Path(sys.executable).with_name("impala-rep")),
            "train",
            "--discount",
            "1.5",
            "--logdir",
            str(tmp_path / "run"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [
        "usage: impala-rep [-h] COMMAND ...",
        "impala-rep: error: bad discount 1.5: must be in [0, 1]",
    ]
    assert not (tmp_path / "run").exists()


@pytest.mark.launches
def test_train_refuses_non_empty_logdir_and_writes_nothing(tmp_path):
    (tmp_path / "keep.txt").write_text("x")
    proc = _cli("train", "--logdir", str(tmp_path), timeout=120)
    assert proc.returncode == 2
    assert "is not empty" in proc.stderr.strip().splitlines()[-1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]


def test_atari_presets_select_the_paper_settings_and_flags_override():
    from impala_rep.config import config_fields
    from impala_rep.run.cli import config_from_args, parse_args

    paper = config_from_args(
        parse_args(["train", "--env", "ALE/Pong-v5", "--preset", "atari-paper"])
    )
    assert (
        paper.optimizer.learning_rate,
        paper.actors.unroll_length,
        paper.learner.batch_size,
        paper.loss.discount,
    ) == (6e-4, 20, 32, 0.99)
    assert (
        paper.loss.baseline_cost,
        paper.loss.entropy_cost,
        paper.optimizer.rmsprop_epsilon,
        paper.optimizer.max_grad_norm,
    ) == (0.5, 0.01, 0.01, 40.0)
    assert (paper.optimizer.rmsprop_decay, paper.agent.network, paper.loss.reward_clipping) == (
        0.99,
        "shallow",
        "abs_one",
    )
    # The paper's learner, whatever the defaults add (the KL term among them).
    assert (
        paper.learner.passes,
        paper.loss.surrogate_clip,
        paper.loss.kl_cost,
        paper.loss.rnd_cost,
    ) == (1, None, 0.0, 0.0)
    # `atari` differs from the paper in exactly the two settings presets.py explains.
    atari = config_from_args(parse_args(["train", "--env", "ALE/Pong-v5", "--preset", "atari"]))
    differ = {f.key for f in config_fields() if paper.get(f.key) != atari.get(f.key)}
    assert differ == {"batch_size", "rmsprop_epsilon"}
    assert (atari.learner.batch_size, atari.optimizer.rmsprop_epsilon) == (8, 1e-4)
    override = config_from_args(
        parse_args(
            [
                "train",
                "--preset",
                "atari",
                "--learning-rate",
                "1e-3",
                "--network",
                "deep",
                "--use-lstm",
            ]
        )
    )
    assert override.optimizer.learning_rate == 1e-3
    assert override.agent.network == "deep" and override.agent.use_lstm
    assert override.actors.unroll_length == 20
    cartpole = config_from_args(parse_args(["train"]))
    assert cartpole.optimizer.learning_rate == 5e-3 and cartpole.agent.network == "auto"


@pytest.mark.launches
def test_env_option_misuse_writes_nothing(tmp_path):
    proc = _cli(
        "train",
        "--env",
        "MinAtar/Breakout-v1",
        "--episodic-life",
        "--logdir",
        str(tmp_path / "run"),
        timeout=120,
    )
    assert proc.returncode == 2
    assert "not 'MinAtar/Breakout-v1'" in proc.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "run").exists()


def test_sticky_actions_and_episodic_life_flags_reach_the_config():
    from impala_rep.run.cli import config_from_args, parse_args

    default = config_from_args(parse_args(["train", "--env", "ALE/Pong-v5"]))
    assert (
        default.env.sticky_actions is None and default.env.episodic_life is False
    )  # the env's own
    chosen = config_from_args(
        parse_args(
            [
                "train",
                "--env",
                "ALE/Pong-v5",
                "--preset",
                "atari",
                "--sticky-actions",
                "0",
                "--episodic-life",
            ]
        )
    )
    assert chosen.env.sticky_actions == 0.0 and chosen.env.episodic_life is True
    minatar = config_from_args(
        parse_args(["train", "--env", "MinAtar/Breakout-v1", "--sticky-actions", "0.25"])
    )
    assert minatar.env.sticky_actions == 0.25


@pytest.mark.launches
def test_a_minatar_id_trains_for_the_minatar_papers_frames_unless_told_otherwise():
    from impala_rep.run.cli import config_from_args, parse_args

    def frames(*argv):
        return config_from_args(parse_args(["train", *argv])).run.total_frames

    assert frames("--env", "MinAtar/Breakout-v1") == frames("--env=MinAtar/Asterix-v1") == 5_000_000
    assert frames("--env", "MinAtar/Breakout-v1", "--total-frames", "300000") == 300_000
    assert frames("--env", "MinAtar/Breakout-v1", "--preset", "atari") == 50_000_000  # the preset's
    assert frames() == frames("--env", "Acrobot-v1") == 1_000_000
    help_text = _cli("train", "--env", "MinAtar/Breakout-v1", "--help", timeout=60).stdout
    assert "(default: 5000000)" in " ".join(help_text.split())


def _fake_run(path, **changes):
    """A run directory as `train` leaves it, minus the (TensorFlow) checkpoint data: config.json
    and the checkpoint index, which is what `--resume` checks before anything starts."""
    import json

    from impala_rep.config import TrainConfig
    from impala_rep.config.auto import resolve_auto_settings

    (path / "checkpoints").mkdir(parents=True)
    (path / "checkpoints" / "checkpoint").write_text('model_checkpoint_path: "ckpt-7"\n')
    # Its automatic settings made concrete, as train writes them (CartPole's 4-vectors).
    config = resolve_auto_settings(
        TrainConfig.from_keys({"logdir": str(path), **changes}), (4,), continuous_actions=False
    )
    (path / "config.json").write_text(json.dumps(config.to_json()))
    return path


@pytest.mark.parametrize(
    "setup, args, message",
    [
        ("none", [], "cannot resume '{run}': not a directory"),
        ("empty", [], "not a run directory (no config.json"),
        ("no-checkpoint", [], "it holds no checkpoint"),
        (
            "run",
            ["--env", "Acrobot-v1"],
            "cannot resume with env 'Acrobot-v1': the checkpoint was "
            "trained with env 'CartPole-v1'",
        ),
        ("run", ["--network", "shallow"], "cannot resume with network 'shallow'"),
        ("run", ["--use-lstm"], "cannot resume with use_lstm True"),
        (
            "run",
            ["--hidden-sizes", "32"],
            "cannot resume with hidden_sizes (32,): the checkpoint was "
            "trained with hidden_sizes (64, 64)",
        ),
        (
            "run",
            ["--optimizer", "adam"],
            "cannot resume with optimizer 'adam': the checkpoint was "
            "trained with optimizer 'rmsprop'",
        ),
        (
            "run",
            ["--rnd-cost", "0"],
            "cannot resume with rnd_cost 0.0: the checkpoint was "
            "trained with rnd_cost 10.0, and the novelty bonus cannot",
        ),
        (
            "run",
            ["--popart"],
            "cannot resume with popart True: the checkpoint was trained with popart False",
        ),
        ("run", ["--preset", "atari"], "--preset cannot be combined with --resume"),
        ("run", ["--logdir", "{tmp}/other"], "differs from --resume"),
        ("run", ["--num-actors", "0"], "expected a positive integer, got 0"),
        ("run", ["--learner-devices", "cpu:3"], "bad batch_size 32: must split evenly over the 3"),
    ],
)
def test_resume_misuse_exits_2_and_writes_nothing(tmp_path, setup, args, message, capsys):
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
    last = refused_in_process(argv, capsys)
    assert last.startswith("impala-rep") and message.replace("{run}", str(run)) in last, last
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before


def test_resume_keeps_saved_settings_and_applies_given_flags(tmp_path):
    from impala_rep.run.cli import explicit_args, parse_args, resume_config_from_args

    run = _fake_run(tmp_path / "run", num_actors=3, learning_rate=1e-3, seed=9)
    argv = ["train", "--resume", str(run), "--num-actors", "1", "--learner-devices", "cpu:2"]
    config = resume_config_from_args(parse_args(argv), explicit_args(argv))
    assert (config.actors.num_actors, config.learner.devices) == (1, "cpu:2")  # given: changed
    # not given: as saved, not the defaults
    assert (config.optimizer.learning_rate, config.run.seed) == (1e-3, 9)
    assert config.run.logdir == str(run)


# --- resume on the grouped config ----------------------------------------------------

# A config.json as versions before the grouped config wrote it: flat, with the
# old names checkpoint_every_s and report_every_s.
_LEGACY_CONFIG = {
    "env": "CartPole-v1",
    "num_actors": 3,
    "envs_per_actor": 8,
    "unroll_length": 10,
    "batch_size": 4,
    "learner_devices": "cpu",
    "learner_hosts": 1,
    "total_frames": 20000,
    "seed": 5,
    "logdir": "/old/place",
    "ray_address": None,
    "learning_rate": 0.001,
    "entropy_cost": 0.02,
    "baseline_cost": 0.5,
    "discount": 0.98,
    "clip_rho_threshold": 1.0,
    "clip_pg_rho_threshold": 1.0,
    "rmsprop_decay": 0.99,
    "rmsprop_epsilon": 0.01,
    "max_grad_norm": 40.0,
    "reward_clipping": "abs_one",
    "hidden_sizes": [32, 32],
    "network": "auto",
    "use_lstm": False,
    "sticky_actions": None,
    "episodic_life": False,
    "queue_capacity": 2,
    "report_every_s": 5.0,
    "checkpoint_every_s": 300.0,
    "max_actor_failures": 7,
    "agent": None,
    "loss": None,
}


def _legacy_run(path):
    import json

    (path / "checkpoints").mkdir(parents=True)
    (path / "checkpoints" / "checkpoint").write_text('model_checkpoint_path: "ckpt-7"\n')
    (path / "config.json").write_text(json.dumps(_LEGACY_CONFIG))
    return path


def test_resume_reads_the_nested_config_json(tmp_path):
    import json

    from impala_rep.config import TrainConfig
    from impala_rep.config.auto import resolve_auto_settings
    from impala_rep.run.resume import load_run_config

    run = _fake_run(
        tmp_path / "run",
        num_actors=3,
        hidden_sizes=(16,),
        max_grad_norm=None,
        launcher="local",
        **{"lambda": 0.9},
    )
    saved = json.loads((run / "config.json").read_text())
    assert saved["agent"]["hidden_sizes"] == [16] and saved["loss"]["lambda_"] == 0.9  # nested
    assert load_run_config(str(run)) == resolve_auto_settings(
        TrainConfig.from_keys(
            {
                "logdir": str(run),
                "num_actors": 3,
                "hidden_sizes": (16,),
                "lambda": 0.9,
                "max_grad_norm": None,
                "launcher": "local",
            }
        ),
        (4,),
        continuous_actions=False,
    )


def test_resume_reads_the_legacy_flat_config_json_and_applies_flags(tmp_path):
    from impala_rep.run.cli import explicit_args, parse_args, resume_config_from_args

    run = _legacy_run(tmp_path / "run")
    argv = ["train", "--resume", str(run), "--num-actors", "1", "--checkpoint-every", "60"]
    config = resume_config_from_args(parse_args(argv), explicit_args(argv))
    assert config.actors.num_actors == 1 and config.learner.checkpoint_every_s == 60.0  # given
    assert config.run.report_every_s == 5.0  # the old report_every_s, as saved
    assert (
        config.actors.envs_per_actor,
        config.learner.batch_size,
        config.learner.queue_capacity,
    ) == (8, 4, 2)
    assert (config.optimizer.learning_rate, config.loss.entropy_cost, config.loss.discount) == (
        1e-3,
        0.02,
        0.98,
    )
    assert config.agent.hidden_sizes == (32, 32) and config.actors.max_actor_failures == 7
    assert (config.run.seed, config.run.total_frames, config.run.logdir) == (5, 20000, str(run))
    # Fields the flat config did not have keep their defaults.
    assert (config.loss.lambda_, config.optimizer.rmsprop_momentum, config.run.launcher) == (
        1.0,
        0.0,
        "ray",
    )
    # ...except fields whose default is not what a run without them did: those resume as it ran.
    assert (
        config.loss.normalize_rewards,
        config.agent.scale_observations,
        config.learner.passes,
        config.loss.surrogate_clip,
        config.loss.kl_cost,
        config.loss.rnd_cost,
    ) == (False, False, 1, None, 0.0, 0.0)
    from impala_rep.config import TrainConfig

    assert TrainConfig().loss.normalize_rewards and TrainConfig().agent.scale_observations


def test_resume_of_a_legacy_run_keeps_its_agent_locked(tmp_path):
    from impala_rep.run.cli import explicit_args, parse_args, resume_config_from_args

    run = _legacy_run(tmp_path / "run")
    argv = ["train", "--resume", str(run), "--hidden-sizes", "64,64"]
    with pytest.raises(
        ValueError,
        match=r"cannot resume with hidden_sizes \(64, 64\): the checkpoint "
        r"was trained with hidden_sizes \(32, 32\)",
    ):
        resume_config_from_args(parse_args(argv), explicit_args(argv))
    same = ["train", "--resume", str(run), "--hidden-sizes", "32,32", "--network", "auto"]
    assert resume_config_from_args(parse_args(same), explicit_args(same)).agent.hidden_sizes == (
        32,
        32,
    )


def test_locked_keys_are_the_env_and_the_whole_agent_group():
    from impala_rep.config import config_fields
    from impala_rep.run.resume import LOCKED_KEYS

    assert set(LOCKED_KEYS) == {
        "env",
        "observation_keys",
        "observation_nests",
        "normalize_rewards",
        "normalize_observations",
        "popart",
        "optimizer",
    } | {f.key for f in config_fields() if f.group == "agent"}
    assert set(LOCKED_KEYS) == {
        "env",
        "observation_keys",
        "observation_nests",
        "network",
        "use_lstm",
        "hidden_sizes",
        "initial_log_std",
        "separate_value_network",
        "value_hidden_sizes",
        "scale_observations",
        "agent",
        "normalize_rewards",
        "normalize_observations",
        "popart",
        "optimizer",
    }


def test_check_resumable_takes_several_learner_hosts_and_refuses_another_agent(tmp_path):
    from impala_rep.run.resume import check_resumable, load_run_config, resumed_config

    run = _fake_run(tmp_path / "run", learner_hosts=2, num_actors=2)
    saved = load_run_config(str(run))
    check_resumable(saved)  # K hosts resume (the learner group restores on every host)
    check_resumable(resumed_config(saved, {"learner_hosts": 1, "num_actors": 4}))
    with pytest.raises(ValueError, match="cannot resume with agent 'my_agent:make'"):
        check_resumable(saved.replace({"agent": "my_agent:make"}))
    with pytest.raises(ValueError, match="resuming needs the run's logdir"):
        check_resumable(saved.replace({"logdir": None}))


@pytest.mark.parametrize(
    "content, message",
    [
        ("[1, 2]", "expected a JSON object, got list"),
        ('{"num_actors": 2, "frobs": 1}', "unknown config fields frobs"),
        ('{"actors": {"num_actors": 2, "frobs": 1}}', "unknown config fields actors.frobs"),
        ("{not json", "not readable"),
    ],
)
def test_unreadable_config_json_is_one_error(tmp_path, content, message):
    from impala_rep.run.resume import load_run_config

    run = _fake_run(tmp_path / "run")
    (run / "config.json").write_text(content)
    with pytest.raises(ValueError, match="cannot resume") as err:
        load_run_config(str(run))
    assert message in str(err.value)


def _loss_setting_given_and_resolved(name, *argv):
    """`LossConfig.<name>` as `train ARGV` parses it, and as `prepare` makes it concrete."""
    from impala_rep.run.cli import config_from_args, parse_args
    from impala_rep.run.prepare import prepare

    config = config_from_args(parse_args(["train", *argv]))
    return getattr(config.loss, name), getattr(prepare(config).config.loss, name)


def test_advantage_normalisation_is_on_for_vector_observations_and_off_for_images_unless_told():
    """`--normalize-advantages` unset means auto; `prepare` makes it concrete, so config.json
    and a resumed run hold what the run did. Atari presets keep the paper's (off)."""
    resolved = functools.partial(_loss_setting_given_and_resolved, "normalize_advantages")
    assert resolved() == (None, True)  # CartPole's 4 floats
    assert resolved("--env", "Taxi-v4") == (None, True)  # a one-hot code
    assert resolved("--env", "MinAtar/Breakout-v1") == (None, False)  # 10x10x4 images
    assert resolved("--no-normalize-advantages") == (False, False)
    assert resolved("--env", "MinAtar/Breakout-v1", "--normalize-advantages") == (True, True)
    assert resolved("--env", "ALE/Pong-v5", "--preset", "atari") == (False, False)


def test_the_kl_term_is_on_for_vector_observations_and_off_for_images_unless_told():
    """`--kl-cost` unset means auto: 0.3 on vector observations, 0 on images, made concrete
    by `prepare`; flags win, and the Atari presets keep the paper's loss (none)."""
    resolved = functools.partial(_loss_setting_given_and_resolved, "kl_cost")
    assert resolved() == (None, 0.3)  # CartPole's 4 floats
    assert resolved("--env", "Taxi-v4") == (None, 0.3)  # a one-hot code
    assert resolved("--env", "MinAtar/Breakout-v1") == (None, 0.0)  # 10x10x4 images
    assert resolved("--kl-cost", "0") == (0.0, 0.0)
    assert resolved("--env", "MinAtar/Breakout-v1", "--kl-cost", "1") == (1.0, 1.0)
    assert resolved("--env", "ALE/Pong-v5", "--preset", "atari") == (0.0, 0.0)


def test_continuous_control_gets_observation_normalisation_and_a_separate_value_network(
    tmp_path,
):
    """`--normalize-observations` and `--separate-value-network` unset mean auto: on for a Box
    action space (with vector observations; the value network for the built-in MLP only,
    whatever the loss), off otherwise, made concrete by `prepare`; flags win."""
    from impala_rep.run.cli import config_from_args, parse_args
    from impala_rep.run.prepare import prepare

    def resolved(*argv):
        config = prepare(config_from_args(parse_args(["train", *argv]))).config
        return config.loss.normalize_observations, config.agent.separate_value_network

    assert resolved("--env", "Pendulum-v1") == (True, True)
    assert resolved("--env", "action_spaces_env:MultiDiscreteCartPole-v0") == (False, False)
    assert resolved() == (False, False)  # CartPole: Discrete
    assert resolved("--env", "Pendulum-v1", "--use-lstm") == (True, False)
    assert resolved("--env", "Pendulum-v1", "--no-normalize-observations") == (False, True)
    assert resolved("--env", "Pendulum-v1", "--no-separate-value-network") == (True, False)
    assert resolved("--normalize-observations", "--separate-value-network") == (True, True)
    # A Dict of vectors reaching the user's agent as a nest: statistics per part.
    example = pathlib.Path(__file__).parents[1] / "examples" / "dict_observation_agent.py"
    nest = ["--env", "observation_spaces_env:DictPendulum-v0", "--agent", f"{example}:make_agent"]
    assert resolved(*nest) == (True, False)  # a user's agent: no built-in value network
    # And V-trace's lambda: PPO's 0.95 for continuous actions, the paper's 1 otherwise.
    lambdas = [
        prepare(config_from_args(parse_args(["train", *argv]))).config.loss.lambda_
        for argv in (["--env", "Pendulum-v1"], [], ["--env", "Pendulum-v1", "--lambda", "1"])
    ]
    assert lambdas == [0.95, 1.0, 1.0]
    # A module name of its own (one file of a name per process): the IMPALA loss under it.
    (tmp_path / "continuous_loss.py").write_text("from impala_rep import impala_loss_fn as f\n")
    loss = f"{tmp_path / 'continuous_loss.py'}:f"
    assert resolved("--env", "Pendulum-v1", "--loss", loss) == (True, True)


def test_a_continuous_run_from_before_the_settings_resumes_without_them(tmp_path):
    """A Pendulum run whose config.json predates `normalize_observations` and
    `separate_value_network` (or holds them off) resumes with both off, as it trained, though
    auto would turn them on for it now; one that trained with them keeps them."""
    import json

    from impala_rep.config import TrainConfig
    from impala_rep.run.prepare import prepare

    def resumed(run):
        # Auto (None) for both, as `train(config, resume=True)` is given them: the run's own.
        given = TrainConfig.from_keys({"logdir": str(run), "env": "Pendulum-v1"})
        config = prepare(given, resume=True).config
        return config.loss.normalize_observations, config.agent.separate_value_network

    def settings(run):
        given = TrainConfig.from_keys({"logdir": str(run), "env": "Pendulum-v1"})
        config = prepare(given, resume=True).config
        return config.loss.lambda_, config.agent.initial_log_std

    new = _fake_run(tmp_path / "new", env="Pendulum-v1")  # resolved as CartPole's: set here
    data = json.loads((new / "config.json").read_text())
    data["loss"]["normalize_observations"] = data["agent"]["separate_value_network"] = True
    (new / "config.json").write_text(json.dumps(data))
    assert resumed(new) == (True, True)
    old = _fake_run(tmp_path / "old", env="Pendulum-v1")
    data = json.loads((old / "config.json").read_text())
    del data["loss"]["normalize_observations"], data["agent"]["separate_value_network"]
    # Before the log-stds' flag existed they started at 0 (the default is -1 now); lambda
    # was always written, 1 for every run then (auto now: 0.95 for continuous actions).
    del data["agent"]["initial_log_std"]
    data["loss"]["lambda_"] = 1.0
    (old / "config.json").write_text(json.dumps(data))
    assert resumed(old) == (False, False)
    assert settings(old) == (1.0, 0.0)


def test_a_resumed_run_keeps_the_automatic_settings_it_trained_with(tmp_path):
    """Auto (None) in the config given to `train(config, resume=True)` is the run's own
    value, not what auto would choose now; a config.json from before a setting holds what runs
    did without it."""
    import json

    from impala_rep.config import TrainConfig
    from impala_rep.run.prepare import prepare

    def resumed(run, **given):
        config = TrainConfig.from_keys({"logdir": str(run), **given})
        loss = prepare(config, resume=True).config.loss
        return loss.normalize_advantages, loss.rnd_cost, loss.kl_cost

    run = _fake_run(tmp_path / "a", normalize_advantages=False, rnd_cost=30.0, kl_cost=0.0)
    assert resumed(run) == (False, 30.0, 0.0)
    assert resumed(run, normalize_advantages=True, rnd_cost=5.0, kl_cost=2.0) == (
        True,
        5.0,
        2.0,
    )  # given
    assert resumed(
        _fake_run(tmp_path / "b", normalize_advantages=True, rnd_cost=0.0, kl_cost=0.7)
    ) == (True, 0.0, 0.7)
    # A config.json from before the settings, or with nulls: what runs without them did
    # (legacy.BEFORE_THE_FIELD), never what auto would choose now.
    for name, edit in (("old", dict.pop), ("null", lambda loss, key: loss.update({key: None}))):
        old = _fake_run(tmp_path / name)
        data = json.loads((old / "config.json").read_text())
        for key in ("normalize_advantages", "rnd_cost", "kl_cost"):
            edit(data["loss"], key)
        (old / "config.json").write_text(json.dumps(data))
        assert resumed(old) == (False, 0.0, 0.0), name


def test_the_novelty_bonus_is_on_for_vector_observations_and_off_for_images_unless_told(tmp_path):
    """`--rnd-cost` unset means auto: 10 on vector observations (applied to batches of step
    costs only), off on images; a resumed run keeps what it trained with, one from before the
    setting none."""
    import json

    from impala_rep.run.cli import config_from_args, parse_args
    from impala_rep.run.prepare import prepare

    def resolved(*argv, resume=False):
        config = config_from_args(parse_args(["train", *argv]))
        plan = prepare(config, resume=resume)
        return config.loss.rnd_cost, plan.config.loss.rnd_cost, plan.loss_fn is not None

    assert resolved() == (None, 10.0, True)  # CartPole's 4 floats
    assert resolved("--env", "Taxi-v4") == (None, 10.0, True)  # a one-hot code
    assert resolved("--env", "MinAtar/Breakout-v1") == (None, 0.0, False)  # 10x10x4 images
    assert resolved("--rnd-cost", "0") == (0.0, 0.0, False)
    assert resolved("--env", "MountainCar-v0", "--rnd-cost", "7") == (7.0, 7.0, True)
    assert config_from_args(parse_args(["train"])).loss.rnd_step_costs_only
    # Resumed with no flag, through train's own config (train(config, resume=True)): the run's own.
    for saved in (0.0, 30.0):
        run = _fake_run(tmp_path / f"run-{saved}", rnd_cost=saved)
        assert resolved("--logdir", str(run), resume=True)[1:] == (saved, bool(saved))
    from impala_rep.run.resume import load_run_config, resumed_config

    # `--rnd-cost none` (auto) given on resume keeps the run's own, too.
    assert resumed_config(load_run_config(str(run)), {"rnd_cost": None}).loss.rnd_cost == 30.0
    old = _fake_run(tmp_path / "old")  # config.json from before the field: it trained without
    data = json.loads((old / "config.json").read_text())
    del data["loss"]["rnd_cost"], data["loss"]["rnd_step_costs_only"]
    (old / "config.json").write_text(json.dumps(data))
    assert resolved("--logdir", str(old), resume=True)[1:] == (0.0, False)
