"""`--env path/to/file.py:EnvId` and `--env module:EnvId`: an env registered by the user's own
code, found as `--agent` files are, sent to the actor processes, and recorded so that a run
evaluates from any directory."""

import json
import os
import subprocess
import sys

import gymnasium
import numpy as np
import pytest
from in_process_cli import refused_in_process

from impala_rep.envs import make_vector_env, register_env
from impala_rep.run.user_code import load_env

# The env imports a module beside it, as a user's file would.
MASKING = """
import numpy as np

KEPT = [0, 2]  # the cart's position and the pole's angle, not their velocities


def masked(observation):
    return observation[KEPT].astype(np.float32)
"""

MASKED_CARTPOLE = """
import gymnasium
import numpy as np
from masking import KEPT, masked


class MaskedCartPole(gymnasium.ObservationWrapper):
    def __init__(self):
        super().__init__(gymnasium.make("CartPole-v1").unwrapped)
        self.observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (len(KEPT),), np.float32)

    def observation(self, observation):
        return masked(observation)


gymnasium.register({id!r}, entry_point=MaskedCartPole, max_episode_steps=500)
"""


def _write_env(directory, env_id):
    directory.mkdir(exist_ok=True)
    (directory / "masking.py").write_text(MASKING)
    (directory / "masked_cartpole.py").write_text(MASKED_CARTPOLE.format(id=env_id))


@pytest.fixture
def forget_user_env():
    """Takes what a test's load_env registered out of this process again."""
    registered, modules = set(gymnasium.envs.registry), set(sys.modules)
    yield
    for env_id in set(gymnasium.envs.registry) - registered:
        del gymnasium.envs.registry[env_id]
    for name in {"masked_cartpole", "masking"} & (set(sys.modules) - modules):
        del sys.modules[name]


def test_a_file_registers_its_id_and_the_registration_builds_the_env_without_the_file(
    tmp_path, monkeypatch, forget_user_env
):
    _write_env(tmp_path / "code", "FileMasked-v0")
    monkeypatch.chdir(tmp_path)
    env_id, registration = load_env("code/masked_cartpole.py:FileMasked-v0")
    assert env_id == f"{tmp_path / 'code' / 'masked_cartpole.py'}:FileMasked-v0"
    assert registration.id == "FileMasked-v0" and registration.max_episode_steps == 500
    assert callable(registration.entry_point)  # the class itself, not a name to import
    # A process that never imported the file: the registration alone builds the env.
    del gymnasium.envs.registry["FileMasked-v0"]
    register_env(registration)
    env = make_vector_env(env_id, num_envs=2, seed=0)
    try:
        obs, _ = env.reset()
        assert obs.shape == (2, 2) and obs.dtype == np.float32
    finally:
        env.close()


def test_the_module_form_is_found_in_the_current_directory_and_recorded_as_its_file(
    tmp_path, monkeypatch, forget_user_env
):
    _write_env(tmp_path, "ModuleMasked-v0")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    env_id, registration = load_env("masked_cartpole:ModuleMasked-v0")
    assert env_id == f"{tmp_path / 'masked_cartpole.py'}:ModuleMasked-v0"
    assert registration.id == "ModuleMasked-v0"


def test_a_plain_gymnasium_id_is_left_alone():
    assert load_env("CartPole-v1") == ("CartPole-v1", None)


@pytest.mark.parametrize(
    "spec, message",
    [
        (
            "nowhere/masked_cartpole.py:Masked-v0",
            "bad env 'nowhere/masked_cartpole.py:Masked-v0': no file 'nowhere/masked_cartpole.py'; "
            "expected a gymnasium id, 'module:EnvId' or 'path/to/file.py:EnvId'",
        ),
        (
            "code/masked_cartpole.py:NotThere-v0",
            "bad env 'code/masked_cartpole.py:NotThere-v0': importing 'code/masked_cartpole.py' "
            "registered no gymnasium id 'NotThere-v0'",
        ),
    ],
)
def test_a_file_or_id_that_is_not_there_is_refused_naming_it(
    tmp_path, monkeypatch, capsys, forget_user_env, spec, message
):
    _write_env(tmp_path / "code", "RefusedMasked-v0")
    monkeypatch.chdir(tmp_path)
    logdir = tmp_path / "run"
    argv = ["train", "--env", spec, "--logdir", str(logdir)]
    assert refused_in_process(argv, capsys) == f"impala-rep: error: {message}"
    assert not logdir.exists()


@pytest.mark.launches
def test_an_env_file_trains_on_ray_actors_and_evaluates_from_another_directory(tmp_path):
    # Run from `elsewhere` with the file named relative to it; Ray's actor processes have
    # neither folder on their path. Evaluated from `code`, where the relative name would
    # not resolve: config.json holds the absolute one.
    code, elsewhere, logdir = tmp_path / "code", tmp_path / "elsewhere", tmp_path / "run"
    _write_env(code, "MaskedCartPole-v0")
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "PYTHONPATH")}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    command = [sys.executable, "-m", "impala_rep"]
    train = subprocess.run(
        [
            *command,
            "train",
            "--env",
            "../code/masked_cartpole.py:MaskedCartPole-v0",
            "--launcher",
            "ray",
            "--num-actors",
            "1",
            "--total-frames",
            "5000",
            "--logdir",
            str(logdir),
        ],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert train.returncode == 0, f"{train.stdout[-3000:]}\n{train.stderr[-3000:]}"
    config = json.loads((logdir / "config.json").read_text())
    assert config["env"]["id"] == f"{code / 'masked_cartpole.py'}:MaskedCartPole-v0"
    records = [json.loads(line) for line in (logdir / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["frames"] >= 5000
    evaluate = subprocess.run(
        [*command, "evaluate", str(logdir), "--episodes", "2"],
        cwd=code,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert evaluate.returncode == 0, evaluate.stderr[-3000:]
    assert "greedy policy, 2 episodes" in evaluate.stdout
