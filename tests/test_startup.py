"""Start-up: the stages a run stamps (impala_rep/startup.py), the XLA compilation cache
(learner/xla_cache.py) and the environment an embedded Ray's workers start with."""

import json
import os
import subprocess
import sys

import pytest
from fresh_python import run_fresh_python

from impala_rep.learner import xla_cache
from impala_rep.startup import STAGES, process_started, stamp


@pytest.mark.launches
def test_a_process_knows_when_it_began():
    out = run_fresh_python(
        "import time; time.sleep(0.5)\n"
        "from impala_rep.startup import process_started, stamp\n"
        "print(process_started(), stamp())"
    )
    began, now = map(float, out.split())
    assert 0.45 <= now - began < 10  # the sleep, plus the interpreter's start


def test_this_process_began_before_now():
    began = process_started()
    assert began is not None and began <= stamp()


def test_the_cache_directory_is_per_tensorflow_version_and_cpu(tmp_path):
    import importlib.metadata

    version = importlib.metadata.version("tensorflow")
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    auto = xla_cache.cache_directory("auto", env)
    assert auto.parent == tmp_path / "xdg" / "impala-rep" / "xla"
    assert auto.name.startswith(f"tf{version}-") and len(auto.name) == len(f"tf{version}-") + 12
    home = xla_cache.cache_directory("auto", {})
    assert home.parent == pathlib_home() / ".cache" / "impala-rep" / "xla"
    assert xla_cache.cache_directory(str(tmp_path / "mine"), env).parent == tmp_path / "mine"
    assert xla_cache.cache_directory("none", env) is None


def pathlib_home():
    import pathlib

    return pathlib.Path(os.path.expanduser("~"))


def test_enabling_the_cache_adds_its_flag_and_keeps_the_users(tmp_path):
    env = {"TF_XLA_FLAGS": "--tf_xla_auto_jit=1"}
    directory = xla_cache.enable(str(tmp_path / "cache"), env)
    assert directory.is_dir() and directory.parent == tmp_path / "cache"
    assert env["TF_XLA_FLAGS"] == f"--tf_xla_auto_jit=1 {xla_cache.FLAG}={directory}"
    # Again (a learner host's start after its preload): nothing added twice.
    assert xla_cache.enable(str(tmp_path / "cache"), env) is None
    assert env["TF_XLA_FLAGS"].count(xla_cache.FLAG) == 1
    # The user's own cache directory wins; "none" adds nothing.
    users = {"TF_XLA_FLAGS": f"{xla_cache.FLAG}=/their/cache"}
    assert xla_cache.enable(str(tmp_path / "other"), users) is None
    assert users["TF_XLA_FLAGS"] == f"{xla_cache.FLAG}=/their/cache"
    empty: dict[str, str] = {}
    assert xla_cache.enable("none", empty) is None and empty == {}


def test_a_cache_that_cannot_be_made_is_skipped_not_fatal(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    env: dict[str, str] = {}
    assert xla_cache.enable(str(blocker / "cache"), env) is None
    assert "TF_XLA_FLAGS" not in env


def test_bad_xla_cache_settings_are_refused():
    from impala_rep.config import TrainConfig

    for bad in ("", "  ", 3):
        with pytest.raises(ValueError, match="bad xla_cache"):
            TrainConfig.from_keys({"xla_cache": bad})


def _train(tmp_path, name, *flags, env=None):
    logdir = tmp_path / name
    subprocess.run(
        [
            sys.executable,
            "-m",
            "impala_rep",
            "train",
            "--env",
            "CartPole-v1",
            "--launcher",
            "local",
            "--num-actors",
            "1",
            "--total-frames",
            "3000",
            "--logdir",
            str(logdir),
            *flags,
        ],
        check=True,
        capture_output=True,
        timeout=300,
        # Not TF_XLA_FLAGS: a learner built in this process (tests/test_xla.py) points it at
        # the session's cache, and a cache set there wins over --xla-cache.
        env={**{k: v for k, v in os.environ.items() if k != "TF_XLA_FLAGS"}, **(env or {})},
    )
    return logdir


@pytest.mark.launches
def test_a_second_run_loads_the_compiled_step_the_first_left_and_each_records_its_stages(
    tmp_path,
):
    """The first XLA run compiles its step into the cache; an identical second run loads it
    (the entry is not written again). Each records its start-up stages: under the local
    launcher, with no Ray and no learner process, the service's. (`--xla-cache none`, which
    reaches the same `xla_cache.enable` call: the test below.)"""
    cache = tmp_path / "cache"
    _train(tmp_path, "first", "--learner-xla", "--xla-cache", str(cache))
    entries = list(cache.glob("tf*/*.pb"))
    assert len(entries) == 1, entries
    written = entries[0].stat().st_mtime_ns
    _train(tmp_path, "second", "--learner-xla", "--xla-cache", str(cache))
    assert list(cache.glob("tf*/*.pb")) == entries
    assert entries[0].stat().st_mtime_ns == written
    for name in ("first", "second"):
        events = (tmp_path / name / "events.jsonl").read_text().splitlines()
        startup = [e for e in map(json.loads, events) if e["event"] == "startup"]
        assert len(startup) == 1
        seconds = startup[0]["seconds"]
        assert list(seconds) == ["learner built", "first unroll", "first trained frame"]
        assert 0 <= seconds["learner built"] <= seconds["first unroll"]
        assert seconds["first unroll"] <= seconds["first trained frame"] <= startup[0]["wall_s"]


def test_xla_cache_none_given_last_leaves_no_cache(tmp_path):
    """The command's setting, as the learner's build hands it to `xla_cache.enable` (the call
    that made the run's cache above): the last one given wins, and "none" adds no flag and
    makes no directory."""
    from impala_rep.run.cli import config_from_args, parse_args

    argv = ["train", "--learner-xla", "--xla-cache", str(tmp_path / "unused"), "--xla-cache"]
    config = config_from_args(parse_args([*argv, "none"]))
    assert config.learner.xla and config.learner.xla_cache == "none"
    env: dict[str, str] = {}
    assert xla_cache.enable(config.learner.xla_cache, env) is None and env == {}
    assert not (tmp_path / "unused").exists()


_EMBEDDED_RAY = """
import json, os, sys
from impala_rep.config import TrainConfig
from impala_rep.run.ray_setup import prepare_ray_import
prepare_ray_import(embedded=True)
import ray
from ray._private import ray_constants
from impala_rep.run.launch_ray import start_ray

os.environ.pop("TF_CPP_MIN_LOG_LEVEL", None)
assert start_ray(TrainConfig())

NAMES = ("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", "TF_CPP_MIN_LOG_LEVEL")

@ray.remote
def worker_env():
    return {name: os.environ.get(name) for name in NAMES}

print(json.dumps({
    "worker": ray.get(worker_env.remote()),
    "driver": {name: os.environ.get(name) for name in NAMES},
    "driver_handler_disabled": ray_constants.RAY_DISABLE_FAILURE_SIGNAL_HANDLER,
}))
ray.shutdown()
"""


@pytest.mark.launches
def test_an_embedded_rays_workers_keep_their_crash_handler_and_the_quiet_log_level():
    """Passed through the environment the node starts with (no runtime env, which would make
    Ray start new workers instead of the prestarted ones); the driver's own environment is
    as it was, and its handler stays off (SIGTERM is the run's)."""
    out = json.loads(run_fresh_python(_EMBEDDED_RAY, timeout=120).strip().splitlines()[-1])
    assert out["worker"] == {"RAY_DISABLE_FAILURE_SIGNAL_HANDLER": "0", "TF_CPP_MIN_LOG_LEVEL": "2"}
    assert out["driver"] == {
        "RAY_DISABLE_FAILURE_SIGNAL_HANDLER": "1",
        "TF_CPP_MIN_LOG_LEVEL": None,
    }
    assert out["driver_handler_disabled"] is True


def test_the_stages_are_named_once():
    assert len(set(STAGES)) == len(STAGES)
