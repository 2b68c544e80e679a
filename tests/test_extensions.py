"""Extensions behind one interface (impala_rep/extensions.py): a user's own extension wraps the
agent and the loss, its metric reaches the learner's step and its check refuses a loss that
skips it; the built-in ones keep or drop the acting twin as acting requires."""

import dataclasses
import functools
import pickle
from typing import ClassVar

import pytest
from random_unrolls import random_unroll

from impala_rep import (
    AgentBuilder,
    Extension,
    Learner,
    LossConfig,
    MLPAgent,
    Replicator,
    impala_loss_fn,
    make_agent,
    wrap_extensions,
)
from impala_rep.agent_factory import acting_agent
from impala_rep.extensions import (
    EXTENSION_TYPES,
    BatchTransform,
    PopArt,
    RandomNetworkDistillation,
    actor_return_discount,
    batch_transforms,
    extensions_for,
)
from impala_rep.reward_scale import RewardScale

T, B, A, OBS = 4, 2, 3, 5


def _counted_loss(*, base_loss, **kwargs):
    """The base loss, with one more metric: how many columns the shard had."""
    output = (base_loss or impala_loss_fn)(**kwargs)
    columns = kwargs["actions"].shape[1]
    return output._replace(means={**output.means, "columns_seen": float(columns)})


class ColumnsSeen:
    """A user's extension: a metric added to any loss, checked to be there."""

    title = "Columns seen"
    metrics: ClassVar = {"columns_seen": "columns in the replica's shard"}
    checks_base_loss = False

    def wrap_agent(self, builder):
        return builder

    def wrap_loss(self, loss):
        return functools.partial(_counted_loss, base_loss=loss)

    def check_agent(self, agent):
        pass

    def check_output(self, output):
        if "columns_seen" not in output.means:
            raise ValueError("bad loss: ColumnsSeen's metric is missing")

    def batch_transform(self):
        return None


def _learner(loss_fn, extensions):
    return Learner(
        agent=MLPAgent(num_actions=A, hidden_sizes=(8,)),
        replicator=Replicator("cpu"),
        observation_shape=(OBS,),
        total_steps=2,
        loss_fn=loss_fn,
        extensions=extensions,
    )


def test_a_users_extension_wraps_the_loss_and_its_check_holds():
    extension = ColumnsSeen()
    assert isinstance(extension, Extension)
    builder, loss = wrap_extensions(
        [extension], agent_factory=lambda: MLPAgent(num_actions=A), loss=None
    )
    batch = random_unroll(T=T, B=B, obs_size=OBS, num_actions=A, seed=0)
    metrics = _learner(loss, [extension]).step(batch)
    assert metrics["columns_seen"] == B
    # The same extension checks a learner whose loss skipped it: refused when traced.
    with pytest.raises(ValueError, match="ColumnsSeen's metric is missing"):
        _learner(None, [extension]).step(batch)


def test_the_config_turns_on_the_built_in_extensions_in_wrapping_order():
    assert extensions_for(LossConfig(normalize_rewards=False)) == ()
    chosen = extensions_for(
        LossConfig(
            normalize_rewards=True,
            normalize_observations=True,
            popart=True,
            rnd_cost=2.0,
            rnd_step_costs_only=False,
        )
    )
    assert [type(e) for e in chosen] == list(EXTENSION_TYPES)
    assert chosen[3].cost == 2.0 and chosen[3].step_costs_only is False
    assert all(isinstance(e, Extension) for e in chosen)
    # Only reward scaling works on the learner hosts' batches.
    transforms = batch_transforms(chosen)
    assert [type(t) for t in transforms] == [RewardScale]
    assert isinstance(transforms[0], BatchTransform)


def test_the_actors_keep_returns_at_the_discount_reward_scaling_asks_for():
    """The launchers ask the extensions, not the config, what the actors keep returns for."""
    scaled = extensions_for(LossConfig(normalize_rewards=True, discount=0.97, popart=True))
    assert actor_return_discount(scaled) == pytest.approx(0.97)
    assert actor_return_discount(extensions_for(LossConfig(normalize_rewards=False))) is None

    @dataclasses.dataclass(frozen=True)
    class Returns:  # any extension may ask (the attribute is optional)
        return_discount: float

    assert actor_return_discount([*scaled, Returns(0.97)]) == pytest.approx(0.97)
    with pytest.raises(ValueError, match="discounted by"):
        actor_return_discount([*scaled, Returns(0.9)])


def test_rnd_keeps_the_policys_acting_twin_and_popart_drops_it():
    mlp = make_agent(observation_shape=(OBS,), num_actions=A)
    assert isinstance(mlp, AgentBuilder) and acting_agent(mlp).is_acting_twin
    with_rnd, _ = wrap_extensions(
        [RandomNetworkDistillation(cost=1.0)], agent_factory=mlp, loss=None
    )
    twin = acting_agent(with_rnd)
    assert twin.is_acting_twin and twin.num_actions == A
    assert type(with_rnd()).__name__ == "RNDAgent"
    with_popart, _ = wrap_extensions([PopArt(step_size=1e-3)], agent_factory=mlp, loss=None)
    assert acting_agent(with_popart) is None  # the values actors bootstrap from change
    # Ray pickles the wrapped builders to the learner and the actors.
    assert type(pickle.loads(pickle.dumps(with_popart))()).__name__ == "PopArtAgent"
