"""Scoring a run's newest checkpoint: `impala-rep evaluate LOGDIR`.

Training reports the mean return of the *behaviour* policy as it learns; published scores
(rl-baselines3-zoo's, most papers') are one trained agent's evaluation, usually with the
greedy (arg-max) policy. This module plays the run's newest checkpoint for a fixed number
of episodes on fresh envs, as `stable_baselines3.common.evaluation.evaluate_policy` does:
sub-env i plays `(episodes + i) // num_envs` episodes, so short episodes are not
over-counted by envs that finish first.

The envs, the agent and the checkpoint are the run's own (config.json); the policy is
stepped by the same `Actor` the training used, so recurrent state, time limits and frame
stacks behave as they did in training. Nothing is written.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable

import numpy as np

from impala_rep.value_checks import SEED_RANGE, is_seed

__all__ = ["Evaluation", "EvaluationIncomplete", "POLICIES", "evaluate_run", "progress_printer"]

POLICIES = ("greedy", "sample")

# Agent steps per Actor.unroll while evaluating: long enough to keep the per-unroll cost
# small, short enough that envs past their quota waste little.
_UNROLL = 50


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

    @property
    def mean_return(self) -> float:
        return float(np.mean(self.returns))

    @property
    def std_return(self) -> float:
        return float(np.std(self.returns))

    def summary(self) -> str:
        """One line, as the command prints it."""
        returns = np.asarray(self.returns)
        return (f"{self.logdir}: {self.policy} policy, {len(returns)} episodes, checkpoint at "
                f"{self.frames:,} frames: mean return {returns.mean():.2f} ± {returns.std():.2f} "
                f"(min {returns.min():.2f}, max {returns.max():.2f}), "
                f"mean length {np.mean(self.lengths):.1f} steps")

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"mean_return": self.mean_return,
                                           "std_return": self.std_return}


class EvaluationIncomplete(RuntimeError):
    """Fewer episodes than asked for ended within the frame budget."""


def evaluate_run(logdir: str, *, episodes: int = 100, num_envs: int = 10, policy: str = "greedy",
                 seed: int = 0, frame_budget: int = 10_000_000,
                 agent: Callable[[], Any] | None = None,
                 on_progress: Callable[[int, int], None] | None = None) -> Evaluation:
    """Plays the newest readable checkpoint of the run in `logdir` for `episodes` episodes.

    Args:
      episodes, num_envs: episodes in all, and envs playing them (sub-env i plays
        `(episodes + i) // num_envs`); num_envs <= episodes.
      policy: "greedy" (the most probable action) or "sample" (as the actors act).
      seed: seeds the envs (sub-env i gets seed + i) and, with "sample", the actions.
      frame_budget: env frames after which an evaluation that has not finished stops
        with `EvaluationIncomplete` (a greedy policy can loop forever in an env that
        has no time limit).
      agent: the agent builder the run was trained with, when it was given to `train()`
        as an object (a run made with `--agent` or the built-in agent needs none).
      on_progress: called as `(episodes ended, episodes)` after each unroll.

    Raises:
      ValueError: bad arguments, or `logdir` is not a run with a checkpoint.
      FileNotFoundError: none of its checkpoints is readable.
      EvaluationIncomplete: see `frame_budget`.
    """
    for name, value in (("episodes", episodes), ("num_envs", num_envs),
                        ("frame_budget", frame_budget)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"bad {name} {value!r}: must be a positive integer")
    if num_envs > episodes:
        raise ValueError(f"bad num_envs {num_envs}: must be at most episodes ({episodes}), "
                         "or some envs would play none")
    if policy not in POLICIES:
        raise ValueError(f"bad policy {policy!r}: must be one of {', '.join(POLICIES)}")
    if not is_seed(seed):
        raise ValueError(f"bad seed {seed!r}: must be {SEED_RANGE}")

    from impala_rep.envs.factory import describe_env, make_vector_env
    from impala_rep.run.prepare import agent_factory_for
    from impala_rep.run.resume import load_run_config

    config = load_run_config(logdir, purpose="evaluate")
    env_spec = describe_env(config.env.id)
    factory = agent_factory_for(config, env_spec, agent=agent)

    import tensorflow as tf

    from impala_rep.actors.actor import Actor
    from impala_rep.learner.checkpointing import CHECKPOINT_SUBDIR, restore_newest_readable

    env = make_vector_env(config.env.id, num_envs=num_envs, seed=seed,
                          sticky_actions=config.env.sticky_actions,
                          episodic_life=config.env.episodic_life,
                          max_episode_steps=config.env.max_episode_steps)
    try:
        built = factory()
        actor = Actor(env=env, agent=built, unroll_length=_UNROLL, seed=seed,
                      greedy=policy == "greedy")  # builds the agent's variables
        # The learner's checkpoint holds the agent's variables as a list under
        # `learner/agent` (learner/learner.py); the optimizer's slots are not needed here.
        agent_state = list(getattr(built, "non_trainable_variables", ()))
        learner = tf.train.Checkpoint(agent=list(built.trainable_variables),
                                      **({"agent_state": agent_state} if agent_state else {}))
        steps_trained = tf.Variable(0, dtype=tf.int64)
        path = restore_newest_readable(
            tf.train.Checkpoint(learner=learner, frames=steps_trained),
            f"{config.run.logdir}/{CHECKPOINT_SUBDIR}", partial=True)
        returns, lengths = _play(actor, num_envs=num_envs, episodes=episodes,
                                 step_budget=-(-frame_budget // env_spec.frame_skip),
                                 on_progress=on_progress)
    finally:
        env.close()
    if len(returns) < episodes:
        raise EvaluationIncomplete(
            f"only {len(returns)} of {episodes} episodes ended within {frame_budget:,} frames; "
            "the policy may never end an episode in this env (give the run a time limit with "
            "--max-episode-steps, or a larger --frame-budget)")
    return Evaluation(logdir=str(logdir), checkpoint=str(path),
                      frames=int(steps_trained.numpy()) * env_spec.frame_skip, policy=policy,
                      seed=seed, returns=tuple(returns), lengths=tuple(lengths))


def _play(actor, *, num_envs: int, episodes: int, step_budget: int,
          on_progress: Callable[[int, int], None] | None) -> tuple[list[float], list[int]]:
    """Unrolls `actor` until each sub-env has ended its quota of episodes or `step_budget`
    agent steps (all envs together) have passed; returns the quotas' returns and lengths,
    in the order they ended."""
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
    """An `on_progress` that writes one line to `stream` at most every `every_s` seconds."""
    last = [time.monotonic()]

    def report(done: int, total: int) -> None:
        now = time.monotonic()
        if now - last[0] >= every_s and done < total:
            last[0] = now
            print(f"evaluating: {done} of {total} episodes ended", file=stream, flush=True)

    return report
