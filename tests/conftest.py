"""Shared fixtures. One embedded Ray serves every test that asks for it (Ray costs ~5 s to start
here); `train` joins it instead of starting its own."""

import os
import pathlib

import pytest

TESTS_DIR = pathlib.Path(__file__).parent


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
