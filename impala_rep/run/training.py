"""`train(config)`: one IMPALA run — prepared, launched, watched.

Three parts, each in its own module: `prepare` checks everything before
anything starts (`run/prepare.py`), a launcher starts the learner and the
actors (Ray processes, `run/launch_ray.py`, or threads in this process,
`run/launch_local.py`), and the `Monitor` turns the learner's reports into
metrics, the progress line, TensorBoard and events (`run/monitor.py`). The
driver loop below only connects them; training never passes through it.

What the driver asks of a launcher is the `Launcher` protocol below, as what the
supervisor asks of the actors' side is `run/supervisor.py`'s `ActorFleet`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, Protocol, TextIO

from impala_rep.config import TrainConfig
from impala_rep.learner.report import LearnerReport
from impala_rep.run.errors import LearnerLost, SetupError, TrainingFailed, TrainingInterrupted
from impala_rep.run.monitor import Monitor, TrainResult
from impala_rep.run.periodic_evaluation import EvaluationRunner, EvaluationSchedule
from impala_rep.run.prepare import RunPlan, prepare
from impala_rep.run.ray_setup import prepare_ray_import
from impala_rep.run.shutdown import StopSignals
from impala_rep.run.supervisor import ActorCrashLoop, ActorFleet, ActorSupervisor

__all__ = [
    "train",
    "Launcher",
    "TrainResult",
    "SetupError",
    "TrainingFailed",
    "TrainingInterrupted",
]


class Launcher(Protocol):
    """Starts a run's learner and actors, and answers the driver about them.

    `RayLauncher` (Ray processes, `run/launch_ray.py`) and `LocalLauncher` (threads in this
    process, `run/launch_local.py`) implement it; each is built from the `RunPlan`. The
    driver calls `connect`, `start`, `wait_started`, `placement`, then `report` until the
    run is done, `stop_learner` and a last `report`; `close` always, once, at the end;
    `abort` from the handler of a second signal, at any time.
    """

    fleet: ActorFleet | None
    """Where actors run: the `ActorFleet` the driver's `ActorSupervisor` fills. None
    until `start` has returned."""

    evaluations: EvaluationRunner | None
    """Where `--eval-every`'s evaluations run (`run/periodic_evaluation.py`); None without
    it, and until `start` has returned."""

    restored_from: str | None
    """The checkpoint the learner was restored from, once `wait_started` has returned;
    None for a fresh start."""

    startup: dict[str, float]
    """The start-up stages the launcher itself saw (`impala_rep.startup`: "ray started"),
    stamped as they happened; the learner's come in its reports."""

    def connect(self) -> None:
        """Starts or joins what the run runs on (Ray, for the Ray launcher). SetupError if
        that cannot be done or could never place the run."""

    def start(self) -> None:
        """Starts building the learner (restored, on resume); `fleet` can start actors from
        then on. TrainingFailed if the learner could not start."""

    def wait_started(self) -> LearnerReport:
        """Waits until the learner is built (and restored); its first report.
        TrainingFailed if it could not start."""

    def placement(self) -> str | None:
        """A line saying where the learner and the actors run, worth printing (on a
        cluster); None when there is nothing to say. TrainingFailed if they could not
        be placed."""

    def report(self) -> LearnerReport:
        """The learner's latest report. LearnerLost if it is gone or does not answer."""

    def stop_learner(self) -> tuple[str, int] | None:
        """Stops training (actors blocked on the learner's full queue are released) and
        writes the final checkpoint: (path, learner step), or None when none was written.
        LearnerLost if the learner is gone or did not stop."""

    def close(self) -> None:
        """Stops the actors and frees what `connect` and `start` started (an embedded
        Ray is shut down), whatever state the run is in."""

    def abort(self) -> None:
        """A second signal: no time for a clean stop, but nothing the run started may
        outlive this process."""


def train(
    config: TrainConfig,
    *,
    agent: Callable[[], Any] | None = None,
    loss: Callable[..., Any] | None = None,
    out: TextIO | None = None,
    resume: bool = False,
    on_record: Callable[[dict[str, Any]], None] | None = None,
) -> TrainResult:
    """Trains `config.run.total_frames` env frames with IMPALA and returns the run's summary.

    Args:
      config: the run's settings; `config.run.launcher` picks Ray processes or threads.
      agent: a picklable zero-argument callable returning a new, unbuilt `Agent`
        (the learner and every actor build their own copy). Default: the built-in
        agent `config.agent` selects, or the factory `config.agent.factory` names
        (`impala_rep.run.user_code`; not both).
      loss: a picklable loss function for the learner (`impala_rep.loss_fn.LossFn`).
        Default: the function `config.loss.function` names, else the IMPALA loss.
      out: where the progress lines and the summary go (default: sys.stdout).
      resume: continue the run in `config.run.logdir` from its newest readable
        checkpoint (`impala_rep.run.resume` says which settings may change).
      on_record: called with each metrics record (docs/reference/metrics.md) once it is
        written, on the calling thread (`impala-rep tune` reports them to Ray Tune); what
        it raises ends the run as an error in the driver would.

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
    launcher = None
    # From the first line on: a signal during the checks or the start-up stops the run too.
    signals = StopSignals(out=out, on_second=lambda: launcher is not None and launcher.abort())
    with signals:
        if config.run.launcher == "ray":  # before anything imports ray (run/ray_setup.py)
            prepare_ray_import(embedded=not config.run.ray_address)
        plan = prepare(config, agent=agent, loss=loss, resume=resume)
        if signals.received is not None:  # nothing started or written yet
            raise TrainingInterrupted(signals.received, None)
        launcher = _launcher(plan)
        monitor = Monitor(plan, out=out, start=start, on_record=on_record)
        try:
            failure = _drive(launcher, monitor, signals, plan)
        finally:
            try:
                launcher.close()
            finally:
                monitor.close()
    failure = failure or monitor.write_failure  # closing the logs flushes them
    if failure is not None:
        raise TrainingFailed(monitor.failure_message(failure))
    if signals.received is not None and not monitor.records:  # stopped while starting up
        monitor.discard_if_unresumable()
        raise TrainingInterrupted(signals.received, None)
    result = monitor.result()
    monitor.summary(result)
    if signals.received is not None:
        monitor.discard_if_unresumable()
        raise TrainingInterrupted(signals.received, result)
    return result


def _drive(launcher: Launcher, monitor: Monitor, signals: StopSignals, plan: RunPlan) -> str | None:
    """Starts the run, watches it until it is done, fails or is stopped, and stops it;
    returns why it failed (None: it did not)."""
    config = plan.config
    launcher.connect()
    if signals.received is not None:
        return None
    launcher.start()
    # The actors start while the learner builds (each waits for its first weights), so
    # their start-up overlaps the learner's; their seeds mix in the step the run resumes
    # from, which the driver reads from the checkpoint index (`RunPlan.start_step`).
    actors = ActorSupervisor(
        fleet=launcher.fleet,
        num_actors=config.actors.num_actors,
        seed=config.run.seed,
        start_step=plan.start_step,
        max_failures=config.actors.max_actor_failures,
        timeout_s=config.actors.actor_timeout_s,
    )
    first = launcher.wait_started()
    actors.learner_ready()
    placement = launcher.placement()  # may fail (TrainingFailed): nothing is written yet
    monitor.open(first, restored_from=launcher.restored_from, startup=launcher.startup)
    if placement is not None:
        monitor.say(placement)
    evaluations = None
    if launcher.evaluations is not None:
        evaluations = EvaluationSchedule(
            launcher.evaluations,
            every=config.run.eval_every,
            episodes=config.run.eval_episodes,
            seed=config.run.seed,
            frames_at_start=monitor.frames_at_start,
        )
    failure = monitor.write_failure
    while failure is None and signals.received is None:
        try:
            failures = actors.poll(config.run.report_every_s)
            report = launcher.report()
            if not report.done:
                failures += actors.replace_silent(report.actor_silence_s)
        except ActorCrashLoop as err:
            # Every actor fails once the learner is gone: say that, not "actors keep failing".
            failure = _learner_lost(launcher) or f"actors keep failing: {err}"
            break
        except LearnerLost as err:
            failure = str(err)
            break
        monitor.actor_failures(failures)
        if evaluations is not None:  # one that ended goes into this report's record
            monitor.evaluated(evaluations.poll(plan.frame_skip * report.frames_consumed))
        monitor.report(report, actor_restarts=actors.restarts)
        failure = _failure_in(report) or monitor.write_failure
        if report.done:
            break
    monitor.finish_progress()
    # Stop the learner first: actors blocked on its full queue are released and their
    # loops end; then the final checkpoint (none after a non-finite step or an error:
    # the last good one stays the newest).
    try:
        monitor.saved(launcher.stop_learner())
    except LearnerLost as err:
        return failure or str(err)
    if failure is None:
        # One last record after the stop: its counters are final, and
        # frames_produced == frames + frames_queued reconciles the whole run. With
        # --eval-every it holds the evaluation of the final weights (not after a signal:
        # whoever sent it wants the run to end).
        try:
            if evaluations is not None and signals.received is None:
                _evaluate_final_weights(launcher, monitor, evaluations, plan, actors.restarts)
            monitor.report(launcher.report(), actor_restarts=actors.restarts, progress=False)
        except LearnerLost as err:
            failure = str(err)
    return failure or monitor.write_failure


def _evaluate_final_weights(
    launcher: Launcher,
    monitor: Monitor,
    evaluations: EvaluationSchedule,
    plan: RunPlan,
    actor_restarts: int,
) -> None:
    """After the stop: waits for the evaluation still playing, if one is, and evaluates the
    final weights; the last one ends up in the run's last record, an earlier one in a record
    of its own."""
    final_frames = plan.frame_skip * launcher.report().frames_consumed
    if evaluations.evaluates_at_finish(final_frames):
        monitor.say(f"evaluating the final weights ({plan.config.run.eval_episodes} episodes)")
    outcomes = evaluations.finish(final_frames)
    for outcome in outcomes[:-1]:
        monitor.evaluated(outcome)
        monitor.report(launcher.report(), actor_restarts=actor_restarts, progress=False)
    if outcomes:
        monitor.evaluated(outcomes[-1])


def _learner_lost(launcher: Launcher) -> str | None:
    try:
        launcher.report()
    except LearnerLost as err:
        return str(err)
    return None


def _launcher(plan: RunPlan) -> Launcher:
    if plan.config.run.launcher == "local":
        from impala_rep.run.launch_local import LocalLauncher

        return LocalLauncher(plan)
    from impala_rep.run.launch_ray import RayLauncher

    return RayLauncher(plan)


def _failure_in(report) -> str | None:
    """Why the learner stopped on its own, if it failed."""
    if report.error:
        return f"the learner failed:\n{report.error}"
    if report.non_finite:
        return f"training stopped: {report.non_finite}"
    return None
