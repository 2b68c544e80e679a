"""PopArt (`--popart`, impala_rep/popart.py): the statistics and the preserved head against
numpy, the normalised loss against the IMPALA loss in units of sigma, a learner step against a
manual update, a refused update, and the option through the train command (with RND, on an
agent with memory)."""

import functools
import json
import math
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from in_process_cli import command_in_process
from random_unrolls import random_unroll

from impala_rep import Learner, LossConfig, MLPAgent, OptimizerConfig, Replicator
from impala_rep.agent import AgentInputs
from impala_rep.learner.learner import NonFiniteError
from impala_rep.loss_fn import impala_loss_fn
from impala_rep.losses import impala_loss_terms
from impala_rep.popart import PopArtAgent, popart_loss_fn, preserved_head, scale_of, updated_moments
from impala_rep.vtrace import from_logits

T, B, A, OBS = 5, 4, 3, 2
BETA = 0.1  # large, so one step's move shows
MEAN, SCALE, WEIGHT, BIAS = 2.0, 1.5, 0.7, 0.3  # a head and statistics far from the start


def test_the_statistics_move_towards_the_batch_and_the_head_keeps_every_value():
    rng = np.random.default_rng(0)
    targets = rng.normal(3.0, 2.0, size=(T, B)).astype(np.float32)
    mean, second = updated_moments(
        mean=1.0,
        second_moment=5.0,
        target_mean=targets.mean(),
        target_square_mean=(targets**2).mean(),
        step_size=BETA,
    )
    assert float(mean) == pytest.approx(1.0 + BETA * (targets.mean() - 1.0), rel=1e-6)
    assert float(second) == pytest.approx(5.0 + BETA * ((targets**2).mean() - 5.0), rel=1e-6)
    assert float(scale_of(mean=mean, second_moment=second)) == pytest.approx(
        np.sqrt(float(second) - float(mean) ** 2), rel=1e-6
    )
    assert float(scale_of(mean=3.0, second_moment=9.0)) == pytest.approx(1e-4)  # bounded below

    h = rng.normal(size=100).astype(np.float32)
    weight, bias = preserved_head(
        weight=WEIGHT,
        bias=BIAS,
        old_mean=MEAN,
        old_scale=SCALE,
        new_mean=float(mean),
        new_scale=4.0,
    )
    np.testing.assert_allclose(
        4.0 * (float(weight) * h + float(bias)) + float(mean),
        SCALE * (WEIGHT * h + BIAS) + MEAN,
        rtol=1e-5,
        atol=1e-5,
    )


def _agent(seed=0):
    """A built PopArtAgent whose weights are drawn from `seed`, with the head and statistics
    above (the same in every call with the same seed)."""
    agent = PopArtAgent(MLPAgent(num_actions=A))
    agent.build((OBS,))
    return _set(agent, seed)


def _learner(**kwargs):
    """A Learner of a PopArtAgent with `_agent()`'s values (built by the Learner, inside its
    replicator's scope)."""
    learner = Learner(
        agent=PopArtAgent(MLPAgent(num_actions=A)),
        replicator=Replicator("cpu"),
        observation_shape=(OBS,),
        total_steps=10,
        **kwargs,
    )
    _set(learner.agent, 0)
    return learner


def _set(agent, seed):
    rng = np.random.default_rng(seed)
    for variable in agent.policy.trainable_variables:
        variable.assign(rng.normal(scale=0.5, size=variable.shape).astype(np.float32))
    agent.trainable_variables[-1].assign([WEIGHT, BIAS])  # the head (w, b)
    agent.non_trainable_variables[-1].assign([MEAN, SCALE**2 + MEAN**2])  # mean, second moment
    return agent


def _inputs(batch):
    return AgentInputs(batch.observations, batch.prev_actions, batch.prev_rewards, batch.first)


def _transitions(batch, config):
    """V-trace's rewards and discounts, written out (the learner's `vtrace_inputs`)."""
    discounts = config.discount * (1.0 - (batch.terminated | batch.truncated)).astype(np.float32)
    cut = batch.truncated & ~batch.terminated
    rewards = batch.rewards + np.where(cut, config.discount * batch.truncation_values, 0)
    return rewards.astype(np.float32), discounts.astype(np.float32)


def _unnormalised_terms(agent, batch, config):
    """The IMPALA loss's weighted parts on the agent's own (unnormalised) values."""
    rewards, discounts = _transitions(batch, config)
    out, _ = agent.unroll(_inputs(batch), ())
    _, _, _, terms = impala_loss_terms(
        target_logits=out.policy_logits[:-1],
        behaviour_logits=batch.behaviour_logits,
        actions=batch.actions,
        values=out.baseline[:-1],
        bootstrap_value=out.baseline[-1],
        rewards=rewards,
        discounts=discounts,
        baseline_cost=config.baseline_cost,
        entropy_cost=config.entropy_cost,
        surrogate_clip=config.surrogate_clip,
    )
    return terms, out


@pytest.mark.parametrize("surrogate_clip", [None, 0.2])
def test_the_normalised_loss_is_the_impala_loss_in_units_of_sigma(surrogate_clip):
    """Values and rewards normalised: the advantages are divided by sigma and the value
    error too, so the policy term is 1/sigma of the IMPALA loss's and the value term 1/sigma^2."""
    config = LossConfig(surrogate_clip=surrogate_clip, entropy_cost=0.01)
    agent = _agent()
    batch = random_unroll(T=T, B=B, obs_size=OBS, num_actions=A, seed=1)
    terms, out = _unnormalised_terms(agent, batch, config)
    rewards, discounts = _transitions(batch, config)
    got = popart_loss_fn(
        step_size=BETA,
        agent=agent,
        inputs=_inputs(batch),
        outputs=out,
        behaviour_logits=batch.behaviour_logits,
        actions=batch.actions,
        rewards=rewards,
        discounts=discounts,
        config=config,
    )
    assert float(got.terms["pg_loss"]) == pytest.approx(float(terms["pg_loss"]) / SCALE, rel=1e-4)
    assert float(got.terms["baseline_loss"]) == pytest.approx(
        float(terms["baseline_loss"]) / SCALE**2, rel=1e-4
    )
    assert float(got.terms["entropy_loss"]) == pytest.approx(float(terms["entropy_loss"]), rel=1e-5)
    assert (float(got.means["popart_mean"]), float(got.means["popart_scale"])) == pytest.approx(
        (MEAN, SCALE), rel=1e-6
    )
    # The same loss without PopArt is the IMPALA loss, which differs: the test has teeth.
    plain = impala_loss_fn(
        agent=agent,
        inputs=_inputs(batch),
        outputs=out,
        behaviour_logits=batch.behaviour_logits,
        actions=batch.actions,
        rewards=rewards,
        discounts=discounts,
        config=config,
    )
    assert abs(float(plain.terms["baseline_loss"]) - float(got.terms["baseline_loss"])) > 1e-2


def _without_target_moments(**kwargs):
    output = impala_loss_fn(**kwargs)
    return output._replace(
        means={k: v for k, v in output.means.items() if not k.startswith("vtrace_target")}
    )


def test_a_base_loss_that_reports_no_target_moments_is_named():
    config, agent = LossConfig(), _agent()
    batch = random_unroll(T=T, B=B, obs_size=OBS, num_actions=A, seed=1)
    _, out = _unnormalised_terms(agent, batch, config)
    rewards, discounts = _transitions(batch, config)
    with pytest.raises(ValueError, match=r"base loss must report means \['vtrace_target_mean', "):
        popart_loss_fn(
            step_size=BETA,
            base_loss=_without_target_moments,
            agent=agent,
            inputs=_inputs(batch),
            outputs=out,
            behaviour_logits=batch.behaviour_logits,
            actions=batch.actions,
            rewards=rewards,
            discounts=discounts,
            config=config,
        )


def test_a_learner_step_is_sgd_on_the_normalised_loss_then_the_statistics_move_and_values_stay():
    lr, config = 0.01, LossConfig(popart=True)
    learner = _learner(
        loss=config,
        optimizer=OptimizerConfig(max_grad_norm=None),
        make_optimizer=lambda: tf.keras.optimizers.SGD(lr),
        loss_fn=functools.partial(popart_loss_fn, step_size=BETA),
    )
    batch = random_unroll(T=T, B=B, obs_size=OBS, num_actions=A, seed=2)
    # Actors get the statistics with the weights: they report the values the learner does.
    assert len(learner.get_weights()[1]) == len(learner.agent.trainable_variables) + 1

    # By hand: SGD on pg / sigma + baseline / sigma^2 + entropy, then the statistics moved
    # towards the V-trace targets of the values before the step, and the head rescaled.
    agent = _agent()
    with tf.GradientTape() as tape:
        terms, out = _unnormalised_terms(agent, batch, config)
        loss = terms["pg_loss"] / SCALE + terms["baseline_loss"] / SCALE**2 + terms["entropy_loss"]
    grads = tape.gradient(loss, agent.trainable_variables)
    for variable, grad in zip(agent.trainable_variables, grads):
        variable.assign_sub(lr * grad)
    rewards, discounts = _transitions(batch, config)
    targets = from_logits(
        behaviour_policy_logits=batch.behaviour_logits,
        target_policy_logits=out.policy_logits[:-1],
        actions=batch.actions,
        discounts=discounts,
        rewards=rewards,
        values=out.baseline[:-1],
        bootstrap_value=out.baseline[-1],
    ).vs.numpy()
    mean = MEAN + BETA * (targets.mean() - MEAN)
    second = SCALE**2 + MEAN**2 + BETA * ((targets**2).mean() - SCALE**2 - MEAN**2)
    scale = np.sqrt(second - mean**2)
    stepped_values = agent.unroll(_inputs(batch), ())[0].baseline.numpy()  # old statistics
    weight, bias = agent.trainable_variables[-1].numpy()
    expected = [v.numpy() for v in agent.trainable_variables[:-1]] + [
        [weight * SCALE / scale, (SCALE * bias + MEAN - mean) / scale]
    ]

    learner.step(batch)

    for got, want in zip(learner.agent.trainable_variables, expected):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(
        learner.agent.non_trainable_variables[-1].numpy(), [mean, second], rtol=1e-5
    )
    assert abs(scale - SCALE) > 1e-2  # the statistics moved...
    np.testing.assert_allclose(  # ...and the values the stepped weights give did not
        learner.agent.unroll(_inputs(batch), ())[0].baseline.numpy(),
        stepped_values,
        rtol=1e-4,
        atol=1e-4,
    )


def test_a_refused_update_leaves_the_statistics_and_the_head_alone():
    learner = _learner(
        loss=LossConfig(popart=True), loss_fn=functools.partial(popart_loss_fn, step_size=BETA)
    )
    batch = random_unroll(T=T, B=B, obs_size=OBS, num_actions=A, seed=3)
    rewards = batch.rewards.copy()
    rewards[0, 0] = np.nan
    before = [
        v.numpy() for v in learner.agent.non_trainable_variables + learner.agent.trainable_variables
    ]
    with pytest.raises(NonFiniteError):
        learner.step(batch._replace(rewards=rewards))
    after = [
        v.numpy() for v in learner.agent.non_trainable_variables + learner.agent.trainable_variables
    ]
    for b, a in zip(before, after):
        np.testing.assert_array_equal(a, b)


def test_a_learner_asked_for_popart_without_its_loss_refuses_it():
    learner = _learner(loss=LossConfig(popart=True))  # the default loss
    with pytest.raises(ValueError, match="bad popart True: the loss does not normalise the values"):
        learner.step(random_unroll(T=T, B=B, obs_size=OBS, num_actions=A, seed=4))
    assert learner.num_steps == 0


@pytest.mark.launches
def test_popart_with_the_novelty_bonus_trains_resumes_and_evaluates_through_the_commands(tmp_path):
    """MountainCar: PopArt under random network distillation (auto on for vectors), each
    wrapping the run's agent and loss; the statistics and RND's predictor and target come back
    from the checkpoint. It is RND's run through the commands too (tests/test_rnd.py has none).
    The agent wrapped has memory (`--use-lstm` over the MLP), so its recurrent state passes
    through both wrappers, in the actors, the learner and the greedy evaluation: this is the
    run of an agent with memory on vector observations through the commands too (its network
    alone: tests/test_networks.py)."""
    run = tmp_path / "run"
    proc = command_in_process(
        "train",
        "--env",
        "MountainCar-v0",
        "--use-lstm",
        "--total-frames",
        "6400",
        "--popart",
        "--popart-step-size",
        "0.001",
        "--launcher",
        "local",
        "--num-actors",
        "1",
        "--envs-per-actor",
        "8",
        "--batch-size",
        "8",
        "--logdir",
        str(run),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    agent = json.loads((run / "config.json").read_text())["agent"]
    assert agent["use_lstm"] is True and agent["network"] == "auto", agent
    loss = json.loads((run / "config.json").read_text())["loss"]
    # RND unset is auto: on for vectors, its weight in config.json (an explicit `--rnd-cost`
    # reaching it: tests/test_rnd.py).
    assert loss["popart"] is True and loss["rnd_cost"] == 10.0, loss
    first = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in first if r.get("loss") is not None][-1]
    # MountainCar's -1 a step: the statistics have left their start (0, 1), and RND ran.
    assert last["popart_mean"] < -0.01 and last["popart_scale"] != 1.0, last
    assert last["rnd_on"] > 0
    assert math.isfinite(first[-1]["rnd_novelty"]) and first[-1]["rnd_novelty"] > 0, first[-1]
    assert first[-1]["rnd_bonus_rms"] > 0
    # Every key the run reported (PopArt's, RND's, reward scaling's, the loss's, the run's) is
    # in the generated metrics reference.
    reference = pathlib.Path(__file__).resolve().parents[1] / "docs" / "reference" / "metrics.md"
    undocumented = {k for r in first for k in r if f"| `{k}` |" not in reference.read_text()}
    assert not undocumented, f"docs/reference/metrics.md does not document {sorted(undocumented)}"
    # RND's predictor and target come back too: a resumed run and a greedy evaluation build
    # the same agent (a mismatch fails to restore).
    proc = command_in_process("train", "--resume", str(run), "--total-frames", "9600")
    assert proc.returncode == 0, proc.stderr[-2000:]
    resumed = [
        json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()[len(first) :]
    ]
    assert resumed and resumed[-1]["frames"] >= 9600
    trained = [r for r in resumed if r.get("loss") is not None]
    assert trained and all(r["rnd_novelty"] > 0 for r in trained), resumed  # still with RND
    # Restored, not restarted at (0, 1): at a step size of 0.001 the mean moves 0.1% of the
    # way a step, so a restart could not be back within 80% of it by the first report.
    assert trained and trained[0]["popart_mean"] < 0.8 * last["popart_mean"] < 0, (last, trained[0])
    proc = command_in_process("evaluate", str(run), "--episodes", "2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "greedy policy, 2 episodes" in proc.stdout


@pytest.mark.launches
def test_the_wrapped_agent_and_loss_pickle_without_tensorflow():
    """The driver imports no TensorFlow, and Ray pickles the agent factory and the loss to
    the learner and actor processes: the extensions' wrappers (PopArt's and RND's, RND's
    around PopArt's around the built-in agent) must be both."""
    code = """
import pickle, sys
from impala_rep.config import TrainConfig
from impala_rep.envs.factory import describe_env
from impala_rep.run.agents import agent_factory_for, with_extensions
config = TrainConfig.from_keys({"env": "MountainCar-v0", "popart": True, "rnd_cost": 10.0})
spec = describe_env("MountainCar-v0")
base = agent_factory_for(config.replace({"popart": False, "rnd_cost": 0.0}), spec)
agent, loss = pickle.loads(
    pickle.dumps(with_extensions(config, spec, agent_factory=base, loss=None))
)
assert "tensorflow" not in sys.modules, "the driver imported TensorFlow"
built = agent()
print(type(built).__name__, type(built.policy).__name__, type(built.policy.policy).__name__)
print(built.policy.policy.num_actions)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["RNDAgent", "PopArtAgent", "MLPAgent", "3"]


def test_a_users_loss_popart_cannot_build_on_is_refused_before_anything_starts(tmp_path, capsys):
    """The user's loss is checked as the run will call it: under PopArt, as its base loss."""
    from in_process_cli import refused_in_process

    # A module name of its own: other files import their own `my_loss` in the same process.
    code = tmp_path / "popart_base_loss.py"
    code.write_text(
        "from impala_rep import impala_loss_fn\n\n"
        "def no_means(**kwargs):\n"
        "    return impala_loss_fn(**kwargs)._replace(means={})\n"
    )
    last = refused_in_process(
        ["train", "--popart", "--loss", f"{code}:no_means", "--logdir", str(tmp_path / "run")],
        capsys,
    )
    assert f"bad loss '{code}:no_means'" in last, last
    assert "base loss must report means ['vtrace_target_mean', 'vtrace_target_square_mean']" in last
    assert not (tmp_path / "run").exists()
