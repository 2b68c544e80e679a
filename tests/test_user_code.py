"""`module:attribute` specs (`--agent`, `--loss`): clear errors, and user code that reaches
workers."""

import json
import os
import subprocess
import sys

import pytest
from in_process_cli import refused_in_process
from user_env_files import write_env

from impala_rep.config import TrainConfig
from impala_rep.config.code_specs import parse_code_spec
from impala_rep.run.user_code import agent_builder, load

FACTORY = """
class TinyAgent:
    def __init__(self, *, observation_shape, num_actions):
        self.observation_shape, self.num_actions = observation_shape, num_actions

def make(*, observation_shape, num_actions):
    return TinyAgent(observation_shape=observation_shape, num_actions=num_actions)

def no_keywords(shape):
    return None

NOT_CALLABLE = 3
"""


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    (tmp_path / "my_agents.py").write_text(FACTORY)
    (tmp_path / "broken.py").write_text("raise RuntimeError('boom')\n")
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    for name in ("my_agents", "broken"):
        sys.modules.pop(name, None)


@pytest.mark.parametrize("spec", ["no_colon", "a:b:c", ":make", "mod:", "mod:not-an-identifier", 3])
def test_bad_form_is_rejected_without_importing(spec):
    with pytest.raises(
        ValueError, match=r"^bad agent .*expected 'module:factory' or 'path/to/file.py:factory'"
    ):
        parse_code_spec(spec, what="agent")
    with pytest.raises(ValueError, match=r"^bad agent"):
        TrainConfig.from_keys(dict(agent=spec))


@pytest.mark.parametrize(
    "spec, message",
    [
        ("no_such_module_xyz:make", "no module named 'no_such_module_xyz'"),
        ("missing.py:make", "no file 'missing.py'"),
        ("my_agents:nothing", "module 'my_agents' has no attribute 'nothing'"),
        ("my_agents.py:NOT_CALLABLE", "'NOT_CALLABLE' is a int, not callable"),
        (
            "my_agents:no_keywords",
            "must accept the keyword arguments observation_shape and num_actions",
        ),
        ("broken:make", "importing 'broken' raised RuntimeError: boom"),
        ("broken.py:make", "importing 'broken.py' raised RuntimeError: boom"),
    ],
)
def test_bad_names_give_one_line_errors(user_dir, spec, message):
    with pytest.raises(ValueError) as err:
        agent_builder(spec, observation_shape=(4,), num_actions=2)
    assert str(err.value).startswith(f"bad agent {spec!r}: ") and message in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("spec", ["my_agents:make", "my_agents.py:make"])
def test_factory_becomes_a_zero_argument_builder(user_dir, spec):
    builder = agent_builder(spec, observation_shape=[4], num_actions=2)
    agent = builder()
    assert (agent.observation_shape, agent.num_actions) == ((4,), 2)


@pytest.mark.launches
def test_user_code_is_pickled_by_value_for_workers(user_dir, tmp_path_factory):
    import ray.cloudpickle

    builder = agent_builder("my_agents.py:make", observation_shape=(4,), num_actions=2)
    payload = tmp_path_factory.mktemp("payload") / "builder.pkl"
    payload.write_bytes(ray.cloudpickle.dumps(builder))
    # A process that cannot import my_agents (another directory) still builds the agent.
    code = (
        "import pickle, sys; agent = pickle.load(open(sys.argv[1], 'rb'))(); "
        "print(type(agent).__name__, agent.num_actions)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(payload)],
        cwd=payload.parent,
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["TinyAgent", "2"]


def test_loss_spec_loads_a_function(user_dir):
    assert callable(load("my_agents:make", what="loss"))
    with pytest.raises(
        ValueError, match=r"^bad loss 'x'.*'module:function' or 'path/to/file.py:function'"
    ):
        load("x", what="loss")


EXAMPLE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "custom_agent.py"
)


# In this process (tests/in_process_cli.py): the refusals come before anything starts. The
# command's exit 2 in a new process: test_bad_input.py; a real file named by the command in a
# new process: the training runs below.
@pytest.mark.parametrize(
    "flag, spec, message",
    [
        ("--agent", "make_agent", "bad agent 'make_agent': expected 'module:factory'"),
        (
            "--agent",
            "no_such_module_xyz:make",
            "bad agent 'no_such_module_xyz:make': no module named",
        ),
        ("--agent", f"{EXAMPLE}:nothing", "has no attribute 'nothing'"),
        (
            "--loss",
            "nowhere/loss.py:fn",
            "bad loss 'nowhere/loss.py:fn': no file 'nowhere/loss.py'",
        ),
        (
            "--agent",
            f"{EXAMPLE}:L2_COST",
            f"bad agent '{EXAMPLE}:L2_COST': 'L2_COST' is a float, not callable",
        ),
    ],
)
def test_cli_bad_agent_or_loss_exits_2_and_writes_nothing(
    tmp_path, monkeypatch, capsys, flag, spec, message
):
    monkeypatch.chdir(tmp_path)
    last = refused_in_process(["train", flag, spec, "--logdir", str(tmp_path / "run")], capsys)
    assert last.startswith("impala-rep: error: ") and message in last, last
    assert not (tmp_path / "run").exists()


SIBLING_HELPER = '''
import tensorflow as tf

from impala_rep import MLPAgent, impala_loss_fn

HIDDEN_SIZES = (32,)


class SiblingAgent(MLPAgent):
    """Defined beside my_agent.py, in no installed package: it reaches the workers by value."""


def sibling_loss(*, rewards, **tensors):
    """The IMPALA loss, with a metric of its own beside the IMPALA loss's parts."""
    output = impala_loss_fn(rewards=rewards, **tensors)
    return output._replace(means={**output.means, "sibling_reward": tf.reduce_mean(rewards)})
'''

SIBLING_USER = """
import helper
from helper import HIDDEN_SIZES


def make_agent(*, observation_shape, num_actions):
    return helper.SiblingAgent(num_actions=num_actions, hidden_sizes=HIDDEN_SIZES)


def my_loss(**tensors):
    return helper.sibling_loss(**tensors)
"""


@pytest.mark.launches
@pytest.mark.parametrize("launcher", ["ray", "local"])
def test_a_file_that_imports_a_module_beside_it_trains(tmp_path, launcher):
    # my_agent.py imports helper.py from its own folder, and masked_cartpole.py (the env)
    # masking.py; that folder is neither the working directory nor on any path: the driver
    # finds the siblings while importing the files, named relative to the working directory,
    # and Ray's learner and actor processes get them by value. The default launcher starts
    # its own embedded Ray, the learner a Ray process of its own too (--learner-process ray;
    # the example's agent and loss on two replicas: test_examples.py).
    code, elsewhere, logdir = tmp_path / "code", tmp_path / "elsewhere", tmp_path / "run"
    write_env(code, "MaskedCartPole-v0")
    elsewhere.mkdir()
    (code / "helper.py").write_text(SIBLING_HELPER)
    (code / "my_agent.py").write_text(SIBLING_USER)
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "PYTHONPATH")}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "impala_rep",
            "train",
            "--env",
            "../code/masked_cartpole.py:MaskedCartPole-v0",
            "--agent",
            "../code/my_agent.py:make_agent",
            "--loss",
            "../code/my_agent.py:my_loss",
            "--launcher",
            launcher,
            *(["--learner-process", "ray"] if launcher == "ray" else []),
            "--total-frames",
            "3200",
            "--num-actors",
            "1",
            "--envs-per-actor",
            "16",
            "--unroll-length",
            "20",
            "--batch-size",
            "16",
            "--logdir",
            str(logdir),
            # Evaluation while training: the evaluator (a Ray process of its own, or a thread)
            # builds the user's agent and finds the user's env as the actors do.
            "--eval-every",
            "1600",
            "--eval-episodes",
            "2",
        ],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(env, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    config = json.loads((logdir / "config.json").read_text())
    # Recorded with absolute paths, which work from any directory.
    assert config["env"]["id"] == f"{code / 'masked_cartpole.py'}:MaskedCartPole-v0"
    assert config["agent"]["factory"] == f"{code / 'my_agent.py'}:make_agent"
    assert config["loss"]["function"] == f"{code / 'my_agent.py'}:my_loss"
    if launcher == "ray":
        assert config["run"]["learner_process"] == "ray"
    records = [json.loads(line) for line in (logdir / "metrics.jsonl").read_text().splitlines()]
    # 3,200 frames in batches of 20 x 16: 10 batches, each trained on `passes` times.
    assert records[-1]["learner_steps"] == 10 * TrainConfig().learner.passes
    # The loss's own metric reaches metrics.jsonl next to the IMPALA loss's parts.
    assert records[-1]["sibling_reward"] > 0 and records[-1]["pg_loss"] is not None
    # The final weights were evaluated: the last record holds it, the summary shows it.
    assert records[-1]["eval_frames"] == records[-1]["frames"] == 3200
    assert records[-1]["eval_episodes"] == 2 and records[-1]["eval_return_mean"] > 0
    assert "last evaluation (greedy)" in proc.stdout
    if launcher == "ray":  # evaluated from a folder where the relative names do not resolve
        evaluate = subprocess.run(
            [sys.executable, "-m", "impala_rep", "evaluate", str(logdir), "--episodes", "2"],
            cwd=code / "..",
            capture_output=True,
            text=True,
            timeout=300,
            env=dict(env, TF_CPP_MIN_LOG_LEVEL="2"),
        )
        assert evaluate.returncode == 0, evaluate.stderr[-3000:]
        assert "greedy policy, 2 episodes" in evaluate.stdout


@pytest.mark.launches
def test_modules_beside_a_file_are_pickled_by_value(tmp_path, monkeypatch, tmp_path_factory):
    import ray.cloudpickle

    (tmp_path / "helper_beside.py").write_text("SCALE = 7\ndef scale(x):\n    return SCALE * x\n")
    (tmp_path / "uses_helper.py").write_text(
        "import helper_beside\n\ndef make(*, observation_shape, num_actions):\n"
        "    return helper_beside.scale(num_actions)\n"
    )
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))
    try:
        builder = agent_builder(
            f"{tmp_path / 'uses_helper.py'}:make", observation_shape=(4,), num_actions=2
        )
        assert str(tmp_path) not in sys.path  # only while importing
        payload = tmp_path_factory.mktemp("payload") / "builder.pkl"
        payload.write_bytes(ray.cloudpickle.dumps(builder))
    finally:
        for name in ("uses_helper", "helper_beside"):
            module = sys.modules.pop(name, None)
            if module is not None and name in ray.cloudpickle.list_registry_pickle_by_value():
                ray.cloudpickle.unregister_pickle_by_value(module)
    code = "import pickle, sys; print(pickle.load(open(sys.argv[1], 'rb'))())"
    proc = subprocess.run(
        [sys.executable, "-c", code, str(payload)],
        cwd=payload.parent,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["14"]
