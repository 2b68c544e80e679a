"""Random network distillation (`--rnd-cost`, impala_rep/rnd.py): the bonus against numpy,
a learner step against a manual update, and the option through the train command with a
user's agent and loss (the built-in agent's run: tests/test_popart.py)."""

import json
import pathlib

import numpy as np
import pytest
import tensorflow as tf
from in_process_cli import command_in_process
from manual_update import manual_impala_loss
from random_unrolls import random_unroll

from impala_rep import Learner, LossConfig, MLPAgent, OptimizerConfig, Replicator
from impala_rep.rnd import RNDAgent, novelty_bonus, rnd_loss_fn, step_cost_batch

T, B, A, OBS = 5, 4, 3, 2
COST = 0.5
NORMALIZATION = ((0.0, 0.0), (1.0, 0.1))


def _agent():
    return RNDAgent(
        MLPAgent(num_actions=A, observation_normalization=NORMALIZATION),
        observation_normalization=NORMALIZATION,
    )


def test_the_bonus_is_the_novelty_centred_on_the_batch_mean_and_zero_where_an_episode_ended():
    rng = np.random.default_rng(0)
    novelty = rng.uniform(size=(T, B)).astype(np.float32)
    ended = rng.uniform(size=(T, B)) < 0.3
    assert ended.any() and not ended.all()
    expected = np.where(ended, 0.0, novelty - novelty.mean())  # the mean over every step
    got = novelty_bonus(novelty=tf.constant(novelty), ended=tf.constant(ended)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match="ended"):
        novelty_bonus(novelty=tf.constant(novelty), ended=tf.constant(ended[:-1]))


def test_the_target_is_the_same_random_network_in_every_process():
    # Actors, learner and a resumed learner each build their own copy.
    first, second = _agent(), _agent()
    first.build((OBS,))
    second.build((OBS,))
    assert first.non_trainable_variables  # the target exists, apart from the trained weights
    for a, b in zip(first.non_trainable_variables, second.non_trainable_variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert not set(map(id, first.non_trainable_variables)) & set(map(id, first.trainable_variables))


def test_a_learner_given_rnd_cost_without_rnds_agent_and_loss_refuses_it():
    # train() wraps the agent and loss; by hand, a plain agent would train without the bonus.
    with pytest.raises(
        ValueError,
        match=r"bad rnd_cost 5.0: a Learner does not add random network "
        r"distillation itself; give it impala_rep.rnd.RNDAgent",
    ):
        Learner(
            agent=MLPAgent(num_actions=A, hidden_sizes=(8,)),
            replicator=Replicator("cpu"),
            observation_shape=(OBS,),
            total_steps=1,
            loss=LossConfig(rnd_cost=5.0),
        )
    # An RNDAgent under a loss that adds no bonus (here the default): refused at its first step.
    learner = Learner(
        agent=_agent(),
        replicator=Replicator("cpu"),
        observation_shape=(OBS,),
        total_steps=1,
        loss=LossConfig(rnd_cost=5.0),
    )
    batch = random_unroll(T=T, B=B, obs_size=OBS, num_actions=A, seed=5)
    with pytest.raises(ValueError, match=r"bad rnd_cost 5.0: the loss adds no novelty bonus"):
        learner.step(batch)
    learner = Learner(
        agent=_agent(),
        replicator=Replicator("cpu"),
        observation_shape=(OBS,),
        total_steps=1,
        loss=LossConfig(rnd_cost=5.0),
        loss_fn=lambda **kw: rnd_loss_fn(rnd_cost=5.0, **kw),
    )
    assert learner.agent.predictor_variables
    assert learner.step(batch)["rnd_on"] == 1.0


def _step_costs(batch):
    """`batch` with the env's rewards (`prev_rewards[1:]`) a constant -1 a step, 0 where an
    episode ended (as actors record them)."""
    prev_rewards = batch.prev_rewards.copy()
    prev_rewards[1:] = np.where(batch.first[1:], 0.0, -1.0)
    return batch._replace(prev_rewards=prev_rewards)


@pytest.mark.parametrize(
    "step_costs_only, rewards, bonus_on",
    [
        (False, "random", True),  # --rnd-cost alone: every batch
        (True, "step costs", True),  # --rnd-step-costs-only on MountainCar's kind of batch
        (True, "random", False),  # ... and on any other: the IMPALA loss alone
    ],
    ids=["always", "step-costs-only-on", "step-costs-only-off"],
)
def test_a_learner_step_is_sgd_on_the_bonus_rewarded_impala_loss_plus_the_predictor_error(
    step_costs_only, rewards, bonus_on
):
    lr = 0.01
    learner = Learner(
        agent=_agent(),
        replicator=Replicator("cpu"),
        observation_shape=(OBS,),
        total_steps=10,
        optimizer=OptimizerConfig(max_grad_norm=None),
        make_optimizer=lambda: tf.keras.optimizers.SGD(lr),
        loss_fn=lambda **kw: rnd_loss_fn(rnd_cost=COST, step_costs_only=step_costs_only, **kw),
    )
    batch = random_unroll(T=T, B=B, obs_size=OBS, num_actions=A, seed=5)
    if rewards == "step costs":
        batch = _step_costs(batch)
    before = [v.numpy() for v in learner.agent.trainable_variables]
    # Actors get the policy's weights alone: the predictor stays in the learner.
    _, published = learner.get_weights()
    assert len(published) == len(learner.agent.policy.trainable_variables) < len(before)

    # By hand: the predictor's error on each next observation, centred on the batch's mean
    # with numpy, added to the rewards; the predictor's summed error added to the loss.
    agent = _agent()
    agent.build((OBS,))
    for variable, value in zip(agent.trainable_variables, before):
        variable.assign(value)
    following = tf.constant(batch.observations[1:].reshape(T * B, OBS))
    error = agent.novelty(following).numpy().reshape(T, B)
    bonus = COST * (error - error.mean())
    bonus[batch.first[1:]] = 0.0  # a step that ended an episode: obs[t+1] is the next one's
    assert batch.first[1:].any() and not batch.first[1:].all()
    if not bonus_on:
        bonus[:] = 0.0
    rewarded = batch._replace(rewards=(batch.rewards + bonus).astype(np.float32))
    with tf.GradientTape() as tape:
        loss = manual_impala_loss(agent, rewarded, LossConfig())
        if bonus_on:
            loss += tf.reduce_sum(agent.novelty(following))
    grads = [
        tf.zeros_like(v) if g is None else g
        for v, g in zip(agent.trainable_variables, tape.gradient(loss, agent.trainable_variables))
    ]

    metrics = learner.step(batch)

    after = [v.numpy() for v in learner.agent.trainable_variables]
    for w0, w1, g in zip(before, after, grads):
        np.testing.assert_allclose(w1, w0 - lr * g.numpy(), rtol=1e-4, atol=1e-6)
    predictor = len(learner.agent.predictor_variables)
    moved = max(np.abs(w1 - w0).max() for w0, w1 in zip(before[-predictor:], after[-predictor:]))
    assert (moved > 0) == bonus_on
    assert metrics["rnd_on"] == float(bonus_on)
    assert metrics["rnd_novelty"] == pytest.approx(error.mean() if bonus_on else 0.0, rel=1e-5)
    assert metrics["rnd_bonus_rms"] == pytest.approx(np.sqrt(np.mean(bonus**2)), rel=1e-4)


@pytest.mark.parametrize(
    "rewards, ended, expected",
    [
        ([[-1, -1], [-1, 5]], [[0, 0], [0, 1]], True),  # a constant cost; an episode's end aside
        ([[-1, -1], [-1, -1]], [[0, 0], [0, 0]], True),
        ([[1, 1], [1, 1]], [[0, 0], [0, 0]], False),  # a survival reward
        ([[0, 0], [0, 0]], [[0, 0], [0, 0]], False),  # no reward
        ([[-1, -1], [-10, -1]], [[0, 0], [0, 0]], False),  # costs that differ
        ([[-1, -1], [-1, -1.01]], [[0, 0], [0, 0]], False),
        ([[-1, -1], [-1, -1]], [[1, 1], [1, 1]], False),  # nothing but ends
    ],
)
def test_a_step_cost_batch_is_one_negative_reward_on_every_step_that_did_not_end(
    rewards, ended, expected
):
    got = step_cost_batch(rewards=np.array(rewards, np.float32), ended=np.array(ended, bool))
    assert bool(got) == expected


# The novelty bonus trained, resumed and evaluated through the commands (MountainCar, RND on
# by default): tests/test_popart.py's run, under PopArt, asserts RND's metrics and restore too.


@pytest.mark.launches
def test_rnd_cost_wraps_the_users_agent_and_loss(tmp_path):
    """The bonus goes beside any agent and into any loss: the custom-agent example's
    batch-norm agent and L2-regularised loss train with it (their own metric and RND's)."""
    example = pathlib.Path(__file__).resolve().parents[1] / "examples" / "custom_agent.py"
    run = tmp_path / "run"
    proc = command_in_process(
        "train",
        "--env",
        "CartPole-v1",
        "--total-frames",
        "1600",  # 10 learner steps: any step reports both metrics
        "--rnd-cost",
        "5",  # not auto's 10: the flag's own weight reaches config.json
        "--no-rnd-step-costs-only",  # CartPole's +1 a step: on every batch only so
        "--agent",
        f"{example}:make_agent",
        "--loss",
        f"{example}:l2_regularised_loss",
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
    assert json.loads((run / "config.json").read_text())["loss"]["rnd_cost"] == 5.0
    last = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["l2_loss"] > 0 and last["rnd_novelty"] > 0, last


# The wrapped agent and loss pickle without TensorFlow: tests/test_popart.py, RND's wrapper
# around PopArt's.
