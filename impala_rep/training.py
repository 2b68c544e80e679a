"""`train(config)`: one IMPALA run on Ray — learner actor, actor processes, live metrics.

The driver starts (or joins) Ray, launches the learner and the actors, then
only watches: every `report_every_s` it asks the learner for its counters,
writes one record to metrics.jsonl and TensorBoard and refreshes the progress
line. Training itself never passes through the driver.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import logging
import os
import pathlib
import sys
import time
from typing import Any, Callable, TextIO

from impala_rep.config import TrainConfig
from impala_rep.run_log import RunLog, write_json_atomically

__all__ = ["train", "TrainResult", "SetupError", "default_agent_factory"]

_RETURN_WINDOW = 100  # episodes in the reported mean return, as is usual for CartPole/Atari


class SetupError(ValueError):
    """A bad run setting, found before anything was started or written (the CLI exits 2)."""


@dataclasses.dataclass(frozen=True)
class TrainResult:
    frames: int
    wall_s: float
    learner_steps: int
    episodes: int
    episode_return_mean: float | None
    records: list[dict[str, Any]]


def default_agent_factory(config: TrainConfig, observation_shape, num_actions: int) -> Callable[[], Any]:
    """A picklable factory for the configured built-in agent (each process builds its own copy)."""
    from impala_rep.networks import make_agent

    return make_agent(observation_shape=tuple(observation_shape), num_actions=num_actions,
                      network=config.network, use_lstm=config.use_lstm,
                      hidden_sizes=tuple(config.hidden_sizes))


def _start_ray(config: TrainConfig) -> bool:
    """Connects to `config.ray_address` or starts an embedded Ray; True if we started it."""
    import ray

    if ray.is_initialized():
        return False
    if config.ray_address:
        ray.init(address=config.ray_address, logging_level=logging.WARNING)
        return False
    # Embedded Ray for a single machine: bound to loopback, no dashboard, enough
    # CPU slots for the learner and every actor even on a 2-core machine (they
    # share the cores; the OS schedules them).
    ray.init(
        num_cpus=max(os.cpu_count() or 1, config.num_actors + 1),
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        logging_level=logging.WARNING,
        # Workers inherit the driver's TensorFlow log level (quiet by default).
        runtime_env={"env_vars": {"TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2")}},
    )
    return True


class _Progress:
    """One progress line, refreshed in place on a terminal and printed per report otherwise."""

    def __init__(self, out: TextIO, total_frames: int):
        self._out, self._total = out, total_frames
        self._tty = out.isatty()

    def update(self, record: dict[str, Any]) -> None:
        done = record["frames"] / self._total
        rate = record["learner_fps"]
        eta = (self._total - record["frames"]) / rate if rate > 0 else float("inf")
        ret = record["episode_return_mean"]
        line = (f"[{done:6.1%}] frames {record['frames']:>10,}/{self._total:,}  "
                f"env {record['env_fps']:>8,.0f} f/s  learner {rate:>8,.0f} f/s  "
                f"return {'   n/a' if ret is None else f'{ret:7.1f}'}  "
                f"lag {record['policy_lag_mean'] or 0:4.1f}  "
                f"ETA {'?' if eta == float('inf') else f'{eta:5.0f}s'}")
        if self._tty:
            self._out.write("\r" + line)
        else:
            self._out.write(line + "\n")
        self._out.flush()

    def finish(self) -> None:
        if self._tty:
            self._out.write("\n")


def _summary_table(result: TrainResult, config: TrainConfig) -> str:
    records = result.records
    returns = [r["episode_return_mean"] for r in records if r["episode_return_mean"] is not None]
    env_fps = result.frames / result.wall_s if result.wall_s > 0 else 0.0
    rows = [
        ("environment", config.env),
        ("actors x envs", f"{config.num_actors} x {config.envs_per_actor}"),
        ("learner devices", config.learner_devices),
        ("env frames (learner-consumed)", f"{result.frames:,}"),
        ("learner steps", f"{result.learner_steps:,}"),
        ("episodes", f"{result.episodes:,}"),
        ("wall time", f"{result.wall_s:.1f} s"),
        ("frames / s (overall)", f"{env_fps:,.0f}"),
        (f"final mean return (last {_RETURN_WINDOW})",
         "n/a" if result.episode_return_mean is None else f"{result.episode_return_mean:.1f}"),
        ("best mean return", "n/a" if not returns else f"{max(returns):.1f}"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"  {k:<{width}}  {v}" for k, v in rows)


def check_logdir(logdir: str | None) -> None:
    """Raises ValueError unless `logdir` can become this run's directory; writes nothing."""
    if logdir is None:
        return
    path = pathlib.Path(logdir)
    if path.exists():
        if not path.is_dir():
            raise ValueError(f"logdir {logdir!r} exists and is not a directory")
        if any(path.iterdir()):
            raise ValueError(f"logdir {logdir!r} is not empty; choose a new directory")
        if not os.access(path, os.W_OK):
            raise ValueError(f"logdir {logdir!r} is not writable")
        return
    ancestor = path.absolute().parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir() or not os.access(ancestor, os.W_OK):
        raise ValueError(f"logdir {logdir!r} cannot be created: {ancestor} is not a writable directory")


def train(config: TrainConfig, *, agent: Callable[[], Any] | None = None,
          out: TextIO | None = None) -> TrainResult:
    """Trains `config.total_frames` env frames with IMPALA and returns the run's summary.

    Args:
      config: the run's settings.
      agent: a picklable zero-argument callable returning a new, unbuilt `Agent`
        (the learner and every actor process build their own copy). Default: the
        built-in agent that `config.network` / `config.use_lstm` select.
      out: where the progress lines and the summary go (default: sys.stdout).

    `wall_s` in the records and the result counts from this call, start-up included.
    """
    start = time.monotonic()
    out = sys.stdout if out is None else out  # looked up per call: callers may redirect stdout
    from impala_rep.envs.factory import describe_env

    try:  # fail fast, before Ray starts or anything is written
        env_spec = describe_env(config.env)
        check_logdir(config.logdir)
    except ValueError as err:
        raise SetupError(str(err)) from None
    agent_factory = agent
    if agent_factory is None:
        agent_factory = default_agent_factory(config, env_spec.observation_shape, env_spec.num_actions)
    logdir = None
    if config.logdir is not None:
        logdir = pathlib.Path(config.logdir)
        try:
            logdir.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise SetupError(f"logdir {config.logdir!r} cannot be created: {err.strerror}") from None
        write_json_atomically(logdir / "config.json", config.to_json())

    import ray

    from impala_rep.actors.ray_actor import create_actors
    from impala_rep.learner.ray_learner import create_learner

    started_ray = _start_ray(config)
    run_log = RunLog(logdir) if logdir is not None else None
    progress = _Progress(out, config.total_frames)
    print(f"impala-rep: training {config.env} with {config.num_actors} actors x "
          f"{config.envs_per_actor} envs, learner on {config.learner_devices!r}, "
          f"{config.total_frames:,} frames" + (f", logdir {logdir}" if logdir else ""), file=out)
    records: list[dict[str, Any]] = []
    recent_returns: collections.deque = collections.deque(maxlen=_RETURN_WINDOW)
    episodes = 0
    try:
        learner = create_learner(config, env_spec.observation_shape, agent_factory, env_spec.frame_skip)
        # The learner counts agent steps; users see env frames (x frame skip, 4 on Atari).
        skip = env_spec.frame_skip
        actors = create_actors(config=config, agent_factory=agent_factory, learner=learner)
        runs = [a.run.remote() for a in actors]
        last = {"t": time.monotonic(), "produced": 0, "consumed": 0, "busy": 0.0}
        while True:
            finished, _ = ray.wait(runs, timeout=config.report_every_s, num_returns=len(runs))
            report = ray.get(learner.report.remote())
            if report["error"]:
                raise RuntimeError(f"the learner failed:\n{report['error']}")
            ray.get(finished)  # re-raises an actor's failure
            now = time.monotonic()
            dt = max(now - last["t"], 1e-9)
            recent_returns.extend(report["episode_returns"])
            episodes += len(report["episode_returns"])
            metrics = report["metrics"]
            produced, consumed = skip * report["frames_produced"], skip * report["frames_consumed"]
            record = {
                "frames": consumed,
                "wall_s": round(now - start, 3),
                "env_fps": (produced - last["produced"]) / dt,
                "learner_fps": (consumed - last["consumed"]) / dt,
                "episode_return_mean": (sum(recent_returns) / len(recent_returns)) if recent_returns else None,
                "episodes": episodes,
                "policy_lag_mean": metrics.get("policy_lag_mean"),
                "policy_lag_max": metrics.get("policy_lag_max"),
                "queue_size": report["queue_size"],
                "loss": metrics.get("loss"),
                "grad_norm": metrics.get("grad_norm"),
                "vtrace_rho_clipped_fraction": metrics.get("vtrace_rho_clipped_fraction"),
                "entropy": metrics.get("entropy"),
                "learning_rate": metrics.get("learning_rate"),
                "learner_steps": report["learner_steps"],
                "learner_busy_fraction": (report["learner_busy_s"] - last["busy"]) / dt,
                "frames_produced": produced,
                "frames_queued": skip * report["frames_queued"],
            }
            last = {"t": now, "produced": produced, "consumed": consumed, "busy": report["learner_busy_s"]}
            records.append(record)
            if run_log is not None:
                run_log.write(record)
            progress.update(record)
            if report["done"]:
                break
        progress.finish()
        ray.get(learner.stop.remote())
        ray.get(runs, timeout=60)
    finally:
        if run_log is not None:
            run_log.close()
        if started_ray:
            ray.shutdown()
    final = records[-1]
    result = TrainResult(frames=final["frames"], wall_s=time.monotonic() - start,
                         learner_steps=final["learner_steps"], episodes=episodes,
                         episode_return_mean=final["episode_return_mean"], records=records)
    print("\n" + _summary_table(result, config), file=out)
    return result
