"""Shared fixtures. One embedded Ray serves every test that asks for it (Ray costs seconds to
start); `train` joins it instead of starting its own."""

import os
import pathlib

import pytest

TESTS_DIR = pathlib.Path(__file__).parent

# The files that take minutes (Ray and two-host runs through `train`), heaviest first, as
# `pytest --durations` ranks them. `make test` gives each of its two workers whole files in
# collection order (`--dist loadfile`): handed out first, no long file is left to start last,
# when the other worker may have nothing more to run; the cheap files fill the gaps.
HEAVY_FIRST = ("test_shutdown.py", "test_local_launcher.py", "test_reliability.py",
               "test_console.py", "test_hung_actors.py", "test_examples.py", "test_user_code.py",
               "test_training.py", "test_bad_input.py", "test_learner_hosts.py")


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(HEAVY_FIRST)))  # stable


@pytest.fixture(scope="session")
def local_ray():
    ray = pytest.importorskip("ray")
    # tests/ on the workers' path: test-only modules (e.g. crashing_env) import there too.
    path = os.pathsep.join(p for p in (str(TESTS_DIR), os.environ.get("PYTHONPATH")) if p)
    ray.init(num_cpus=4, include_dashboard=False, _node_ip_address="127.0.0.1",
             runtime_env={"env_vars": {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": path}})
    yield ray
    ray.shutdown()


@pytest.fixture
def closing():
    """`closing(env)` returns `env` and closes it after the test."""
    envs = []
    yield lambda env: envs.append(env) or env
    for env in envs:
        env.close()
