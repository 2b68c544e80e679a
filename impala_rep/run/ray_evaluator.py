"""`--eval-every`'s evaluator as a Ray actor process: a thin wrapper around `Evaluator`
(`run/periodic_evaluation.py`).

It asks Ray for one CPU, as an actor does, so on a cluster it is placed where one is free;
an embedded Ray counts one more slot for it (`launch_ray.start_ray`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ray

from impala_rep.run.periodic_evaluation import Evaluator
from impala_rep.run.prepare import RunPlan
from impala_rep.run.ray_errors import describe_ray_error

__all__ = ["RayEvaluations"]


class _EvaluatorProcess:
    def __init__(self, **evaluator: Any):
        from impala_rep.actors.ray_actor import one_tensorflow_thread

        one_tensorflow_thread(evaluator["agent_factory"])  # as an actor process does
        self._evaluator = Evaluator(**evaluator)

    def evaluate(self, latest: tuple[int, list], seed: int):
        """`latest`: the learner's publication, (version, [published]), as actors get it."""
        from impala_rep.actors.ray_actor import fetched_weights

        version, published = latest
        return self._evaluator.evaluate(fetched_weights(published[0]), version, seed)


_RayEvaluator = ray.remote(_EvaluatorProcess)


class RayEvaluations:
    """An `EvaluationRunner` whose evaluator is a Ray actor process, started at the first
    request: not during the run's start-up, whose cores the learner and actors need.
    `latest_weights()` returns the learner's newest publication, or an ObjectRef of it (Ray
    resolves it for the call)."""

    def __init__(self, plan: RunPlan, latest_weights: Callable[[], Any]):
        self._plan, self._latest = plan, latest_weights
        self._process = None
        self._pending = None

    def request(self, seed: int) -> None:
        if self._process is None:
            plan = self._plan
            self._process = _RayEvaluator.options(num_cpus=1).remote(
                env=plan.config.env,
                agent_factory=plan.agent_factory,
                episodes=plan.config.run.eval_episodes,
                frame_skip=plan.frame_skip,
                env_registration=plan.env_registration,
            )
        self._pending = self._process.evaluate.remote(self._latest(), seed)

    def result(self, timeout_s: float) -> tuple[list[float], list[int]] | None:
        ready, _ = ray.wait([self._pending], timeout=timeout_s)
        if not ready:
            return None
        try:
            return ray.get(self._pending)
        except ray.exceptions.RayError as err:
            raise RuntimeError(describe_ray_error(err)) from None

    def close(self) -> None:
        if self._process is not None:
            ray.kill(self._process)
