"""Evaluation while training (`--eval-every FRAMES`): greedy episodes of the learner's newest
weights, played beside the training.

The return the actors report is the behaviour policy's, sampled; published scores are a
trained agent's greedy evaluation (RLlib runs evaluation workers for it, SB3 an
`EvalCallback`). Every `eval_every` trained frames the driver asks an `Evaluator` to play
`eval_episodes` greedy episodes with the newest published weights: a Ray actor process of its
own under the Ray launcher (`run/ray_evaluator.py`), a thread with the local launcher
(`ThreadEvaluations`). It plays them as `impala-rep evaluate` does (`evaluation_env`, the
training's `Actor`, `play_episodes`), on envs seeded apart from every actor's
(`evaluation_seed`); its frames are not training frames.

One evaluation runs at a time: one that falls due while another still plays is skipped, so
evaluation never holds training back. When training ends, the final weights are evaluated too
(unless the last evaluation was of them), so the summary's last evaluation is the trained
agent's.
"""

from __future__ import annotations

import dataclasses
import statistics
import threading
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from impala_rep.config import EnvConfig

__all__ = [
    "EVALUATION_FIELDS",
    "EvaluationOutcome",
    "EvaluationRunner",
    "EvaluationSchedule",
    "Evaluator",
    "ThreadEvaluations",
    "evaluation_seed",
]

# What a metrics.jsonl record holds when an evaluation ended since the previous record.
EVALUATION_FIELDS = {
    "eval_frames": "frames the learner had trained on when the evaluated weights were taken",
    "eval_return_mean": "mean return of the evaluation's greedy episodes (raw env rewards)",
    "eval_return_std": "their standard deviation",
    "eval_episodes": "episodes the evaluation played to the end",
}

# The spawn key that sets evaluation seeds apart from the actors' (`supervisor.actor_seed`
# draws those from the same run seed without one).
_EVALUATION_STREAM = 0x45564C  # "EVL"


def evaluation_seed(seed: int, frames: int) -> int:
    """The seed of the envs that evaluate the weights taken at `frames` in a run seeded
    `seed`: distinct per evaluation and from every actor's seed."""
    sequence = np.random.SeedSequence(seed, spawn_key=(_EVALUATION_STREAM, frames))
    return int(sequence.generate_state(1)[0])


class Evaluator:
    """Plays greedy episodes of given weights on fresh envs: the work of an evaluation, in
    whatever process or thread the launcher gives it. Ray-free.

    `agent_factory` as the run's actors take it: an agent with a TensorFlow-free acting twin
    is played with the twin (`impala_rep.agent_factory.acting_agent`), as they play it."""

    def __init__(
        self,
        *,
        env: EnvConfig,
        agent_factory: Callable[[], Any],
        episodes: int,
        frame_skip: int,
        env_registration: Any = None,
    ):
        from impala_rep.agent_factory import acting_agent
        from impala_rep.envs.factory import register_env

        register_env(env_registration)
        self._env, self._episodes, self._frame_skip = env, episodes, frame_skip
        self._agent = acting_agent(agent_factory) or agent_factory()

    def evaluate(self, weights: list, version: int, seed: int) -> tuple[list[float], list[int]]:
        """The returns and lengths (agent steps) of the episodes played with `weights` (the
        learner's at step `version`) on envs seeded with `seed`, in the order they ended;
        fewer than asked if the frame budget ran out first."""
        from impala_rep.actors.actor import Actor
        from impala_rep.run.evaluation import (
            EVALUATION_UNROLL,
            FRAME_BUDGET,
            MAX_EVALUATION_ENVS,
            evaluation_env,
            play_episodes,
        )

        # As `impala-rep evaluate` plays them by default: up to MAX_EVALUATION_ENVS envs,
        # sub-env i playing (episodes + i) // envs episodes, stopped after its frame budget.
        num_envs = min(MAX_EVALUATION_ENVS, self._episodes)
        env = evaluation_env(self._env, num_envs=num_envs, seed=seed)
        try:
            actor = Actor(
                env=env, agent=self._agent, unroll_length=EVALUATION_UNROLL, seed=seed, greedy=True
            )
            actor.set_weights(weights, version)
            return play_episodes(
                actor,
                num_envs=num_envs,
                episodes=self._episodes,
                step_budget=-(-FRAME_BUDGET // self._frame_skip),
                on_progress=None,
            )
        finally:
            env.close()


class EvaluationRunner(Protocol):
    """Where a launcher runs a run's evaluations (one at a time): the launcher's
    `evaluations`."""

    def request(self, seed: int) -> None:
        """Starts evaluating the learner's newest published weights on envs seeded `seed`."""

    def result(self, timeout_s: float) -> tuple[list[float], list[int]] | None:
        """The requested evaluation's returns and lengths once it has ended (waiting up to
        `timeout_s`), else None. RuntimeError saying why if it failed."""

    def close(self) -> None:
        """Frees the evaluator; a running evaluation is abandoned."""


class ThreadEvaluations:
    """An `EvaluationRunner` on a thread of this process (the local launcher's), one per
    evaluation; the `Evaluator` is built by the first."""

    def __init__(self, make_evaluator: Callable[[], Evaluator], latest_weights: Callable[[], Any]):
        """`latest_weights()`: (version, weights) of the learner's newest publication."""
        self._make, self._latest = make_evaluator, latest_weights
        self._evaluator: Evaluator | None = None
        self._thread: threading.Thread | None = None
        self._outcome: list = []  # [(True, played)] or [(False, error)] once it has ended

    def request(self, seed: int) -> None:
        version, weights = self._latest()
        self._outcome = outcome = []

        def evaluate() -> None:
            try:
                if self._evaluator is None:
                    self._evaluator = self._make()
                outcome.append((True, self._evaluator.evaluate(weights, version, seed)))
            except Exception as err:  # noqa: BLE001 - the env's or the agent's, for the driver
                outcome.append((False, f"{type(err).__name__}: {err}"))

        self._thread = threading.Thread(target=evaluate, name="evaluation", daemon=True)
        self._thread.start()

    def result(self, timeout_s: float) -> tuple[list[float], list[int]] | None:
        self._thread.join(timeout_s)
        if not self._outcome:
            return None
        ok, value = self._outcome[0]
        if not ok:
            raise RuntimeError(value)
        return value

    def close(self) -> None:
        # An evaluation still playing (the run stopped by a signal) cannot be stopped from
        # outside: it is waited for a little, then left behind as a daemon thread.
        if self._thread is not None:
            self._thread.join(timeout=5.0)


@dataclasses.dataclass(frozen=True)
class EvaluationOutcome:
    """One evaluation: of the weights taken at `frames` trained frames, `episodes` asked."""

    frames: int
    episodes: int
    returns: tuple[float, ...] = ()
    lengths: tuple[int, ...] = ()
    error: str | None = None  # why it failed; then nothing was played

    @property
    def complete(self) -> bool:
        return self.error is None and len(self.returns) == self.episodes

    def fields(self) -> dict[str, Any]:
        """Its `EVALUATION_FIELDS`, for a metrics record (a failed one has none)."""
        if self.error is not None:
            return {}
        return {
            "eval_frames": self.frames,
            "eval_return_mean": statistics.fmean(self.returns) if self.returns else None,
            "eval_return_std": statistics.pstdev(self.returns) if self.returns else None,
            "eval_episodes": len(self.returns),
        }


class EvaluationSchedule:
    """The driver's side of `--eval-every`: asks `runner` for an evaluation each time the
    trained frames pass a multiple of `every` (none while one is running: that one is
    skipped), and hands back the evaluations that ended. A resumed run goes on from the
    next multiple after `frames_at_start`."""

    def __init__(
        self,
        runner: EvaluationRunner,
        *,
        every: int,
        episodes: int,
        seed: int,
        frames_at_start: int,
    ):
        self._runner, self._every, self._episodes, self._seed = runner, every, episodes, seed
        self._next = (frames_at_start // every + 1) * every
        self._running: int | None = None  # frames of the requested evaluation
        self._last_requested: int | None = None
        self.failed = False  # an evaluation failed: no more are asked for

    def poll(self, frames: int) -> EvaluationOutcome | None:
        """After a report at `frames` trained frames: the evaluation that ended, if one did;
        a new one asked for, if one is due. One of the weights at `frames` is held until the
        run trains on: if it does not, those are the final weights, whose evaluation `finish`
        hands to the run's last record."""
        outcome = None if self._running == frames else self._collect(timeout_s=0.0)
        if self._running is None and not self.failed and frames >= self._next:
            self._request(frames)
            self._next = (frames // self._every + 1) * self._every
        return outcome

    def evaluates_at_finish(self, frames: int) -> bool:
        """Whether `finish(frames)` will wait for an evaluation or start one."""
        return not self.failed and (self._running is not None or self._last_requested != frames)

    def finish(self, frames: int, timeout_s: float = 600.0) -> list[EvaluationOutcome]:
        """Training ended at `frames`: waits for a running evaluation, then evaluates the final
        weights unless that one was of them; what ended (an evaluation still playing after
        `timeout_s` is given up)."""
        outcomes = []
        for _ in range(2):
            if self._running is not None:
                outcome = self._collect(timeout_s)
                if outcome is None:  # still playing: not waited for any longer
                    return outcomes
                outcomes.append(outcome)
            if self.failed or self._last_requested == frames:
                return outcomes
            self._request(frames)
        return outcomes

    def _request(self, frames: int) -> None:
        self._runner.request(evaluation_seed(self._seed, frames))
        self._running = self._last_requested = frames

    def _collect(self, timeout_s: float) -> EvaluationOutcome | None:
        if self._running is None:
            return None
        try:
            played = self._runner.result(timeout_s)
        except RuntimeError as err:
            self.failed = True
            outcome = EvaluationOutcome(self._running, self._episodes, error=str(err))
            self._running = None
            return outcome
        if played is None:
            return None
        returns, lengths = played
        outcome = EvaluationOutcome(self._running, self._episodes, tuple(returns), tuple(lengths))
        self._running = None
        return outcome
