"""`impala-rep evaluate`: a run's checkpoint played for a fixed number of episodes.

Against a slow reference: the checkpoint's weights played by hand on gymnasium envs seeded
alike, one episode at a time, with the policy's arg-max.
"""

import json

import gymnasium
import numpy as np
import pytest
import tensorflow as tf
from in_process_cli import refused_in_process

from impala_rep import Replicator
from impala_rep.actors.actor import Actor
from impala_rep.agent import AgentInputs
from impala_rep.config import OptimizerConfig, TrainConfig
from impala_rep.config.auto import resolve_auto_settings
from impala_rep.envs.factory import describe_env, make_vector_env
from impala_rep.learner.checkpointing import RunCheckpoint, RunCounters
from impala_rep.learner.learner import Learner
from impala_rep.run.agents import agent_factory_for
from impala_rep.run.evaluation import EvaluationIncomplete, evaluate_run

# Registered with a 200-step limit and played through gymnasium's SyncVectorEnv (sub-env i
# seeded seed + i), so a reference can seed its own envs alike.
ENV = "CartPole-v0"
pytestmark = pytest.mark.filterwarnings("ignore:.*The environment CartPole-v0 is out of date")


def saved_run(logdir, *, env=ENV, steps_trained=1234, weight_seed=3):
    """A run folder as `train` leaves it (config.json, a checkpoint) for a learner whose
    weights are random but fixed; returns the learner's agent."""
    spec = describe_env(env)
    # Resolved, as `train` writes it: auto settings (the novelty bonus's weight) made concrete.
    config = resolve_auto_settings(
        TrainConfig.from_keys({"env": env, "logdir": str(logdir), "hidden_sizes": (16,)}),
        spec.observation_shape,
        continuous_actions=spec.continuous_actions,
    )
    logdir.mkdir()
    (logdir / "config.json").write_text(json.dumps(config.to_json()))
    tf.keras.utils.set_random_seed(weight_seed)
    agent = agent_factory_for(config, spec)()
    learner = Learner(
        agent=agent,
        replicator=Replicator("cpu"),
        observation_shape=spec.observation_shape,
        total_steps=10,
        optimizer=OptimizerConfig(),
    )
    RunCheckpoint(learner=learner, directory=logdir / "checkpoints").save(
        RunCounters(frames=steps_trained, episodes=0, recent_returns=())
    )
    return agent


def greedy_by_hand(agent, *, seed, num_envs, episodes):
    """Env i plays `(episodes + i) // num_envs` episodes with the agent's arg-max action, from
    the resets `make_vector_env` and the actor make: one seeded with seed + i, then each
    continuing its generator."""
    returns = []
    for i in range(num_envs):
        env = gymnasium.make(ENV)
        env.reset(seed=seed + i)
        observation, _ = env.reset()
        for _ in range((episodes + i) // num_envs):
            total, done, action, reward, first = 0.0, False, 0, 0.0, True
            while not done:
                inputs = AgentInputs(
                    observation=tf.constant(observation[None]),
                    prev_action=tf.constant([action], tf.int32),
                    prev_reward=tf.constant([reward], tf.float32),
                    first=tf.constant([first]),
                )
                output, _ = agent.step(inputs, agent.initial_state(1))
                action = int(np.argmax(output.policy_logits.numpy()[0]))
                observation, reward, terminated, truncated, _ = env.step(action)
                total += reward
                done, first = terminated or truncated, False
            returns.append(total)
            observation, _ = env.reset()
        env.close()
    return sorted(returns)


def test_the_greedy_actor_takes_the_most_probable_action_and_the_sampling_one_does_not_always():
    spec = describe_env(ENV)
    config = TrainConfig.from_keys({"env": ENV})
    actions = {}
    for greedy in (True, False):
        tf.keras.utils.set_random_seed(0)
        actor = Actor(
            env=make_vector_env(ENV, num_envs=8, seed=0),
            agent=agent_factory_for(config, spec)(),
            unroll_length=50,
            seed=0,
            greedy=greedy,
        )
        unroll, _ = actor.unroll()
        actions[greedy] = (unroll.actions, np.argmax(unroll.behaviour_logits, axis=-1))
    np.testing.assert_array_equal(*actions[True])
    assert (actions[False][0] != actions[False][1]).any()


def test_evaluate_plays_the_checkpoint_as_a_slow_reference_does(tmp_path):
    agent = saved_run(tmp_path / "run")
    result = evaluate_run(str(tmp_path / "run"), episodes=7, num_envs=3, seed=11)
    assert result.frames == 1234
    assert result.checkpoint.endswith("ckpt-0")
    assert len(result.returns) == 7 and result.lengths == result.returns  # CartPole: 1 a step
    assert sorted(result.returns) == greedy_by_hand(agent, seed=11, num_envs=3, episodes=7)
    assert len(set(result.returns)) > 1  # the start states matter: not a trivial match


def test_an_evaluation_whose_episodes_never_end_stops_at_its_frame_budget(tmp_path):
    saved_run(tmp_path / "run", env="endless_env:Endless-v0")
    with pytest.raises(
        EvaluationIncomplete,
        match=r"only 0 of 4 episodes ended within 2,000 "
        r"frames: .*--max-episode-steps",
    ):
        evaluate_run(str(tmp_path / "run"), episodes=4, num_envs=2, frame_budget=2000)


def test_a_time_limit_given_to_the_evaluation_ends_its_episodes_and_envs_default_to_episodes(
    tmp_path,
):
    saved_run(tmp_path / "run", env="endless_env:Endless-v0")
    result = evaluate_run(str(tmp_path / "run"), episodes=3, max_episode_steps=25)
    assert result.returns == (25.0, 25.0, 25.0)  # 1 a step; three envs, one episode each


def with_agent_config(run, **agent):
    """Rewrites a saved run's config.json with other agent settings, as if another agent had
    trained it (config.json does not record an agent object given to train())."""
    config = json.loads((run / "config.json").read_text())
    config["agent"].update(agent)
    (run / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize(
    "make, args, message",
    [
        (None, ["--episodes", "0"], "argument --episodes: expected a positive integer, got 0"),
        (
            None,
            ["--envs", "11", "--episodes", "10"],
            "argument --envs: 11 is more than --episodes 10",
        ),
        (None, ["--policy", "best"], "argument --policy: invalid choice: 'best'"),
        (None, ["--seed", "-1"], "argument --seed: expected an integer in [0, 2**32), got -1"),
        (
            None,
            ["--json", "{tmp}/no/such/dir/out.json"],
            "argument --json: '{tmp}/no/such/dir/out.json' "
            "cannot be written: give a file path in an "
            "existing, writable directory",
        ),
        (None, ["--json", "{tmp}"], "argument --json: '{tmp}' cannot be written"),
        (
            None,
            ["--max-episode-steps", "0"],
            "argument --max-episode-steps: expected a positive integer, got 0",
        ),
        (
            "wider agent",
            [],
            "cannot evaluate '{run}': its checkpoint's agent is not the one its "
            "config.json describes (12 variables saved, 12 built; variable 0: (4, 16) "
            "saved, (4, 32) built); a run trained with an agent object passed to "
            "train() is evaluated with impala_rep.evaluate_run(logdir, agent=...)",
        ),
        # The MLP's 6 variables, then RND's predictor's 6 (on by default for CartPole's vectors).
        (
            "deeper agent",
            [],
            "(12 variables saved, 14 built; variable 2: (16, 2) saved, (16, 16) built)",
        ),
        ("missing", [], "cannot evaluate '{run}': not a directory"),
        ("empty", [], "cannot evaluate '{run}': not a run directory (no config.json"),
        (
            "no checkpoint",
            [],
            "cannot evaluate '{run}': it holds no checkpoint (the run stopped before "
            "its first one)",
        ),
    ],
)
def test_the_command_refuses_bad_input_in_one_line_and_writes_nothing(
    make, args, message, tmp_path, capsys
):
    run = tmp_path / "run"
    if make in (None, "wider agent", "deeper agent"):
        saved_run(run)
        if make is not None:
            with_agent_config(run, hidden_sizes=[32] if make == "wider agent" else [16, 16])
    elif make in ("empty", "no checkpoint"):
        run.mkdir()
        if make == "no checkpoint":
            (run / "config.json").write_text(json.dumps(TrainConfig().to_json()))
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    argv = ["evaluate", str(run), *(a.format(tmp=tmp_path) for a in args)]
    line = refused_in_process(argv, capsys)
    assert message.format(run=run, tmp=tmp_path) in line
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
