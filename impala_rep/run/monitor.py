"""Watching a run: metrics records, the progress line, TensorBoard, events and the summary.

The `Monitor` turns the learner's reports into what a user sees and what the
run leaves in its logdir (config.json, metrics.jsonl, events.jsonl,
tensorboard/). It opens the logdir only once the run is really running
(`open`, after the launcher started the learner and actors), so a run that
fails to start leaves no half-written directory behind. A write that fails (a
full disk, a lost mount) ends the logging, not the process: `write_failure`
says what failed, and the driver stops the run with a checkpoint.
"""

from __future__ import annotations

import contextlib
import dataclasses
import pathlib
import shutil
import time
from collections.abc import Callable
from typing import Any, TextIO

from impala_rep.learner.accounting import RETURN_WINDOW
from impala_rep.learner.report import LearnerReport
from impala_rep.run.errors import one_line
from impala_rep.run.periodic_evaluation import EvaluationOutcome
from impala_rep.run.prepare import RunPlan
from impala_rep.run.run_log import RunLog, write_json_atomically
from impala_rep.run.supervisor import ActorFailure
from impala_rep.startup import STAGES, stamp

__all__ = ["Monitor", "TrainResult", "RECORD_FIELDS"]

# The fields every metrics.jsonl record has (before the learner's and the loss's metrics,
# which follow under their own names), and what each means; frames are env frames.
RECORD_FIELDS = {
    "frames": "env frames the learner has trained on (Atari: agent steps x 4 frame skip)",
    "wall_s": "seconds since the run started (a resumed run continues its count)",
    "env_fps": "env frames/s the actors produced since the previous report",
    "learner_fps": "env frames/s the learner trained on since the previous report",
    "episode_return_mean": "mean return of the last 100 episodes, as the actors played them "
    "(sampling their actions); null before the first episode ends",
    "episodes": "episodes ended so far",
    "policy_lag_mean": "mean learner updates between the weights that acted the last batch "
    "and the weights its first pass trained",
    "policy_lag_max": "the largest such lag in the last batch",
    "queue_size": "unroll blocks waiting in the learner's queue",
    "loss": "the last update's total loss",
    "grad_norm": "the last update's global gradient norm, before clipping",
    "vtrace_rho_clipped_fraction": "steps of the last batch whose importance weight was clipped",
    "entropy": "the policy's mean entropy per step in the last batch",
    "learning_rate": "the learning rate of the last update",
    "learner_steps": "learner updates so far, every pass counted",
    "learner_busy_fraction": "fraction of the time since the previous report the learner spent "
    "in its step",
    "frames_produced": "env frames the actors have sent",
    "frames_queued": "env frames sent but not trained on yet (frames_produced = frames + "
    "frames_queued)",
    "actor_restarts": "actors replaced after a failure or a hang",
}


@dataclasses.dataclass(frozen=True)
class TrainResult:
    """What a `train` call did. `frames`, `learner_steps` and `episodes` are the run's
    counters at its end, a resumed run's included; `wall_s` is this call's time, and
    `frames_at_start` the frames the run had trained when it began (0 unless resumed)."""

    frames: int
    wall_s: float
    learner_steps: int
    episodes: int
    episode_return_mean: float | None
    records: list[dict[str, Any]]
    actor_restarts: int = 0
    frames_at_start: int = 0

    @property
    def frames_per_second(self) -> float:
        """The frames this call trained per second of it: a resumed run's earlier frames
        took another command's time."""
        return (self.frames - self.frames_at_start) / self.wall_s if self.wall_s > 0 else 0.0


class Monitor:
    """Records, progress and logs of one run; `start` is the run's monotonic start time."""

    def __init__(
        self,
        plan: RunPlan,
        *,
        out: TextIO,
        start: float,
        on_record: Callable[[dict[str, Any]], None] | None = None,
    ):
        self._config, self._skip, self._out, self._start = plan.config, plan.frame_skip, out, start
        self._on_record = on_record
        self._progress = _Progress(out, plan.config.run.total_frames)
        self._log: RunLog | None = None
        self._last: dict[str, float] = {}
        self._frames_at_start = 0  # the restored counters' frames, set by `open`
        self._no_episode_hint: float | None = None  # frames produced at which to give it
        self._evaluation: dict[str, Any] = {}  # for the next record (`EVALUATION_FIELDS`)
        self._startup: dict[str, float] | None = {}  # the launcher's stages; None once written
        self.records: list[dict[str, Any]] = []
        self.last_checkpoint: tuple[str, int] | None = None
        self.write_failure: str | None = None  # the first failed write of the logs, one line
        config = plan.config
        # What a failed new run may remove again: its directory, or an empty one's contents.
        self._discardable = config.run.logdir is not None and not plan.resume
        self._made_dir = self._discardable and not pathlib.Path(config.run.logdir).exists()
        hosts = "" if config.learner.hosts == 1 else f"{config.learner.hosts} hosts x "
        logdir = config.run.logdir
        print(
            f"impala-rep: {'resuming' if plan.resume else 'training'} {config.env.id} with "
            f"{config.actors.num_actors} actors x {config.actors.envs_per_actor} envs, learner on "
            f"{hosts}{config.learner.devices!r}, {config.run.total_frames:,} frames"
            + (f", logdir {logdir}" if logdir else ""),
            file=out,
        )

    def open(
        self,
        first: LearnerReport,
        *,
        restored_from: str | None,
        startup: dict[str, float] | None = None,
    ) -> None:
        """The run is running: writes config.json and opens the logs; `first` is the learner's
        first report (after a restore: the restored counters); `startup` the stages the
        launcher stamped (`impala_rep.startup`), for the start-up event."""
        self._startup = dict(startup or {})
        if self._config.run.logdir is not None:
            with self._writing():
                self._open_logs(first, restored_from)
        if restored_from is not None:
            print(
                f"impala-rep: resumed from {restored_from} (learner step {first.learner_steps:,}, "
                f"{self._skip * first.frames_consumed:,} frames)",
                file=self._out,
            )
        self.last_checkpoint = first.last_checkpoint
        # A fresh run's learner may have trained on a batch by its first report (the actors
        # start before it): only a restored run's frames are another command's.
        self._frames_at_start = 0 if restored_from is None else self._skip * first.frames_consumed
        self._last = {
            "t": time.monotonic(),
            "produced": self._skip * first.frames_produced,
            "consumed": self._skip * first.frames_consumed,
            "busy": 0.0,
        }
        # Atari ids (frame skip 4) have their own episode rules and refuse the flag the hint names.
        if first.episodes == 0 and self._skip == 1:
            config = self._config
            envs = config.actors.num_actors * config.actors.envs_per_actor
            self._no_episode_hint = self._last["produced"] + envs * _NO_EPISODE_STEPS

    def _open_logs(self, first: LearnerReport, restored_from: str | None) -> None:
        path = pathlib.Path(self._config.run.logdir)
        path.mkdir(parents=True, exist_ok=True)
        write_json_atomically(path / "config.json", self._config.to_json())
        restored = None if restored_from is None else self._skip * first.frames_consumed
        self._log = RunLog(path, resumed_frames=restored)
        if restored_from is not None:
            self._log.event(
                {
                    "event": "resumed",
                    "wall_s": self._wall_s(),
                    "checkpoint": restored_from,
                    "frames": restored,
                    "dropped_records": self._log.dropped,
                }
            )

    @contextlib.contextmanager
    def _writing(self):
        """Turns a failed write of the logs into `write_failure` and ends the logging."""
        try:
            yield
        except OSError as err:
            self.write_failure = self.write_failure or (
                f"cannot write the run's logs in {self._config.run.logdir}: {one_line(err)}"
            )
            log, self._log = self._log, None
            if log is not None:
                with contextlib.suppress(OSError):
                    log.close()

    def say(self, line: str) -> None:
        print(f"impala-rep: {line}", file=self._out, flush=True)

    def actor_failures(self, failures: list[ActorFailure]) -> None:
        for event in failures:
            print(
                f"\nimpala-rep: actor {event.slot} failed ({event.cause}); started a replacement "
                f"(actor restarts: {event.restarts})",
                file=self._out,
                flush=True,
            )
            if self._log is not None:
                with self._writing():
                    self._log.event(
                        {
                            "event": "actor_restart",
                            "wall_s": self._wall_s(),
                            "actor": event.slot,
                            "cause": event.cause,
                            "actor_restarts": event.restarts,
                        }
                    )

    def report(self, report: LearnerReport, *, actor_restarts: int, progress: bool = True) -> None:
        """One metrics record from `report` (frames in env frames), logged and shown."""
        now = time.monotonic()
        record = _record(
            report,
            self._last,
            now=now,
            wall_s=self._wall_s(now),
            skip=self._skip,
            actor_restarts=actor_restarts,
        )
        self._last = {
            "t": now,
            "produced": record["frames_produced"],
            "consumed": record["frames"],
            "busy": report.learner_busy_s,
        }
        self.last_checkpoint = report.last_checkpoint or self.last_checkpoint
        record.update(self._evaluation)  # an evaluation that ended since the last record
        self._evaluation = {}
        self.records.append(record)
        if self._log is not None:
            with self._writing():
                self._log.write(record)
        if progress:
            self._progress.update(record)
        self._hint_if_no_episode_ends(record)
        self._startup_event(report)
        if self._on_record is not None:
            self._on_record(record)

    def _startup_event(self, report: LearnerReport) -> None:
        """Once the first frame is trained: a `startup` event in events.jsonl, each stage in
        seconds from the `train` call (`called_at`, on the stages' clock, places them
        against a launch measured outside, as benchmarks/startup.py does)."""
        if self._startup is None or "first trained frame" not in report.startup:
            return
        stamps = {**self._startup, **report.startup}
        self._startup = None  # one event per run
        if self._log is not None:
            called_at = stamp() - (time.monotonic() - self._start)
            with self._writing():
                self._log.event(
                    {
                        "event": "startup",
                        "wall_s": self._wall_s(),
                        "called_at": called_at,
                        "seconds": {
                            name: round(stamps[name] - called_at, 3)
                            for name in STAGES
                            if name in stamps
                        },
                    }
                )

    def _hint_if_no_episode_ends(self, record: dict[str, Any]) -> None:
        """Once, when every env has stepped _NO_EPISODE_STEPS times without an episode ending:
        the return stays n/a, and an env with no time limit (CliffWalking-v1) may never end one."""
        if self._no_episode_hint is None or record["episodes"] > 0:
            self._no_episode_hint = None
            return
        if record["frames_produced"] >= self._no_episode_hint:
            self._no_episode_hint = None
            limit = self._config.env.max_episode_steps
            advice = (
                "--max-episode-steps N ends episodes after N steps, as a time limit does"
                if limit is None
                else f"each lasts up to --max-episode-steps {limit}"
            )
            self._progress.finish()  # a terminal's in-place line ends before the message
            self.say(
                f"no episode has ended in {record['frames_produced']:,} frames "
                f"({_NO_EPISODE_STEPS:,}+ steps in each env), so no return is known yet; {advice}"
            )

    @property
    def frames_at_start(self) -> int:
        """The frames a resumed run had trained before this command (0 for a new run); known
        once `open` has been called."""
        return self._frames_at_start

    def evaluated(self, outcome: EvaluationOutcome | None) -> None:
        """An evaluation of `--eval-every` ended: its fields go into the next record; a
        failed one is said, once (no more are asked for), and goes to events.jsonl."""
        if outcome is None:
            return
        self._evaluation = outcome.fields()
        if outcome.error is not None:
            self._progress.finish()
            self.say(
                f"the evaluation at {outcome.frames:,} frames failed ({outcome.error}); "
                "training goes on without evaluations"
            )
        elif not outcome.complete:
            self._progress.finish()
            self.say(
                f"the evaluation at {outcome.frames:,} frames ended {len(outcome.returns)} of "
                f"{outcome.episodes} episodes within its frame budget: the greedy policy may "
                "never end an episode in this env (--max-episode-steps sets a time limit)"
            )
        if self._log is not None and not outcome.complete:
            with self._writing():
                self._log.event(
                    {
                        "event": "evaluation_failed" if outcome.error else "evaluation_incomplete",
                        "wall_s": self._wall_s(),
                        "frames": outcome.frames,
                        "cause": outcome.error,
                        "episodes": len(outcome.returns),
                    }
                )

    def finish_progress(self) -> None:
        self._progress.finish()

    def saved(self, checkpoint: tuple[str, int] | None) -> None:
        self.last_checkpoint = checkpoint or self.last_checkpoint

    def close(self) -> None:
        if self._log is not None:
            with self._writing():
                self._log.close()

    def result(self) -> TrainResult:
        final = self.records[-1]
        return TrainResult(
            frames=final["frames"],
            wall_s=time.monotonic() - self._start,
            learner_steps=final["learner_steps"],
            episodes=final["episodes"],
            episode_return_mean=final["episode_return_mean"],
            records=self.records,
            actor_restarts=final["actor_restarts"],
            frames_at_start=self._frames_at_start,
        )

    def summary(self, result: TrainResult) -> None:
        print("\n" + _summary_table(result, self._config), file=self._out)
        if self.last_checkpoint is not None:
            print(
                f"  checkpoint: {self.last_checkpoint[0]} (continue with: "
                f"impala-rep train --resume {self._config.run.logdir})",
                file=self._out,
            )

    def failure_message(self, failure: str) -> str:
        """`failure` with where the run can be resumed from (the newest checkpoint on disk:
        one written after the last report counts too)."""
        logdir = self._config.run.logdir
        if logdir is None:
            return f"{failure}; no checkpoint was kept (run with --logdir to be able to resume)"
        last = self._newest_checkpoint()
        if last is None and self._discard_unresumable():
            return (
                f"{failure}\nno checkpoint was written yet, so nothing of this run was kept "
                f"({logdir} removed); run the same command again"
            )
        if last is None:
            return f"{failure}; no checkpoint was written yet, so the run cannot be resumed"
        path, step = last
        return (
            f"{failure}\nthe last good checkpoint is {path} (learner step {step:,}); continue "
            f"with: impala-rep train --resume {logdir}"
        )

    def discard_if_unresumable(self) -> None:
        """After a stop by signal: a new run with no checkpoint leaves nothing behind."""
        if self._config.run.logdir is not None and self._newest_checkpoint() is None:
            if self._discard_unresumable():
                print(
                    f"impala-rep: stopped before the first checkpoint: nothing of this run was "
                    f"kept ({self._config.run.logdir} removed)",
                    file=self._out,
                    flush=True,
                )

    def _newest_checkpoint(self) -> tuple[str, int] | None:
        """The newest checkpoint on disk (one written after the last report counts too)."""
        from impala_rep.learner.checkpoint_index import CHECKPOINT_SUBDIR, newest_checkpoint

        directory = pathlib.Path(self._config.run.logdir) / CHECKPOINT_SUBDIR
        return newest_checkpoint(directory) or self.last_checkpoint

    def _discard_unresumable(self) -> bool:
        """Removes what this new run created in its logdir; whether it did."""
        if not self._discardable:
            return False
        self._discard(pathlib.Path(self._config.run.logdir))
        return True

    def _discard(self, path: pathlib.Path) -> None:
        if self._made_dir:
            shutil.rmtree(path, ignore_errors=True)
        elif path.is_dir():  # it was empty when the run started
            for child in path.iterdir():
                if child.is_dir():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    child.unlink()

    def _wall_s(self, now: float | None = None) -> float:
        return round((time.monotonic() if now is None else now) - self._start, 3)


# Steps every env takes without an episode ending before the console says so: above the
# time limits of gymnasium's classic control and toy_text ids (200-500) and MinAtar's episodes.
_NO_EPISODE_STEPS = 1_000


# A report in which no frame was produced or consumed (the learner tracing its step at
# start-up, a long checkpoint) is shown only when this long has passed since the last line.
_STILL_LINE_EVERY_S = 30.0


class _Progress:
    """One progress line, refreshed in place on a terminal and printed per report otherwise;
    a report in which nothing moved is skipped unless `_STILL_LINE_EVERY_S` passed without a
    line (a row of "0 f/s" lines says nothing new)."""

    def __init__(self, out: TextIO, total_frames: int):
        self._out, self._total = out, total_frames
        self._tty = out.isatty()
        self._shown: tuple[float, float, float] | None = None  # wall_s, frames, produced
        self._eval = ""  # the last evaluation's mean return, once there is one

    def update(self, record: dict[str, Any]) -> None:
        moved = (
            self._shown is None or (record["frames"], record["frames_produced"]) != self._shown[1:]
        )
        if not moved and record["wall_s"] - self._shown[0] < _STILL_LINE_EVERY_S:
            return
        self._shown = (record["wall_s"], record["frames"], record["frames_produced"])
        # The learner consumes whole batches, so the last report may pass the total:
        # it is shown as done, not as 102% with an ETA of -0 s.
        done = min(1.0, record["frames"] / self._total)
        rate = record["learner_fps"]
        eta = max(0.0, self._total - record["frames"]) / rate if rate > 0 else float("inf")
        ret = record["episode_return_mean"]
        if record.get("eval_return_mean") is not None:
            self._eval = f"  eval {record['eval_return_mean']:7.1f}"
        line = (
            f"[{done:6.1%}] frames {record['frames']:>10,}/{self._total:,}  "
            f"env {record['env_fps']:>8,.0f} f/s  learner {rate:>8,.0f} f/s  "
            f"return {'   n/a' if ret is None else f'{ret:7.1f}'}  "
            f"lag {record['policy_lag_mean'] or 0:4.1f}  "
            f"ETA {'?' if eta == float('inf') else f'{eta:5.0f}s'}" + self._eval
        )
        self._out.write("\r" + line if self._tty else line + "\n")
        self._out.flush()

    def finish(self) -> None:
        if self._tty:
            self._out.write("\n")


def _record(
    report: LearnerReport,
    last: dict[str, float],
    *,
    now: float,
    wall_s: float,
    skip: int,
    actor_restarts: int,
) -> dict[str, Any]:
    """One metrics.jsonl record from a learner report (frames in env frames: x `skip`)."""
    dt = max(now - last["t"], 1e-9)
    metrics = report.metrics
    produced, consumed = skip * report.frames_produced, skip * report.frames_consumed
    record = {
        "frames": consumed,
        "wall_s": wall_s,
        "env_fps": (produced - last["produced"]) / dt,
        "learner_fps": (consumed - last["consumed"]) / dt,
        "episode_return_mean": report.episode_return_mean,
        "episodes": report.episodes,
        "policy_lag_mean": report.policy_lag_mean,
        "policy_lag_max": report.policy_lag_max,
        "queue_size": report.queue_size,
        "loss": metrics.get("loss"),
        "grad_norm": metrics.get("grad_norm"),
        "vtrace_rho_clipped_fraction": metrics.get("vtrace_rho_clipped_fraction"),
        "entropy": metrics.get("entropy"),
        "learning_rate": metrics.get("learning_rate"),
        "learner_steps": report.learner_steps,
        "learner_busy_fraction": (report.learner_busy_s - last["busy"]) / dt,
        "frames_produced": produced,
        "frames_queued": skip * report.frames_queued,
        "actor_restarts": actor_restarts,
    }
    assert list(record) == list(RECORD_FIELDS), "RECORD_FIELDS documents every record field"
    # Every other metric of the learner step too: the loss's components and whatever a
    # custom loss reports (e.g. an extra penalty term), under the loss's own names.
    record.update({k: v for k, v in metrics.items() if k not in record})
    return record


def _summary_table(result: TrainResult, config) -> str:
    returns = [
        r["episode_return_mean"] for r in result.records if r["episode_return_mean"] is not None
    ]
    learner = config.learner
    # A resumed run's time and speed are this command's, of the frames it trained.
    this = " (this command)" if result.frames_at_start else ""
    rows = [
        ("environment", config.env.id),
        ("actors x envs", f"{config.actors.num_actors} x {config.actors.envs_per_actor}"),
        (
            "learner devices",
            learner.devices if learner.hosts == 1 else f"{learner.hosts} hosts x {learner.devices}",
        ),
        ("env frames (learner-consumed)", f"{result.frames:,}"),
        ("learner steps", f"{result.learner_steps:,}"),
        ("episodes", f"{result.episodes:,}"),
        (f"wall time{this}", f"{result.wall_s:.1f} s"),
        (f"frames / s{this or ' (overall)'}", f"{result.frames_per_second:,.0f}"),
        (
            f"final mean return (last {RETURN_WINDOW})",
            "n/a" if result.episode_return_mean is None else f"{result.episode_return_mean:.1f}",
        ),
        ("best mean return", "n/a" if not returns else f"{max(returns):.1f}"),
    ]
    evaluations = [r for r in result.records if r.get("eval_return_mean") is not None]
    if evaluations:
        last = evaluations[-1]
        rows.append(
            (
                "last evaluation (greedy)",
                f"{last['eval_return_mean']:.1f} ± {last['eval_return_std']:.1f} over "
                f"{last['eval_episodes']} episodes at {last['eval_frames']:,} frames",
            )
        )
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"  {k:<{width}}  {v}" for k, v in rows)
