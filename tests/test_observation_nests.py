"""Observations as nests (an image among other parts, `impala_rep.observation_nest`): the
helpers, the unroll schema, the agent's torso, the actor's unrolls, the learner's update, and
a run through the commands. tests/test_dict_observations.py has the env factory's side;
tests/test_learner.py's two-replica case "nest" the split of every part over replicas."""

import json
import pathlib

import gymnasium
import numpy as np
import pytest
import tensorflow as tf
from in_process_cli import command_in_process, refused_in_process
from learner_worker import NEST_SHAPE, make_nest_batch
from manual_update import manual_impala_loss

from impala_rep import Replicator
from impala_rep.actors.actor import Actor
from impala_rep.agent import AgentInputs
from impala_rep.agent_factory import make_agent
from impala_rep.config import LossConfig, OptimizerConfig
from impala_rep.envs import make_vector_env
from impala_rep.learner.learner import Learner
from impala_rep.networks import MinAtarTorso, NestTorso, NetworkAgent
from impala_rep.observation_nest import (
    describe,
    map_leaves,
    rows,
    set_rows,
    shape_of,
)
from impala_rep.run.run_log import read_metrics
from impala_rep.unroll import UnrollSpec, concat_unrolls, slice_columns

# tests/observation_spaces_env.py: "image" [5, 5, 3] uint8 (every cell the step number mod 11)
# and "direction" Discrete(4) (the step number mod 4), kept; "mission" (Text) left out.
GRID = "observation_spaces_env:GridObservation-v0"
MIXED = "observation_spaces_env:MixedObservation-v0"  # a state Box and a MultiDiscrete
KEYS = ("image", "direction")
GRID_SHAPE = {"direction": (4,), "image": (5, 5, 3)}


def test_shapes_take_one_form_with_sorted_keys_and_leaves_follow_them():
    assert shape_of([4, np.int64(2)]) == (4, 2)
    shape = shape_of({"z": [3], "a": (2, 2, 1)})
    assert list(shape) == ["a", "z"] and shape == {"a": (2, 2, 1), "z": (3,)}
    dtypes = {"a": np.uint8, "z": np.float32}
    assert describe(shape, dtypes) == "{a: [2, 2, 1] uint8, z: [3] float32}"
    assert describe((4,), np.float32) == "[4] float32"
    batch = {"z": np.arange(6).reshape(2, 3), "a": np.zeros((2, 1))}
    assert map_leaves(lambda x: x.shape, batch) == {"a": (2, 1), "z": (2, 3)}
    np.testing.assert_array_equal(rows(batch, 1)["z"], [3, 4, 5])
    set_rows(batch, 0, {"a": [7.0], "z": [9, 9, 9]})
    assert batch["a"][0, 0] == 7.0 and list(batch["z"][0]) == [9, 9, 9]


def test_the_unroll_schema_lays_out_each_part_and_joins_and_splits_them_by_column():
    spec = UnrollSpec(
        unroll_length=3,
        observation_shape=GRID_SHAPE,
        observation_dtype={"direction": np.uint8, "image": np.uint8},
        num_actions=4,
    )
    empty = spec.empty(2)
    assert {k: (v.shape, v.dtype) for k, v in empty.observations.items()} == {
        "direction": ((4, 2, 4), np.uint8),
        "image": ((4, 2, 5, 5, 3), np.uint8),
    }
    zeros = spec.zeros(2)["observations"]
    assert zeros["image"].shape == (4, 2, 5, 5, 3) and not zeros["image"].any()
    flat = UnrollSpec(
        unroll_length=3, observation_shape=(4 + 75,), observation_dtype=np.uint8, num_actions=4
    )
    assert spec.column_bytes() == flat.column_bytes()  # the same bytes, split in two parts
    rng = np.random.default_rng(0)
    unrolls = []
    for columns in (2, 3):
        u = spec.empty(columns)._replace(initial_state=())
        for array in (*u.observations.values(), *u[1:-2], u.policy_version):
            array[...] = rng.integers(0, 4, array.shape)
        unrolls.append(u)
    joined = concat_unrolls(unrolls)
    for key in GRID_SHAPE:
        np.testing.assert_array_equal(
            joined.observations[key],
            np.concatenate([u.observations[key] for u in unrolls], axis=1),
        )
        np.testing.assert_array_equal(
            slice_columns(joined, 1, 4).observations[key], joined.observations[key][:, 1:4]
        )
    np.testing.assert_array_equal(joined.actions, np.concatenate([u.actions for u in unrolls], 1))


def test_the_nest_torso_joins_each_images_features_and_the_vectors_in_key_order():
    torso = NestTorso(["image"], "minatar")
    rng = np.random.default_rng(1)
    observation = {
        "image": rng.integers(0, 256, (3, 5, 5, 3), np.uint8),
        "direction": np.eye(4, dtype=np.uint8)[[0, 2, 3]],
    }
    features = torso(observation).numpy()
    # By hand: the MinAtar torso's layers (made by the call) on the pixels / 255, after the
    # direction's code as floats ("direction" < "image": its part comes first), then the
    # joint ReLU layer.
    *image_layers, joint = torso.layers
    reference = MinAtarTorso()
    reference.layers = image_layers
    image = reference(tf.constant(observation["image"], tf.float32) / 255.0).numpy()
    joined = np.concatenate([observation["direction"].astype(np.float32), image], axis=-1)
    kernel, bias = (v.numpy() for v in joint.weights)
    assert features.shape == (3, 256)
    np.testing.assert_allclose(features, np.maximum(joined @ kernel + bias, 0), atol=1e-5)


def test_agents_for_nests_refuse_what_cannot_encode_them():
    with pytest.raises(ValueError, match="^network='mlp' takes vectors; observations with"):
        make_agent(observation_shape=GRID_SHAPE, num_actions=4, network="mlp")
    with pytest.raises(ValueError, match="^network='shallow' needs images of at least 20x20"):
        make_agent(observation_shape=GRID_SHAPE, num_actions=4, network="shallow")
    with pytest.raises(ValueError, match="^the built-in agents take a nest of observations only"):
        make_agent(observation_shape={"a": (3,), "b": (2,)}, num_actions=4)
    with pytest.raises(ValueError, match="^a nest of observations needs images"):
        make_agent(observation_shape={"a": (3,), "b": (2, 2)}, num_actions=4)
    agent = make_agent(observation_shape=GRID_SHAPE, num_actions=4)()  # auto: minatar, small
    with pytest.raises(ValueError, match="^this agent takes a nest whose images are"):
        agent.build({"direction": (4,), "image": (5, 5)})


def test_the_actors_unrolls_carry_each_part_and_value_a_cut_episodes_last_nest():
    env = make_vector_env(GRID, num_envs=2, seed=0, observation_keys=KEYS, max_episode_steps=3)
    agent = NetworkAgent(num_actions=2, torso="minatar", image_keys=("image",))
    actor = Actor(env=env, agent=agent, unroll_length=7, seed=0)
    unroll, stats = actor.unroll()
    env.close()
    steps = [0, 1, 2, 0, 1, 2, 0, 1]  # episodes cut after 3 steps; obs[t] is step t mod 3
    for t, step in enumerate(steps):
        np.testing.assert_array_equal(unroll.observations["image"][t], np.full((2, 5, 5, 3), step))
        np.testing.assert_array_equal(unroll.observations["direction"][t], [np.eye(4)[step]] * 2)
    np.testing.assert_array_equal(unroll.truncated[:, 0], [s == 2 for s in steps[:-1]])
    assert list(stats.lengths) == [3] * 4
    # The cut episodes' final observation (step 3) is in no unroll row: its value is, after
    # the action that cut it and its reward.
    final = {"image": np.full((1, 5, 5, 3), 3, np.uint8), "direction": np.eye(4)[[3]]}
    for t in (2, 5):
        for b in range(2):
            inputs = AgentInputs(
                final, unroll.actions[t, b][None], tf.constant([1.0]), tf.constant([False])
            )
            output, _ = agent.step(inputs, ())
            assert unroll.truncation_values[t, b] == pytest.approx(
                float(output.baseline[0]), abs=1e-5
            )


def test_a_learner_step_on_nests_equals_the_manual_sgd_update():
    lr = 0.05

    def agent():
        return NetworkAgent(num_actions=3, torso="minatar", image_keys=("image",))

    learner = Learner(
        agent=agent(),
        replicator=Replicator("cpu"),
        observation_shape=NEST_SHAPE,
        total_steps=10,
        optimizer=OptimizerConfig(max_grad_norm=None),
        make_optimizer=lambda: tf.keras.optimizers.SGD(lr),
    )
    batch = make_nest_batch(seed=3)
    _, before = learner.get_weights()
    reference = agent()
    reference.build(NEST_SHAPE)
    reference.set_weights(before)
    with tf.GradientTape() as tape:
        loss = manual_impala_loss(reference, batch, LossConfig())
    grads = tape.gradient(loss, reference.trainable_variables)
    metrics = learner.step(batch)
    _, after = learner.get_weights()
    assert metrics["loss"] == pytest.approx(float(loss), rel=1e-5)
    for w0, w1, g in zip(before, after, grads, strict=True):
        np.testing.assert_allclose(w1, w0 - lr * g.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.launches
def test_a_run_on_nests_trains_resumes_and_evaluates_through_the_commands(tmp_path):
    logdir = tmp_path / "run"
    common = ["--launcher", "local", "--num-actors", "1", "--envs-per-actor", "8"]
    first = command_in_process(
        "train", "--env", GRID, "--observation-keys", "image,direction", "--total-frames",
        "1600", "--batch-size", "4", "--logdir", str(logdir), *common,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr[-3000:]
    resumed = command_in_process("train", "--resume", str(logdir), "--total-frames", "3200")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert read_metrics(logdir)[-1]["frames"] >= 3200
    evaluated = command_in_process("evaluate", str(logdir), "--episodes", "2")
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert "greedy policy, 2 episodes" in evaluated.stdout


@pytest.mark.launches
def test_a_custom_agent_receives_the_nest_and_trains_through_the_command(tmp_path):
    # The docs' example (docs/guide/custom-agents.md): its factory refuses anything but a nest,
    # its network reads the parts by key.
    example = pathlib.Path(__file__).parents[1] / "examples" / "dict_observation_agent.py"
    logdir = tmp_path / "run"
    run = command_in_process(
        "train", "--env", GRID, "--observation-keys", "image,direction", "--agent",
        f"{example}:make_agent", "--total-frames", "1600", "--batch-size", "4", "--logdir",
        str(logdir), "--launcher", "local", "--num-actors", "1", "--envs-per-actor", "8",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    records = read_metrics(logdir)
    assert records[-1]["frames"] >= 1600 and records[-1]["learner_steps"] >= 1
    refused = command_in_process(
        "train", "--env", "CartPole-v1", "--agent", f"{example}:make_agent", "--logdir",
        str(tmp_path / "other"),
    )  # fmt: skip
    assert refused.returncode == 2
    assert "this example needs a nest of observations, got shape (4,)" in refused.stderr


@pytest.mark.launches
def test_a_custom_agent_receives_vectors_and_codes_as_a_nest_and_evaluates_from_anywhere(
    tmp_path, monkeypatch
):
    # A Dict of CartPole's state and a MultiDiscrete: flattened for the built-in MLP, a nest
    # for the user's agent (observation_nests auto), recorded so resume and evaluate agree;
    # normalised part by part (each part's statistics in the checkpoint, resumed with it).
    example = pathlib.Path(__file__).parents[1] / "examples" / "dict_observation_agent.py"
    logdir = tmp_path / "run"
    common = ["--launcher", "local", "--num-actors", "1", "--envs-per-actor", "8"]
    run = command_in_process(
        "train", "--env", MIXED, "--agent", f"{example}:make_agent", "--total-frames", "1600",
        "--batch-size", "4", "--normalize-observations", "--logdir", str(logdir), *common,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    saved = json.loads((logdir / "config.json").read_text())
    assert saved["env"]["observation_nests"] is True
    assert saved["loss"]["kl_cost"] > 0  # a nest of vectors is vectors to the auto rules
    assert saved["loss"]["normalize_observations"] is True
    first = read_metrics(logdir)
    counts = [r["observation_count"] for r in first if r.get("observation_count") is not None]
    assert counts and counts[-1] > 0
    resumed = command_in_process("train", "--resume", str(logdir), "--total-frames", "3200")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert read_metrics(logdir)[-1]["frames"] >= 3200
    # The statistics went on from the checkpoint: still counting up, not from 0.
    later = [r.get("observation_count") for r in read_metrics(logdir)[len(first) :]]
    later = [c for c in later if c is not None]
    assert later and min(later) >= counts[-1] and max(later) > counts[-1]
    monkeypatch.chdir(tmp_path)
    evaluated = command_in_process("evaluate", str(logdir), "--episodes", "2")
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert "greedy policy, 2 episodes" in evaluated.stdout


def test_the_built_in_agent_refuses_a_nest_of_vectors_only_naming_the_flag(tmp_path, capsys):
    logdir = tmp_path / "run"
    argv = ["train", "--env", MIXED, "--observation-nests", "--logdir", str(logdir)]
    last = refused_in_process(argv, capsys)
    assert last.startswith("impala-rep") and "(--no-observation-nests)" in last, last
    assert not logdir.exists()


@pytest.mark.parametrize(
    "flags, message",
    [
        (
            ["--network", "mlp"],
            "network='mlp' takes vectors; observations with images (['image']) go to",
        ),
        (["--normalize-observations"], "needs vector observations"),
        (["--rnd-cost", "0.1"], "needs vector observations"),
    ],
)
def test_what_cannot_take_a_nest_is_refused_before_anything_is_written(
    flags, message, tmp_path, capsys
):
    logdir = tmp_path / "run"
    argv = ["train", "--env", GRID, "--observation-keys", "image,direction", *flags]
    last = refused_in_process([*argv, "--logdir", str(logdir)], capsys)
    assert last.startswith("impala-rep") and message in last, last
    assert not logdir.exists()


def test_gymnasium_batches_dict_spaces_as_the_actor_reads_them():
    # What `of_space` and the actor rely on: a vector env of Dict observations gives a dict of
    # [E, ...] arrays, its single space a Dict whose keys are sorted.
    space = gymnasium.spaces.Dict(
        {"b": gymnasium.spaces.Discrete(2), "a": gymnasium.spaces.Box(0, 1, (2,))}
    )
    assert list(space.spaces) == ["a", "b"]
    env = make_vector_env(GRID, num_envs=3, seed=0, observation_keys=KEYS)
    obs, _ = env.reset()
    env.close()
    assert {k: v.shape for k, v in obs.items()} == {"direction": (3, 4), "image": (3, 5, 5, 3)}
