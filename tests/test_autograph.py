"""AutoGraph for the learner's step (`--learner-autograph`): off only for the built-in MLP and
loss, the same updates without it, and users' control flow still converted where it is on."""

import pathlib

import numpy as np
import pytest
import tensorflow as tf
from random_unrolls import random_unroll

from impala_rep import Learner, MLPAgent, OptimizerConfig, Replicator, impala_loss_fn
from impala_rep.loss_fn import LossOutput
from impala_rep.run.cli import config_from_args, parse_args
from impala_rep.run.prepare import prepare

T, B, A, OBS = 4, 6, 3, 5
EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "custom_agent.py"


def _resolved(*argv):
    config = config_from_args(parse_args(["train", *argv]))
    return config.learner.autograph, prepare(config).config.learner.autograph


def test_auto_is_off_only_for_the_built_in_mlp_and_loss(tmp_path):
    assert _resolved() == (None, False)  # CartPole
    assert _resolved("--learner-devices", "cpu:2") == (None, False)  # any devices
    assert _resolved("--env", "MinAtar/Breakout-v1") == (None, True)  # a CNN
    assert _resolved("--agent", f"{EXAMPLE}:make_agent") == (None, True)  # a user's agent
    # A module name of its own: test_xla.py imports another file as `my_loss` (a second file of
    # one name in one process is refused).
    (tmp_path / "autograph_loss.py").write_text("from impala_rep import impala_loss_fn as same\n")
    assert _resolved("--loss", f"{tmp_path / 'autograph_loss.py'}:same") == (None, True)  # a loss
    assert _resolved("--learner-autograph") == (True, True)
    assert _resolved("--env", "MinAtar/Breakout-v1", "--no-learner-autograph") == (False, False)


def halved_when_rewards_are_large(**tensors):
    """Python control flow on a tensor: it traces only if AutoGraph converts it."""
    out = impala_loss_fn(**tensors)
    loss = out.loss
    if tf.reduce_max(tf.abs(tensors["rewards"])) > 1.0:
        loss = loss / 2.0
    return LossOutput(loss, out.sums, out.means)


def _learners(loss_fn, *switches):
    replicator = Replicator("cpu")
    learners = [
        Learner(
            agent=MLPAgent(num_actions=A, hidden_sizes=(8,)),
            replicator=replicator,
            observation_shape=(OBS,),
            total_steps=10,
            loss_fn=loss_fn,
            optimizer=OptimizerConfig(learning_rate=1e-2),
            autograph=on,
        )
        for on in switches
    ]
    for other in learners[1:]:
        other.agent.set_weights(learners[0].agent.get_weights())
    return learners


def test_the_update_without_autograph_is_the_update_with_it():
    converted, as_written = _learners(None, True, False)
    for seed in range(2):
        batch = random_unroll(T=T, B=B, obs_size=OBS, num_actions=A, seed=seed)
        assert converted.step(batch, passes=2) == pytest.approx(as_written.step(batch, passes=2))
    for a, b in zip(converted.agent.get_weights(), as_written.agent.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_a_loss_with_python_control_flow_on_tensors_needs_autograph():
    converted, as_written = _learners(halved_when_rewards_are_large, True, False)
    batch = random_unroll(T=T, B=B, obs_size=OBS, num_actions=A, seed=3)  # rewards beyond 1
    assert np.isfinite(converted.step(batch)["loss"])
    with pytest.raises(tf.errors.OperatorNotAllowedInGraphError):
        as_written.step(batch)
