"""Shared fixtures. One embedded Ray serves every test that asks for it (Ray costs ~5 s to start
here); `train` joins it instead of starting its own."""

import pytest


@pytest.fixture(scope="session")
def local_ray():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=4, include_dashboard=False, _node_ip_address="127.0.0.1",
             runtime_env={"env_vars": {"TF_CPP_MIN_LOG_LEVEL": "2"}})
    yield ray
    ray.shutdown()
