"""Bad input through the `train` command: refused up front, or cleaned up after.

Refused up front: exit 2, one line naming the value and what is allowed, and nothing
written (the logdir does not exist afterwards). One such input goes to `python -m impala_rep
train` in a new process; the others to the command's `main` in this process
(tests/in_process_cli.py), as the refusals come before any process, Ray or run starts. A
failure after start-up with nothing to resume (a real run, in a new process): exit 1, and the
new logdir is removed, so the same command can run again.
"""

import importlib.util
import pathlib
import re
import subprocess
import sys

import pytest

# The refusals of user code and of the local launcher import TensorFlow in this process, as
# the command's driver does (no devices are configured before the refusal). Imported here,
# at collection, as the other files whose tests use it do: its first import runs `uname`
# (platform, for h5py), which `--fast` would take for a test's launch.
import tensorflow  # noqa: F401
from fresh_python import run_fresh_python
from in_process_cli import refused_in_process

TESTS_DIR = pathlib.Path(__file__).parent


def _train(*args, cwd=None, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "impala_rep", "train", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )


@pytest.mark.launches
def test_the_command_refuses_bad_input_in_a_new_process_before_anything_is_written(tmp_path):
    """End to end, as a user runs it: exit 2, one line, no traceback, nothing written. The
    env's module is found in the working directory (tests/observation_spaces_env.py), as
    `python -m` finds it. The cases below call the command's `main` in this process."""
    logdir = tmp_path / "run"
    env = "observation_spaces_env:TextObservation-v0"
    proc = _train("--env", env, "--logdir", str(logdir), timeout=120, cwd=TESTS_DIR)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    message = f"environment '{env}' has observation space Text(1, 8, "
    assert lines[-1].startswith("impala-rep") and message in lines[-1], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert not logdir.exists()


# In this process (tests/in_process_cli.py): `main` must exit 2 (a traceback would be an
# exception instead) with one line naming the value and what is allowed, and write nothing.


@pytest.mark.parametrize(
    "args, message",
    [
        (["--seed", "-1"], "argument --seed: expected an integer in [0, 2**32), got -1"),
        (
            ["--seed", str(2**32)],
            f"argument --seed: expected an integer in [0, 2**32), got {2**32}",
        ),
        (
            ["--env", "Pendulum-v1", "--separate-value-network", "--use-lstm"],
            "bad separate_value_network True: applies to the feed-forward MLP, not with use_lstm",
        ),
        (
            ["--separate-value-network", "--agent", "my_agent.py:make_agent"],
            "bad separate_value_network True: applies to the built-in MLP, not to an --agent of "
            "your own",
        ),
        (
            ["--env", "MinAtar/Breakout-v1", "--separate-value-network"],
            "separate_value_network applies to the feed-forward MLP (vector observations, no "
            "use_lstm), not to network='minatar'",
        ),
        (
            ["--value-hidden-sizes", "256", "--no-separate-value-network"],
            "bad value_hidden_sizes (256,): applies to a separate value network",
        ),
        (
            ["--value-hidden-sizes", "256"],  # CartPole: auto leaves the value network shared
            "bad value_hidden_sizes (256,): applies to a separate value network, not with "
            "separate_value_network False",
        ),
        (["--eval-every", "0"], "argument --eval-every: expected a positive integer, got 0"),
        (["--eval-every", "1e5"], "argument --eval-every: expected a positive integer or none"),
        (["--eval-episodes", "0"], "argument --eval-episodes: expected a positive integer, got 0"),
    ],
)
def test_bad_input_is_refused_before_anything_is_written(args, message, tmp_path, capsys):
    logdir = tmp_path / "run"
    last = refused_in_process(["train", *args, "--logdir", str(logdir)], capsys)
    assert last.startswith("impala-rep") and message in last, last
    assert not logdir.exists()


def test_an_env_whose_extra_is_missing_names_what_to_install(tmp_path, capsys, monkeypatch):
    # make's venv has every extra: the command is shown a Python without Box2D.
    find_spec = importlib.util.find_spec

    def without_box2d(name, *args):
        return None if name == "Box2D" else find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", without_box2d)
    logdir = tmp_path / "run"
    last = refused_in_process(["train", "--env", "LunarLander-v3", "--logdir", str(logdir)], capsys)
    assert last == (
        "impala-rep: error: environment id 'LunarLander-v3' needs Box2D: install the box2d "
        "extra: pip install -e '.[box2d]'"
    )
    assert not logdir.exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--ray-address", "127.0.0.1:1"],
            "bad ray_address '127.0.0.1:1': no Ray cluster answers there "
            "(connection refused; waited up to 10 s)",
        ),
        (
            ["--learner-devices", "gpu"],
            "bad learner_devices 'gpu': the learner asks for 1 GPU(s) and this machine has 0",
        ),
    ],
)
def test_what_ray_could_never_satisfy_is_refused_instead_of_waited_for(
    args, message, tmp_path, capsys
):
    # Ray itself would wait forever: for a cluster at an address where none answers, and
    # for a GPU that no node has.
    if args[0] == "--learner-devices" and _machine_has_a_gpu():
        pytest.skip("this machine has a GPU")
    logdir = tmp_path / "run"
    last = refused_in_process(["train", *args, "--logdir", str(logdir)], capsys)
    assert last.startswith("impala-rep") and message in last, last
    assert not logdir.exists()


def _machine_has_a_gpu() -> bool:
    return pathlib.Path("/proc/driver/nvidia/gpus").is_dir()


# --- what this machine does not have: refused in preparation (run/resources.py) ---------

HAS_ALE = importlib.util.find_spec("ale_py") is not None


def _skip_reason(case: str) -> str | None:
    if case == "memory" and not pathlib.Path("/proc/meminfo").exists():
        return "no /proc/meminfo: memory is not checked here"
    if case == "atari" and not HAS_ALE:
        return "ale_py is not installed"
    if case == "gpu" and (
        _machine_has_a_gpu()
        or any(pathlib.Path(p).exists() for p in ("/dev/nvidia0", "/dev/kfd", "/dev/dxg"))
    ):
        return "this machine has a GPU"
    if case == "tpu":
        from impala_rep.run.machine import local_tpu_present

        if local_tpu_present():
            return "this machine has a TPU"
    return None


@pytest.mark.parametrize(
    "case, args, message",
    [
        # ~27,000 GiB (10**7 envs x 21 Atari observations of 84x84x4 bytes, 5 unrolls held):
        # more than any machine has.
        (
            "atari",
            ["--env", "ALE/Pong-v5", "--preset", "atari", "--envs-per-actor", str(10**7)],
            f"bad envs_per_actor {10**7}: the unroll buffers need ~",
        ),
        # ~14,000,000 GiB of CartPole unrolls.
        (
            "memory",
            ["--unroll-length", str(10**9)],
            f"bad unroll_length {10**9}: the unroll buffers need ~",
        ),
        (
            "gpu",
            ["--launcher", "local", "--learner-devices", "gpu"],
            "bad learner_devices 'gpu': the learner asks for 1 GPU(s) and this machine has 0; use "
            "--learner-devices cpu or auto",
        ),
        (
            "tpu",
            ["--learner-devices", "tpu"],
            "bad learner_devices 'tpu': this machine has no TPU (no /dev/accel* device, no Google "
            "device under /dev/vfio) and TPU_NAME is not set; use tpu:NAME for a TPU reached over "
            "the network, or --learner-devices cpu, gpu or auto",
        ),
        (
            "tpu",
            ["--launcher", "local", "--learner-devices", "tpu:local"],
            "bad learner_devices 'tpu:local': this machine has no TPU",
        ),
    ],
)
def test_what_this_machine_does_not_have_is_refused_before_anything_starts(
    case, args, message, tmp_path, capsys, monkeypatch
):
    reason = _skip_reason("memory") or _skip_reason(case)
    if reason:
        pytest.skip(reason)
    logdir = tmp_path / "run"
    monkeypatch.delenv("TPU_NAME", raising=False)  # "tpu" then means this VM's
    last = refused_in_process(["train", *args, "--logdir", str(logdir)], capsys)
    assert last.startswith("impala-rep") and message in last, last
    if case in ("atari", "memory"):  # says what is allowed, and what the machine has
        assert re.search(
            r"but this machine(?:'s cgroup memory limit leaves| has) [\d.]+ GiB "
            r"available; with the other settings as they are, \w+ can be at most "
            r"\d+",
            last,
        ), last
    assert not logdir.exists()


USER_CODE = """
import tensorflow as tf
from impala_rep import LossOutput


def not_an_agent(*, observation_shape, num_actions):
    return {"weights": []}


def bare_tensor_loss(
    *, agent, inputs, outputs, behaviour_logits, actions, rewards, discounts, config
):
    return tf.reduce_sum(outputs.baseline)


def positional_loss(outputs, rewards):
    return LossOutput(tf.reduce_sum(outputs.baseline))
"""


@pytest.mark.parametrize(
    "flag, name, message",
    [
        (
            "--agent",
            "not_an_agent",
            "not_an_agent': the factory returned a dict, not an Agent (it has no "
            "build, initial_state, step, unroll, get_weights, set_weights)",
        ),
        (
            "--loss",
            "bare_tensor_loss",
            "bare_tensor_loss': applied once to a synthetic batch it raised "
            "TypeError: loss_fn must return an impala_rep.LossOutput(loss, sums, "
            "means), got a EagerTensor; a loss is called as loss_fn(*, agent,",
        ),
        (
            "--loss",
            "positional_loss",
            "positional_loss': applied once to a synthetic batch it raised "
            "TypeError: positional_loss() got an unexpected keyword argument",
        ),
    ],
)
def test_user_code_that_breaks_its_contract_is_refused_before_start(
    flag, name, message, tmp_path, capsys
):
    # A module name of its own: other files import their own user code in the same process.
    code = tmp_path / "bad_input_code.py"
    code.write_text(USER_CODE)
    logdir = tmp_path / "run"
    last = refused_in_process(["train", flag, f"{code}:{name}", "--logdir", str(logdir)], capsys)
    assert last.startswith("impala-rep") and f"bad {flag[2:]} '{code}:" in last, last
    assert message in last, last
    assert not logdir.exists()


@pytest.mark.launches
def test_a_run_that_fails_before_its_first_checkpoint_leaves_nothing_behind(tmp_path):
    # Every actor's env crashes inside its second unroll, and the batch is larger than the
    # unrolls sent before the crash-loop limit ends the run: no step, no checkpoint. The
    # local launcher: one process, no Ray, same outcome. Two failures are tolerated, so a
    # failed actor thread is replaced (and fails again) before the limit is passed.
    logdir = tmp_path / "run"
    args = (
        "--env",
        "crashing_env:CrashingCartPole-v1",
        "--launcher",
        "local",
        "--envs-per-actor",
        "4",
        "--batch-size",
        "64",
        "--max-actor-failures",
        "2",
        "--logdir",
        str(logdir),
    )
    proc = _train(*args, cwd=TESTS_DIR)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert (
        "impala-rep: error: actors keep failing: 3 actor failures within 600 s (limit 2); "
        "the last, in actor "
    ) in proc.stderr
    assert "RuntimeError: simulated env crash" in proc.stderr
    assert (
        f"nothing of this run was kept ({logdir} removed); run the same command again"
        in proc.stderr
    )
    assert not logdir.exists()
    # An existing empty directory is emptied again, not removed: test_reliability.py's run
    # that fails the same way, under Ray.


# --- the memory estimate and the device checks, without the command ----------------------

GiB = 2**30


def _estimate_fits(config, shape, dtype, num_actions, gib):
    from impala_rep.run.resources import check_memory

    return check_memory(
        config, shape, dtype, num_actions, available=(gib * GiB, "this machine has")
    )


def test_the_default_runs_fit_a_small_machine_easily():
    import numpy as np

    from impala_rep.config import TrainConfig
    from impala_rep.config.auto import resolve_auto_settings
    from impala_rep.config.presets import PRESETS
    from impala_rep.envs import atari

    # CartPole, the defaults (auto settings resolved, as a run has them: its learner under
    # XLA): 5 unrolls of 64 columns of ~0.9 kB and 3 processes.
    estimate = _estimate_fits(
        resolve_auto_settings(TrainConfig(), (4,), continuous_actions=False),
        (4,),
        np.float32,
        2,
        gib=1,
    )
    assert estimate.xla_learners == 1
    assert estimate.buffer_bytes < 2**20 and estimate.total_bytes < GiB
    # MinAtar ([10, 10, C] uint8, C <= 10), the defaults.
    _estimate_fits(
        TrainConfig.from_keys({"env": "MinAtar/Breakout-v1"}), (10, 10, 10), np.uint8, 6, gib=1
    )
    # Pong with --preset atari and 2-4 actors: the observations the actors really record
    # (84x84, a stack of 4, uint8: envs/atari.py), and raw 210x160x3 frames for good measure.
    atari_shape = (atari.FRAME_SIZE, atari.FRAME_SIZE, atari.FRAME_STACK)
    assert atari_shape == (84, 84, 4)
    for num_actors in (2, 4):
        for launcher in ("ray", "local"):
            config = TrainConfig.from_keys(
                {
                    **PRESETS["atari"],
                    "env": "ALE/Pong-v5",
                    "num_actors": num_actors,
                    "launcher": launcher,
                }
            )
            for shape in (atari_shape, (210, 160, 3)):
                estimate = _estimate_fits(config, shape, np.uint8, 6, gib=4)
                assert estimate.buffer_bytes < 0.5 * GiB, (num_actors, shape, estimate)


@pytest.mark.parametrize("launcher, processes", [("ray", 3), ("local", 1)])
def test_an_xla_learner_counts_its_compilers_memory(launcher, processes):
    import numpy as np

    from impala_rep.config import TrainConfig
    from impala_rep.run.memory_model import PROCESS_BYTES, XLA_LEARNER_BYTES

    def config(xla):
        return TrainConfig.from_keys({"learner_xla": xla, "launcher": launcher})

    off = _estimate_fits(config(False), (4,), np.float32, 2, gib=4)
    on = _estimate_fits(config(True), (4,), np.float32, 2, gib=4)
    assert off.process_bytes == processes * PROCESS_BYTES
    assert on.total_bytes - off.total_bytes == XLA_LEARNER_BYTES
    # A machine that has room for the run without XLA, not with it: XLA is what is named.
    just_enough = off.total_bytes / GiB
    with pytest.raises(
        ValueError,
        match=r"^bad learner_xla True: XLA's compiler needs ~0\.2 GiB "
        r"more in the learner, .*; use --no-learner-xla$",
    ):
        _estimate_fits(config(True), (4,), np.float32, 2, gib=just_enough)
    # With less than that, a size is named, as without XLA.
    with pytest.raises(ValueError, match=r"^bad envs_per_actor 64: "):
        _estimate_fits(config(True), (4,), np.float32, 2, gib=just_enough / 2)


def test_a_refused_size_says_the_largest_that_fits():
    import numpy as np

    from impala_rep.config import TrainConfig
    from impala_rep.config.presets import PRESETS

    config = TrainConfig.from_keys({**PRESETS["atari"], "envs_per_actor": 100_000})
    with pytest.raises(ValueError) as refused:
        _estimate_fits(config, (84, 84, 4), np.uint8, 6, gib=16)
    message = str(refused.value)
    assert message.startswith("bad envs_per_actor 100000: the unroll buffers need ~")
    assert "this machine has 16.0 GiB available" in message
    most = int(re.search(r"envs_per_actor can be at most (\d+)", message).group(1))
    _estimate_fits(config.replace({"envs_per_actor": most}), (84, 84, 4), np.uint8, 6, gib=16)
    with pytest.raises(ValueError):
        _estimate_fits(
            config.replace({"envs_per_actor": most + 1}), (84, 84, 4), np.uint8, 6, gib=16
        )
    # Many actors cost processes as much as buffers: the actor count is named.
    with pytest.raises(ValueError, match=r"^bad num_actors 400: .* num_actors can be at most \d+"):
        _estimate_fits(TrainConfig.from_keys({"num_actors": 400}), (4,), np.float32, 2, gib=16)


@pytest.mark.parametrize(
    "keys, gpus, environ, message",
    [
        (
            {"learner_devices": "gpu"},
            0,
            {},
            "the learner asks for 1 GPU(s) and this machine has 0; use "
            "--learner-devices cpu or auto",
        ),
        (
            {"learner_devices": "gpu:4", "batch_size": 32},
            2,
            {},
            "the learner asks for 4 GPU(s) and this machine has 2; use --learner-devices cpu or "
            "auto, or gpu:2",
        ),
        (
            {"learner_devices": "gpu", "learner_hosts": 2},
            1,
            {},
            "asks for 2 GPU(s) and this machine has 1",
        ),
        ({"learner_devices": "gpu"}, 4, {}, None),
        (
            {"learner_devices": "gpu"},
            None,
            {},
            None,
        ),  # cannot be told (ROCm, WSL, macOS): not refused
        (
            {"learner_devices": "gpu", "ray_address": "10.0.0.1:6379"},
            0,
            {},
            None,
        ),  # the cluster's GPUs
        ({"learner_devices": "auto"}, 0, {}, None),
        ({"learner_devices": "tpu"}, 0, {}, "bad learner_devices 'tpu': this machine has no TPU"),
        (
            {"learner_devices": "tpu:local"},
            0,
            {},
            "bad learner_devices 'tpu:local': this machine has no TPU",
        ),
        ({"learner_devices": "tpu"}, 0, {"TPU_NAME": "my-tpu"}, None),  # reached over the network
        ({"learner_devices": "tpu:my-tpu"}, 0, {}, None),
        ({"learner_devices": "tpu", "ray_address": "10.0.0.1:6379"}, 0, {}, None),
    ],
)
def test_learner_devices_this_machine_does_not_have_are_refused(keys, gpus, environ, message):
    from impala_rep.config import TrainConfig
    from impala_rep.run.resources import check_devices

    config = TrainConfig.from_keys({"num_actors": 2, **keys})

    def check():
        return check_devices(
            config, environ=environ, gpu_count=lambda: gpus, tpu_present=lambda: False
        )

    if message is None:
        check()
    else:
        with pytest.raises(ValueError, match=re.escape(message)):
            check()


@pytest.mark.launches
def test_finding_the_devices_and_memory_imports_neither_tensorflow_nor_ray():
    code = (
        "import sys, impala_rep.run.resources, impala_rep.run.machine as m; "
        "print(m.local_gpu_count({'CUDA_VISIBLE_DEVICES': ''}), m.local_tpu_present(), "
        "m.available_memory() is not None); "
        "assert 'tensorflow' not in sys.modules and 'ray' not in sys.modules, 'imported'"
    )
    stdout = run_fresh_python(code, timeout=60)
    if sys.platform == "linux" and not any(
        pathlib.Path(p).exists() for p in ("/dev/kfd", "/dev/dxg")
    ):
        assert stdout.split()[0] == "0"  # CUDA_VISIBLE_DEVICES="" hides every GPU
