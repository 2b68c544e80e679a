"""`train(config)`: one IMPALA run on Ray — learner actor, actor processes, live metrics.

The driver starts (or joins) Ray, launches the learner and the actors, then
only watches: every `report_every_s` it asks the learner for its counters,
writes one record to metrics.jsonl and TensorBoard and refreshes the progress
line. Training itself never passes through the driver.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import pathlib
import sys
import time
from typing import Any, Callable, TextIO

from impala_rep.config import TrainConfig
from impala_rep.learner.service import RETURN_WINDOW
from impala_rep.ray_errors import describe_ray_error
from impala_rep.resume import check_resumable
from impala_rep.run_log import RunLog, write_json_atomically
from impala_rep.shutdown import StopSignals

__all__ = ["train", "TrainResult", "SetupError", "TrainingFailed", "TrainingInterrupted",
           "default_agent_factory"]


class SetupError(ValueError):
    """A bad run setting, found before anything was started or written (the CLI exits 2)."""


class TrainingFailed(RuntimeError):
    """The run stopped on a failure; the message says which and how to resume (the CLI exits 1)."""


class TrainingInterrupted(Exception):
    """SIGINT or SIGTERM stopped the run after a clean shutdown (the CLI exits 128 + signal)."""

    def __init__(self, signum: int, result: "TrainResult"):
        super().__init__(f"stopped by signal {signum}")
        self.signum, self.result = signum, result


@dataclasses.dataclass(frozen=True)
class TrainResult:
    frames: int
    wall_s: float
    learner_steps: int
    episodes: int
    episode_return_mean: float | None
    records: list[dict[str, Any]]
    actor_restarts: int = 0


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
    # CPU slots for every learner host and every actor even on a 2-core machine (they
    # share the cores; the OS schedules them).
    ray.init(
        num_cpus=max(os.cpu_count() or 1, config.num_actors + config.learner_hosts),
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
        ("learner devices", config.learner_devices if config.learner_hosts == 1
         else f"{config.learner_hosts} hosts x {config.learner_devices}"),
        ("env frames (learner-consumed)", f"{result.frames:,}"),
        ("learner steps", f"{result.learner_steps:,}"),
        ("episodes", f"{result.episodes:,}"),
        ("wall time", f"{result.wall_s:.1f} s"),
        ("frames / s (overall)", f"{env_fps:,.0f}"),
        (f"final mean return (last {RETURN_WINDOW})",
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
          loss: Callable[..., Any] | None = None, out: TextIO | None = None,
          resume: bool = False) -> TrainResult:
    """Trains `config.total_frames` env frames with IMPALA and returns the run's summary.

    Args:
      config: the run's settings.
      agent: a picklable zero-argument callable returning a new, unbuilt `Agent`
        (the learner and every actor process build their own copy). Default: the
        built-in agent that `config.network` / `config.use_lstm` select, or the
        factory `config.agent` names (`impala_rep.user_code`; not both).
      loss: a picklable loss function for the learner (`impala_rep.loss_fn.LossFn`).
        Default: the function `config.loss` names, else the IMPALA loss.
      out: where the progress lines and the summary go (default: sys.stdout).
      resume: continue the run in `config.logdir` from its newest readable
        checkpoint (`impala_rep.resume` says which settings may change).

    Raises:
      SetupError: a bad setting, found before anything started or was written.
      TrainingFailed: the learner died or stopped on a non-finite loss, or actors
        kept failing; the message says what happened and how to resume.
      TrainingInterrupted: SIGINT/SIGTERM stopped the run cleanly (checkpoint
        saved, actors stopped, logs flushed); `.result` holds what was done.

    `wall_s` in the records and the result counts from this call, start-up included.
    """
    start = time.monotonic()
    out = sys.stdout if out is None else out  # looked up per call: callers may redirect stdout
    from impala_rep.envs.factory import describe_env
    from impala_rep.user_code import resolve_agent_and_loss

    try:  # fail fast, before Ray starts or anything is written
        env_spec = describe_env(config.env)
        if resume:
            check_resumable(config)
        else:
            check_logdir(config.logdir)
        agent_factory, loss = resolve_agent_and_loss(
            agent_spec=config.agent, loss_spec=config.loss, agent=agent, loss=loss,
            observation_shape=env_spec.observation_shape, num_actions=env_spec.num_actions)
        if agent_factory is None:  # e.g. a network that does not fit the observation
            agent_factory = default_agent_factory(config, env_spec.observation_shape,
                                                  env_spec.num_actions)
    except ValueError as err:
        raise SetupError(str(err)) from None
    logdir = None
    if config.logdir is not None:
        logdir = pathlib.Path(config.logdir)
        try:
            logdir.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise SetupError(f"logdir {config.logdir!r} cannot be created: {err.strerror}") from None
        write_json_atomically(logdir / "config.json", config.to_json())

    import ray

    from impala_rep.actors.ray_actor import create_actor
    from impala_rep.actors.supervisor import ActorCrashLoop, ActorSupervisor
    from impala_rep.learner.learner_group import create_learner_group

    started_ray = _start_ray(config)
    run_log = RunLog(logdir) if logdir is not None else None
    progress = _Progress(out, config.total_frames)
    hosts = "" if config.learner_hosts == 1 else f"{config.learner_hosts} hosts x "
    print(f"impala-rep: {'resuming' if resume else 'training'} {config.env} with {config.num_actors} "
          f"actors x {config.envs_per_actor} envs, learner on {hosts}{config.learner_devices!r}, "
          f"{config.total_frames:,} frames" + (f", logdir {logdir}" if logdir else ""), file=out)
    records: list[dict[str, Any]] = []
    failure: str | None = None
    last_checkpoint = None
    signals = StopSignals(out=out, on_second=ray.shutdown if started_ray else lambda: None)
    learner = supervisor = None
    learner_alive = True
    try:
        with signals:
            # One learner actor, or config.learner_hosts of them in one
            # MultiWorkerMirroredStrategy group (learner/learner_group.py).
            try:
                learner = create_learner_group(config, env_spec.observation_shape, agent_factory,
                                               env_spec.frame_skip, loss_fn=loss, resume=resume)
            except RuntimeError as err:  # e.g. hosts that kept getting one address
                raise TrainingFailed(f"the learner could not start: {err}") from None
            # The learner counts agent steps; users see env frames (x frame skip, 4 on Atari).
            skip = env_spec.frame_skip
            try:  # waits for the learner to be built (and restored)
                learner.wait_started()
                first = learner.report()
            except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as err:
                raise TrainingFailed(f"the learner could not start: {describe_ray_error(err)}") from None
            if resume:
                print(f"impala-rep: resumed from {learner.restored_from()} "
                      f"(learner step {first['learner_steps']:,}, {skip * first['frames_consumed']:,} "
                      "frames)", file=out)
            last_checkpoint = first["last_checkpoint"]
            actor_nodes: list = []  # node_id() refs, asked before each actor's run() is queued

            def start_actor(slot: int, seed: int):
                actor = create_actor(config=config, agent_factory=agent_factory,
                                     learner=learner.host_for(slot),
                                     weights_from=learner.weights_source_for(slot), seed=seed)
                if config.ray_address:
                    actor_nodes.append(actor.node_id.remote())
                return actor

            supervisor = ActorSupervisor(
                create=start_actor,
                num_actors=config.num_actors, seed=config.seed, start_step=first["learner_steps"],
                max_failures=config.max_actor_failures)
            if config.ray_address:  # on a cluster, say where Ray placed the processes
                print(f"impala-rep: {_placement(learner.hosts, actor_nodes)}", file=out, flush=True)
            last = {"t": time.monotonic(), "produced": skip * first["frames_produced"],
                    "consumed": skip * first["frames_consumed"], "busy": 0.0}
            while True:
                try:
                    failures = supervisor.poll(config.report_every_s)
                except ActorCrashLoop as err:
                    failure = f"actors keep failing: {err}"
                    break
                try:
                    report = learner.report()
                except ray.exceptions.RayActorError:
                    failure, learner_alive = _LEARNER_DIED, False
                    break
                now = time.monotonic()
                for event in failures:
                    print(f"\nimpala-rep: actor {event.slot} failed ({event.cause}); started a "
                          f"replacement (actor restarts: {event.restarts})", file=out, flush=True)
                    if run_log is not None:
                        run_log.event({"event": "actor_restart", "wall_s": round(now - start, 3),
                                       "actor": event.slot, "cause": event.cause,
                                       "actor_restarts": event.restarts})
                record = _record(report, last, now=now, start=start, skip=skip,
                                 actor_restarts=supervisor.restarts)
                last = {"t": now, "produced": record["frames_produced"], "consumed": record["frames"],
                        "busy": report["learner_busy_s"]}
                last_checkpoint = report["last_checkpoint"]
                records.append(record)
                if run_log is not None:
                    run_log.write(record)
                progress.update(record)
                if report["error"]:
                    failure = f"the learner failed:\n{report['error']}"
                    break
                if report["non_finite"]:
                    failure = f"training stopped: {report['non_finite']}"
                    break
                if report["done"] or signals.received is not None:
                    break
            progress.finish()
            # Stop the learner first: actors blocked on its full queue are released
            # and their loops end; then the final checkpoint (the learner writes none
            # after a non-finite step or an error: the last good one stays newest).
            if learner_alive:
                try:
                    if learner.stop():
                        last_checkpoint = learner.save() or last_checkpoint
                    else:  # a host left in a collective by a failed peer: no save, kill
                        failure, learner_alive = failure or _HOST_STUCK, False
                except ray.exceptions.RayActorError:
                    failure = failure or _LEARNER_DIED
            if failure is None:
                # One last record after the stop: the counters there are final, and
                # frames_produced == frames + frames_queued reconciles the whole run.
                record = _record(learner.report(), last, now=time.monotonic(),
                                 start=start, skip=skip, actor_restarts=supervisor.restarts)
                records.append(record)
                if run_log is not None:
                    run_log.write(record)
    finally:
        if supervisor is not None:
            supervisor.stop(timeout_s=30.0)
        if learner is not None and not started_ray:
            learner.kill()  # on a shared cluster nothing of this run may linger
        if run_log is not None:
            run_log.close()
        if started_ray:
            ray.shutdown()
    if failure is not None:
        if config.logdir is not None:  # a checkpoint written after the last report counts too
            from impala_rep.learner.checkpointing import CHECKPOINT_SUBDIR, newest_checkpoint

            last_checkpoint = (newest_checkpoint(pathlib.Path(config.logdir) / CHECKPOINT_SUBDIR)
                               or last_checkpoint)
        raise TrainingFailed(_failure_message(failure, config, last_checkpoint))
    final = records[-1]
    result = TrainResult(frames=final["frames"], wall_s=time.monotonic() - start,
                         learner_steps=final["learner_steps"], episodes=final["episodes"],
                         episode_return_mean=final["episode_return_mean"], records=records,
                         actor_restarts=final["actor_restarts"])
    print("\n" + _summary_table(result, config), file=out)
    if last_checkpoint is not None:
        print(f"  checkpoint: {last_checkpoint[0]} (continue with: impala-rep train --resume "
              f"{config.logdir})", file=out)
    if signals.received is not None:
        raise TrainingInterrupted(signals.received, result)
    return result


_LEARNER_DIED = "the learner process died"
_HOST_STUCK = "a learner host did not stop (a peer host failed during a step)"


def _record(report: dict[str, Any], last: dict[str, Any], *, now: float, start: float, skip: int,
            actor_restarts: int) -> dict[str, Any]:
    """One metrics.jsonl record from a learner report (frames in env frames: x `skip`)."""
    dt = max(now - last["t"], 1e-9)
    metrics = report["metrics"]
    produced, consumed = skip * report["frames_produced"], skip * report["frames_consumed"]
    record = {
        "frames": consumed,
        "wall_s": round(now - start, 3),
        "env_fps": (produced - last["produced"]) / dt,
        "learner_fps": (consumed - last["consumed"]) / dt,
        "episode_return_mean": report["episode_return_mean"],
        "episodes": report["episodes"],
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
        "actor_restarts": actor_restarts,
    }
    # Every other metric of the learner step too: the loss's components and whatever a
    # custom loss reports (e.g. an extra penalty term), under the loss's own names.
    record.update({k: v for k, v in metrics.items() if k not in record})
    return record


def _placement(hosts, actor_node_refs) -> str:
    """Which Ray node each learner host and actor landed on (node ids shortened)."""
    import ray

    host_nodes = ray.get([host.node_id.remote() for host in hosts])
    actor_nodes = ray.get(list(actor_node_refs))
    short = {node: node[:8] for node in host_nodes + actor_nodes}
    per_node = {short[n]: actor_nodes.count(n) for n in dict.fromkeys(actor_nodes)}
    return (f"placement: learner host(s) on node(s) {', '.join(short[n] for n in host_nodes)}; "
            f"actors per node {per_node} ({len(set(host_nodes + actor_nodes))} node(s) in use)")


def _failure_message(failure: str, config: TrainConfig, last_checkpoint) -> str:
    if config.logdir is None:
        return f"{failure}; no checkpoint was kept (run with --logdir to be able to resume)"
    if last_checkpoint is None:
        return f"{failure}; no checkpoint was written yet, so the run cannot be resumed"
    path, step = last_checkpoint
    return (f"{failure}\nthe last good checkpoint is {path} (learner step {step:,}); continue with: "
            f"impala-rep train --resume {config.logdir}")
