"""Scoring a run's newest checkpoint: `impala-rep evaluate LOGDIR`.

Training reports the mean return of the *behaviour* policy as it learns; published scores
(rl-baselines3-zoo's, most papers') are one trained agent's evaluation, usually with the
greedy (arg-max) policy. This module plays the run's newest checkpoint for a fixed number
of episodes on fresh envs, as `stable_baselines3.common.evaluation.evaluate_policy` does:
sub-env i plays `(episodes + i) // num_envs` episodes, so short episodes are not
over-counted by envs that finish first.

The envs, the agent and the checkpoint are the run's own (config.json), except that a lost
life never ends an episode (`--episodic-life` is a training device: scores are whole
games'); the policy is stepped by the same `Actor` the training used, so recurrent state,
time limits and frame stacks behave as they did in training. Nothing is written.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from typing import Any

from impala_rep.config import EnvConfig
from impala_rep.config.validation import SEED_RANGE, is_int, is_seed

__all__ = [
    "Evaluation",
    "EvaluationIncomplete",
    "EvaluationSetupError",
    "FRAME_BUDGET",
    "MAX_EVALUATION_ENVS",
    "POLICIES",
    "evaluate_run",
    "evaluation_env",
    "play_episodes",
    "progress_printer",
]

POLICIES = ("greedy", "sample")

# Agent steps per Actor.unroll while evaluating: long enough to keep the per-unroll cost
# small, short enough that envs past their quota waste little.
EVALUATION_UNROLL = 50

# Envs an evaluation plays on unless told otherwise (fewer if it plays fewer episodes).
MAX_EVALUATION_ENVS = 10

# Env frames after which an evaluation stops: a greedy policy can loop forever in an env
# without a time limit.
FRAME_BUDGET = 10_000_000


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """Episodes played by one checkpoint; returns are raw env rewards summed."""

    logdir: str
    checkpoint: str
    frames: int  # env frames the checkpoint had trained on
    policy: str
    seed: int
    returns: tuple[float, ...]
    lengths: tuple[int, ...]  # agent steps
    video: str | None = None  # the first episode's GIF, if one was asked for

    @property
    def mean_return(self) -> float:
        return statistics.fmean(self.returns)

    @property
    def std_return(self) -> float:
        return statistics.pstdev(self.returns)  # of the episodes played, as numpy's std

    def summary(self) -> str:
        """One line, as the command prints it."""
        return (
            f"{self.logdir}: {self.policy} policy, {len(self.returns)} "
            f"episode{'s' if len(self.returns) != 1 else ''}, checkpoint "
            f"at {self.frames:,} frames: mean return {self.mean_return:.2f} ± "
            f"{self.std_return:.2f} (min {min(self.returns):.2f}, max {max(self.returns):.2f}"
            f"), mean length {statistics.fmean(self.lengths):.1f} steps"
        )

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {
            "mean_return": self.mean_return,
            "std_return": self.std_return,
        }


class EvaluationIncomplete(RuntimeError):
    """Fewer episodes than asked for ended within the frame budget."""


class EvaluationSetupError(ValueError):
    """What was asked cannot be evaluated (bad arguments, not a run with a checkpoint, an
    agent that is not the one the checkpoint holds); raised before any episode is played."""


def evaluate_run(
    logdir: str,
    *,
    episodes: int = 100,
    num_envs: int | None = None,
    policy: str = "greedy",
    seed: int = 0,
    frame_budget: int = FRAME_BUDGET,
    max_episode_steps: int | None = None,
    agent: Callable[[], Any] | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    video: str | None = None,
) -> Evaluation:
    """Plays the newest readable checkpoint of the run in `logdir` for `episodes` episodes.

    Args:
      episodes: episodes in all.
      num_envs: envs playing them (sub-env i plays `(episodes + i) // num_envs`);
        at most `episodes`; None: up to 10.
      policy: "greedy" (the most probable action) or "sample" (as the actors act).
      seed: seeds the envs as training seeds an actor's (`make_vector_env`: sub-env i
        with seed + i; CartPole-v1 all from one generator) and, with "sample", the actions.
      frame_budget: env frames after which an evaluation that has not finished stops
        with `EvaluationIncomplete` (a greedy policy can loop forever in an env that
        has no time limit).
      max_episode_steps: a time limit for the evaluation's episodes (gymnasium ids),
        replacing the run's; None keeps the run's.
      agent: the agent builder the run was trained with, when it was given to `train()`
        as an object (a run made with `--agent` or the built-in agent needs none).
      on_progress: called as `(episodes ended, episodes)` after each unroll.
      video: a .gif path: the first episode, as the env renders it (`rgb_array`), is written
        there (`impala_rep.run.video`); the episodes are then played on one env (Atari ids:
        drawn by a twin of the game, `impala_rep.envs.atari.AtariFirstEpisodeFrames`).

    Raises:
      EvaluationSetupError: bad arguments; `logdir` is not a run with a checkpoint; the
        agent built for it does not have the checkpoint's variables.
      FileNotFoundError: none of its checkpoints is readable.
      EvaluationIncomplete: see `frame_budget`.
    """
    if video is not None:
        num_envs = 1 if num_envs is None else num_envs
        if num_envs != 1:
            raise EvaluationSetupError(f"bad num_envs {num_envs}: a video is played on 1 env")
    if num_envs is None and is_int(episodes):
        num_envs = min(MAX_EVALUATION_ENVS, episodes)
    for name, value in (
        ("episodes", episodes),
        ("num_envs", num_envs),
        ("frame_budget", frame_budget),
    ):
        if not is_int(value) or value < 1:
            raise EvaluationSetupError(f"bad {name} {value!r}: must be a positive integer")
    if num_envs > episodes:
        raise EvaluationSetupError(
            f"bad num_envs {num_envs}: must be at most episodes "
            f"({episodes}), or some envs would play none"
        )
    if policy not in POLICIES:
        raise EvaluationSetupError(f"bad policy {policy!r}: must be one of {', '.join(POLICIES)}")
    if not is_seed(seed):
        raise EvaluationSetupError(f"bad seed {seed!r}: must be {SEED_RANGE}")

    from impala_rep.envs.factory import check_env_options
    from impala_rep.run.agents import agent_factory_for, described_env
    from impala_rep.run.resume import load_run_config
    from impala_rep.run.user_code import load_env
    from impala_rep.run.video import check_video_path, write_gif

    try:
        if video is not None:
            check_video_path(video)
        config = load_run_config(logdir, purpose="evaluate")
        load_env(config.env.id)  # a user's env id: its module registers it
        if max_episode_steps is not None:
            config = config.replace({"max_episode_steps": max_episode_steps})
        check_env_options(
            config.env.id,
            sticky_actions=config.env.sticky_actions,
            max_episode_steps=config.env.max_episode_steps,
        )
        # A hand-made config may leave observation_nests to auto; a run's config.json has it.
        config, env_spec = described_env(config, users_agent=agent is not None)
        factory = agent_factory_for(config, env_spec, agent=agent)
    except ValueError as err:
        raise EvaluationSetupError(str(err)) from None

    import tensorflow as tf

    from impala_rep.actors.actor import Actor
    from impala_rep.learner.checkpointing import CHECKPOINT_SUBDIR, restore_agent

    directory = f"{config.run.logdir}/{CHECKPOINT_SUBDIR}"
    frames = None if video is None else []
    try:
        env = evaluation_env(config.env, num_envs=num_envs, seed=seed, frames=frames)
    except ValueError as err:  # an env that cannot render the video
        raise EvaluationSetupError(str(err)) from None
    try:
        built = factory()
        actor = Actor(
            env=env,
            agent=built,
            unroll_length=EVALUATION_UNROLL,
            seed=seed,
            greedy=policy == "greedy",
        )  # builds the agent's variables
        _check_agent_matches(tf.train.latest_checkpoint(directory), built, logdir)
        path, steps_trained = restore_agent(built, directory)
        # The actor acts with the weights it is given (an agent's `host_step` reads no
        # variables), so it is handed the restored ones.
        actor.set_weights(built.get_weights(), steps_trained)
        returns, lengths = play_episodes(
            actor,
            num_envs=num_envs,
            episodes=episodes,
            step_budget=-(-frame_budget // env_spec.frame_skip),
            on_progress=on_progress,
        )
    finally:
        env.close()
    if len(returns) < episodes:
        raise EvaluationIncomplete(
            f"only {len(returns)} of {episodes} episodes ended within {frame_budget:,} frames: "
            "the policy may never end an episode in this env; give a larger --frame-budget, "
            "or (gymnasium ids) a time limit with --max-episode-steps"
        )
    if video is not None:
        fps = env.metadata.get("render_fps") or 30
        write_gif(video, frames, fps=fps, episode_return=returns[0])
    return Evaluation(
        logdir=str(logdir),
        checkpoint=str(path),
        frames=steps_trained * env_spec.frame_skip,
        policy=policy,
        seed=seed,
        returns=tuple(returns),
        lengths=tuple(lengths),
        video=video,
    )


def _check_agent_matches(path: str | None, agent, logdir: str) -> None:
    """EvaluationSetupError unless the checkpoint at `path` holds as many agent variables of
    the same shapes as `agent` has: config.json does not record an agent object given to
    `train()`, and the built-in agent would otherwise restore part of another's weights."""
    import tensorflow as tf

    if path is None:
        return  # restore_newest_readable says what is missing
    try:
        saved = dict(tf.train.list_variables(path))
    except (tf.errors.OpError, ValueError):
        return  # unreadable: restore_newest_readable falls back to an older one
    shapes = []
    while (key := f"learner/agent/{len(shapes)}/.ATTRIBUTES/VARIABLE_VALUE") in saved:
        shapes.append(tuple(saved[key]))
    built = [tuple(v.shape) for v in agent.trainable_variables]
    if shapes != built:
        first = next(
            i for i in range(max(len(shapes), len(built))) if shapes[i : i + 1] != built[i : i + 1]
        )

        def shape(variables: list) -> str:
            return str(variables[first]) if first < len(variables) else "none"

        raise EvaluationSetupError(
            f"cannot evaluate {logdir!r}: its checkpoint's agent is not the one its config.json "
            f"describes ({len(shapes)} variables saved, {len(built)} built; variable {first}: "
            f"{shape(shapes)} saved, {shape(built)} built); a run trained with an agent object "
            "passed to train() is evaluated with impala_rep.evaluate_run(logdir, agent=...)"
        )


def evaluation_env(env: EnvConfig, *, num_envs: int, seed: int, frames: list | None = None):
    """The vector env episodes are evaluated on: the run's env as its actors make it, except
    that a lost life never ends an episode (`--episodic-life` is a training device: scores
    are whole games'); sub-env i seeded with `seed + i`; `frames` as `make_vector_env` takes
    it (a video's)."""
    from impala_rep.envs.factory import make_vector_env

    return make_vector_env(
        env.id,
        num_envs=num_envs,
        seed=seed,
        sticky_actions=env.sticky_actions,
        max_episode_steps=env.max_episode_steps,
        observation_keys=env.observation_keys,
        observation_nests=env.observation_nests,
        frames=frames,
    )


def play_episodes(
    actor,
    *,
    num_envs: int,
    episodes: int,
    step_budget: int,
    on_progress: Callable[[int, int], None] | None,
) -> tuple[list[float], list[int]]:
    """Unrolls `actor` until each sub-env has ended its quota of episodes or `step_budget`
    agent steps (all envs together) have passed; returns the quotas' returns and lengths,
    in the order they ended."""
    import numpy as np

    quota = np.array([(episodes + i) // num_envs for i in range(num_envs)])
    ended = np.zeros(num_envs, np.int64)
    running_return = np.zeros(num_envs, np.float64)
    running_length = np.zeros(num_envs, np.int64)
    returns: list[float] = []
    lengths: list[int] = []
    steps = 0
    while (ended < quota).any() and steps < step_budget:
        unroll, _ = actor.unroll()
        done = unroll.terminated | unroll.truncated
        for t in range(done.shape[0]):
            running_return += unroll.rewards[t]
            running_length += 1
            for i in np.flatnonzero(done[t]):
                if ended[i] < quota[i]:
                    returns.append(float(running_return[i]))
                    lengths.append(int(running_length[i]))
                ended[i] += 1
            running_return[done[t]] = 0.0
            running_length[done[t]] = 0
        steps += done.size
        if on_progress is not None:
            on_progress(len(returns), episodes)
    return returns, lengths


def progress_printer(stream, every_s: float = 10.0) -> Callable[[int, int], None]:
    """An `on_progress` that writes one line to `stream` at most every `every_s` seconds,
    counted from its first call (after the agent is built and traced)."""
    last: list[float] = []

    def report(done: int, total: int) -> None:
        now = time.monotonic()
        if not last:
            last.append(now)
        elif now - last[0] >= every_s and done < total:
            last[0] = now
            print(f"evaluating: {done} of {total} episodes ended", file=stream, flush=True)

    return report
