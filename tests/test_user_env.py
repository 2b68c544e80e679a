"""`--env path/to/file.py:EnvId` and `--env module:EnvId`: an env registered by the user's own
code, found as `--agent` files are, sent to the actor processes, and recorded so that a run
evaluates from any directory (through the commands, on Ray's actors: test_user_code.py)."""

import sys

import gymnasium
import numpy as np
import pytest
from in_process_cli import refused_in_process
from user_env_files import write_env

from impala_rep.envs import make_vector_env, register_env
from impala_rep.run.user_code import load_env


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
    write_env(tmp_path / "code", "FileMasked-v0")
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
    write_env(tmp_path, "ModuleMasked-v0")
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
    write_env(tmp_path / "code", "RefusedMasked-v0")
    monkeypatch.chdir(tmp_path)
    logdir = tmp_path / "run"
    argv = ["train", "--env", spec, "--logdir", str(logdir)]
    assert refused_in_process(argv, capsys) == f"impala-rep: error: {message}"
    assert not logdir.exists()
