"""Bad input through the `train` command: refused up front, or cleaned up after.

Each input is fed to `python -m impala_rep train` for real. Refused up front:
exit 2, one line naming the value and what is allowed, and nothing written (the
logdir does not exist afterwards). A failure after start-up with nothing to
resume: exit 1, and the new logdir is removed, so the same command can run again.
"""

import importlib.util
import pathlib
import subprocess
import sys

import pytest

TESTS_DIR = pathlib.Path(__file__).parent


def _train(*args, cwd=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "impala_rep", "train", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=cwd)


@pytest.mark.parametrize("args, message", [
    (["--seed", "-1"], "argument --seed: expected an integer in [0, 2**32), got -1"),
    (["--seed", str(2**32)], f"argument --seed: expected an integer in [0, 2**32), got {2**32}"),
    (["--env", "Blackjack-v1"], "environment 'Blackjack-v1' has observation space Tuple(Discrete(32), "
                                "Discrete(11), Discrete(2)); only Box observations (arrays of rank 1 "
                                "or 3) are supported"),
    (["--env", "FrozenLake-v1"], "environment 'FrozenLake-v1' has observation space Discrete(16); "
                                 "only Box observations"),
])
def test_bad_input_is_refused_before_anything_is_written(args, message, tmp_path):
    logdir = tmp_path / "run"
    proc = _train(*args, "--logdir", str(logdir), timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith("impala-rep") and message in lines[-1], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert not logdir.exists()


@pytest.mark.skipif(importlib.util.find_spec("Box2D") is not None, reason="Box2D is installed")
def test_an_env_whose_optional_dependency_is_missing_names_what_to_install(tmp_path):
    logdir = tmp_path / "run"
    proc = _train("--env", "LunarLander-v3", "--logdir", str(logdir), timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert "environment id 'LunarLander-v3' needs a package that is not installed" in last
    assert 'pip install "gymnasium[box2d]"' in last
    assert not logdir.exists()


@pytest.mark.parametrize("args, message", [
    (["--ray-address", "127.0.0.1:1"], "bad ray_address '127.0.0.1:1': no Ray cluster answers there "
                                       "(connection refused; waited up to 10 s)"),
    (["--learner-devices", "gpu"], "bad learner_devices 'gpu': the learner asks for 1 GPU(s) and "
                                   "this machine has 0"),
])
def test_what_ray_could_never_satisfy_is_refused_instead_of_waited_for(args, message, tmp_path):
    # Ray itself would wait forever: for a cluster at an address where none answers, and
    # for a GPU that no node has.
    if args[0] == "--learner-devices" and _machine_has_a_gpu():
        pytest.skip("this machine has a GPU")
    logdir = tmp_path / "run"
    proc = _train(*args, "--logdir", str(logdir), timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("impala-rep") and message in last, proc.stderr[-2000:]
    assert not logdir.exists()


def _machine_has_a_gpu() -> bool:
    return pathlib.Path("/proc/driver/nvidia/gpus").is_dir()


USER_CODE = """
import tensorflow as tf
from impala_rep import LossOutput


def not_an_agent(*, observation_shape, num_actions):
    return {"weights": []}


def bare_tensor_loss(*, agent, inputs, outputs, behaviour_logits, actions, rewards, discounts, config):
    return tf.reduce_sum(outputs.baseline)


def positional_loss(outputs, rewards):
    return LossOutput(tf.reduce_sum(outputs.baseline))
"""


@pytest.mark.parametrize("flag, name, message", [
    ("--agent", "not_an_agent", "not_an_agent': the factory returned a dict, not an Agent (it has no "
                                "build, initial_state, step, unroll, get_weights, set_weights)"),
    ("--loss", "bare_tensor_loss", "bare_tensor_loss': applied once to a synthetic batch it raised "
                                   "TypeError: loss_fn must return an impala_rep.LossOutput(loss, sums, "
                                   "means), got a EagerTensor; a loss is called as loss_fn(*, agent,"),
    ("--loss", "positional_loss", "positional_loss': applied once to a synthetic batch it raised "
                                  "TypeError: positional_loss() got an unexpected keyword argument"),
])
def test_user_code_that_breaks_its_contract_is_refused_before_start(flag, name, message, tmp_path):
    code = tmp_path / "my_code.py"
    code.write_text(USER_CODE)
    logdir = tmp_path / "run"
    proc = _train(flag, f"{code}:{name}", "--logdir", str(logdir), timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("impala-rep") and f"bad {flag[2:]} '{code}:" in last, last
    assert message in last, last
    assert not logdir.exists()


def test_a_run_that_fails_before_its_first_checkpoint_leaves_nothing_behind(tmp_path):
    # Every actor's env crashes inside its second unroll, and the batch is larger than the
    # unrolls sent before the crash-loop limit ends the run: no step, no checkpoint. The
    # local launcher: one process, no Ray, same outcome.
    logdir = tmp_path / "run"
    args = ("--env", "crashing_env:CrashingCartPole-v1", "--launcher", "local",
            "--envs-per-actor", "4", "--batch-size", "64", "--max-actor-failures", "1",
            "--logdir", str(logdir))
    proc = _train(*args, cwd=TESTS_DIR)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "actors keep failing" in proc.stderr and "simulated env crash" in proc.stderr
    assert f"nothing of this run was kept ({logdir} removed); run the same command again" in proc.stderr
    assert not logdir.exists()

    # An existing empty directory is emptied again, not removed.
    logdir.mkdir()
    proc = _train(*args, cwd=TESTS_DIR)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert logdir.is_dir() and not any(logdir.iterdir())
