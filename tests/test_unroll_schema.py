"""impala_rep/unroll.py's schema (`FIELDS`) is the one statement of the unroll's layout: the
actor's buffers, the user-code check's synthetic batch, the memory estimate and the docstring's
table all agree with it."""

import gymnasium
import numpy as np
import pytest
from gymnasium.spaces import Box, Discrete
from gymnasium.vector import AutoresetMode, SyncVectorEnv

import impala_rep.unroll as unroll_module
from impala_rep.actors.actor import Actor
from impala_rep.config import TrainConfig
from impala_rep.envs import make_vector_env
from impala_rep.host_mlp import MLPHostAgent
from impala_rep.run.code_check import _synthetic_batch
from impala_rep.run.memory_model import estimate_memory
from impala_rep.unroll import FIELDS, TIME_MAJOR_DTYPES, Unroll, UnrollSpec, markdown_table


def test_the_layout_is_what_it_was():
    """The contract, pinned: T=3, B=2, observations [4] float64, A=5."""
    spec = UnrollSpec(
        unroll_length=3, observation_shape=(4,), observation_dtype=np.float64, num_actions=5
    )
    assert spec.layout(2) == {
        "observations": ((4, 2, 4), np.float64),
        "prev_actions": ((4, 2), np.int32),
        "prev_rewards": ((4, 2), np.float32),
        "first": ((4, 2), np.bool_),
        "actions": ((3, 2), np.int32),
        "rewards": ((3, 2), np.float32),
        "terminated": ((3, 2), np.bool_),
        "truncated": ((3, 2), np.bool_),
        "truncation_values": ((3, 2), np.float32),
        "behaviour_logits": ((3, 2, 5), np.float32),
        "policy_version": ((2,), np.int64),
    }
    assert TIME_MAJOR_DTYPES == {
        "observations": None,  # the env's
        "prev_actions": None,  # the action's
        "prev_rewards": np.float32,
        "first": np.bool_,
        "actions": None,
        "rewards": np.float32,
        "terminated": np.bool_,
        "truncated": np.bool_,
        "truncation_values": np.float32,
        "behaviour_logits": np.float32,
    }
    assert Unroll._fields == tuple(field.name for field in FIELDS)


def test_actions_take_the_distributions_shape_and_dtype():
    from impala_rep.distributions import DiagGaussian, MultiCategorical

    gaussian = UnrollSpec.for_distribution(
        DiagGaussian([-1.0, -2.0, 0.0], [1.0, 2.0, 1.0]),
        unroll_length=3,
        observation_shape=(4,),
        observation_dtype=np.float32,
    ).layout(2)
    assert gaussian["actions"] == ((3, 2, 3), np.float32)
    assert gaussian["prev_actions"] == ((4, 2, 3), np.float32)
    assert gaussian["behaviour_logits"] == ((3, 2, 6), np.float32)  # means, then log-stds
    multi = UnrollSpec.for_distribution(
        MultiCategorical([2, 3]),
        unroll_length=3,
        observation_shape=(4,),
        observation_dtype=np.uint8,
    ).layout(2)
    assert multi["actions"] == ((3, 2, 2), np.int32)
    assert multi["behaviour_logits"] == ((3, 2, 5), np.float32)


def test_the_docstring_table_is_the_schemas():
    """docs/generate.py writes it (and `--check` fails when it is stale); this says so faster."""
    doc = unroll_module.__doc__
    start = doc.index("<!-- generated:unroll-fields -->\n") + len(
        "<!-- generated:unroll-fields -->\n"
    )
    assert doc[start : doc.index("<!-- /generated -->")] == markdown_table()


class _Bytes(gymnasium.Env):
    """uint8 observations [2, 3] and 5 actions: sizes unlike CartPole's."""

    observation_space = Box(0, 255, (2, 3), np.uint8)
    action_space = Discrete(5)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros((2, 3), np.uint8), {}

    def step(self, action):
        return np.full((2, 3), action, np.uint8), 1.0, bool(action == 0), False, {}


def _cartpole():
    return make_vector_env("CartPole-v1", num_envs=3, seed=0)


def _bytes():
    return SyncVectorEnv([_Bytes] * 4, autoreset_mode=AutoresetMode.SAME_STEP)


@pytest.mark.parametrize("make_env", [_cartpole, _bytes], ids=["cartpole", "uint8"])
def test_buffers_synthetic_batch_and_memory_estimate_agree_with_the_schema(make_env):
    env = make_env()
    space, num_envs, T = env.single_observation_space, env.num_envs, 7
    num_actions = int(env.single_action_space.n)
    agent = MLPHostAgent(num_actions=num_actions, hidden_sizes=(8,))
    actor = Actor(env=env, agent=agent, unroll_length=T, seed=0)
    actor.set_weights([np.zeros(s, np.float32) for s in agent.weight_shapes(space.shape)], 3)
    unroll, _ = actor.unroll()
    env.close()
    spec = UnrollSpec(
        unroll_length=T,
        observation_shape=space.shape,
        observation_dtype=space.dtype,
        num_actions=num_actions,
    )

    # The actor's buffers.
    layout = spec.layout(num_envs)
    for field in FIELDS:
        value = getattr(unroll, field.name)
        if field.is_array:
            assert (value.shape, value.dtype) == layout[field.name], field.name
        else:
            assert value == (), "the MLP is feed-forward: its state is ()"
    np.testing.assert_array_equal(unroll.policy_version, 3)

    # The synthetic batch the user's code is checked on: the time-major fields, zeros.
    batch = _synthetic_batch(space.shape, space.dtype, num_actions, T=2, B=1)
    assert list(batch) == list(TIME_MAJOR_DTYPES)
    small = UnrollSpec(2, space.shape, space.dtype, num_actions).layout(1)
    for name, value in batch.items():
        assert (value.shape, value.dtype) == small[name], name
        assert not value.any(), name

    # The memory estimate: a column is the bytes of one column of the actor's unroll (the
    # agent's state not counted), an actor's unroll E of them.
    config = TrainConfig.from_keys({"unroll_length": T, "envs_per_actor": num_envs})
    estimate = estimate_memory(config, space.shape, space.dtype, num_actions)
    first_column = [
        getattr(unroll, f.name)[(slice(None),) * f.batch_axis + (slice(0, 1),)]
        for f in FIELDS
        if f.is_array
    ]
    assert estimate.column_bytes == sum(a.nbytes for a in first_column) == spec.column_bytes()
    assert estimate.column_bytes == sum(
        a.nbytes for a in spec.empty(1) if isinstance(a, np.ndarray)
    )
    assert estimate.unroll_bytes == sum(
        getattr(unroll, f.name).nbytes for f in FIELDS if f.is_array
    )
