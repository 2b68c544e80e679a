"""Shared fixtures and the test tiers.

One embedded Ray serves every test that asks for it (Ray costs seconds to start); `train`
joins it instead of starting its own.

Tiers: a test that starts Ray or another process, or trains through a command, is marked
`launches` (by hand, or here for every test that asks for `local_ray`), one that compiles XLA
steps `compiles`. `pytest --fast`
(`make test-fast`) runs only the others, and makes a launch fail the test that tried it, so a
missing mark shows at once.
"""

import os
import pathlib
import shutil
import subprocess
import tempfile

import pytest

TESTS_DIR = pathlib.Path(__file__).parent

# The files that take longest (runs through `train`, multi-replica and multi-host workers),
# heaviest first, as `pytest --durations` ranks them. `make test` gives each worker whole files
# in collection order (`--dist loadfile --no-loadscope-reorder`; by default xdist would reorder
# them, files with the most tests first, which left the long files of few tests to the end):
# handed out first, no long file is left to start last, when the other worker may have
# nothing more to run; the cheap files fill the gaps.
HEAVY_FIRST = (
    "test_shutdown.py",
    "test_tune.py",
    "test_local_launcher.py",
    "test_action_spaces.py",
    "test_popart.py",
    "test_xla.py",
    "test_user_code.py",
    "test_examples.py",
    "test_hung_actors.py",
    "test_console.py",
    "test_loss_fn.py",
    "test_reliability.py",
    "test_rnd.py",
    "test_learner.py",
    "test_startup.py",
    "test_bad_input.py",
    "test_replicator.py",
    "test_learner_hosts.py",
    "test_no_hangs.py",
    "test_benchmarks.py",
    "test_atari_training.py",
    "test_training.py",
    "test_discrete_observations.py",
    "test_atari.py",
)


def pytest_addoption(parser):
    parser.addoption(
        "--fast",
        action="store_true",
        help="the fast tier: no test that starts Ray or a process (those marked `launches`)",
    )


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "launches: starts Ray or another process, or trains through a command (not in --fast)",
    )
    config.addinivalue_line(
        "markers", "compiles: compiles XLA steps, ~10 s each on 2 cores (not in --fast)"
    )
    # The learner's XLA compilation cache (and any other per-user cache) goes to a directory
    # of this session's, not the user's ~/.cache: the processes the tests start inherit it
    # (xdist's workers too, set here by the controller before it starts them).
    if not hasattr(config, "workerinput") and "IMPALA_REP_TEST_CACHE" not in os.environ:
        cache = tempfile.mkdtemp(prefix="impala-rep-test-cache-")
        os.environ["XDG_CACHE_HOME"] = os.environ["IMPALA_REP_TEST_CACHE"] = cache


def pytest_unconfigure(config):
    if not hasattr(config, "workerinput") and "IMPALA_REP_TEST_CACHE" in os.environ:
        shutil.rmtree(os.environ.pop("IMPALA_REP_TEST_CACHE"), ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(HEAVY_FIRST)))  # stable
    for item in items:
        if "local_ray" in item.fixturenames:
            item.add_marker(pytest.mark.launches)
    if config.getoption("--fast"):
        kept = [
            item
            for item in items
            if item.get_closest_marker("launches") is None
            and item.get_closest_marker("compiles") is None
        ]
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
        items[:] = kept
        # For the whole session, not per test: module-scoped fixtures (a worker process
        # shared by a module's tests) start before any per-test fixture. Here, after
        # collection: pytest-xdist's controller never collects, its workers do. TensorFlow is
        # imported first: its import starts processes once per process (h5py's `uname -p`,
        # matplotlib's font search through Keras), which a file whose tests import it first
        # would otherwise be blamed for when run alone. The tier imports it anyway.
        import tensorflow  # noqa: F401

        subprocess.Popen.__init__ = _refuse_launch


class LaunchInFastTier(AssertionError):
    pass


_running = ["collection"]  # the test being set up, run or torn down


def _refuse_launch(*args, **kwargs):
    raise LaunchInFastTier(f"{_running[0]} starts a process: mark it @pytest.mark.launches")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _running[0] = item.nodeid
    return (yield)


@pytest.fixture(scope="session")
def local_ray():
    ray = pytest.importorskip("ray")
    # tests/ on the workers' path: test-only modules (e.g. crashing_env) import there too.
    path = os.pathsep.join(p for p in (str(TESTS_DIR), os.environ.get("PYTHONPATH")) if p)
    ray.init(
        num_cpus=4,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        runtime_env={"env_vars": {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": path}},
    )
    yield ray
    ray.shutdown()


@pytest.fixture
def closing():
    """`closing(env)` returns `env` and closes it after the test."""
    envs = []
    yield lambda env: envs.append(env) or env
    for env in envs:
        env.close()
