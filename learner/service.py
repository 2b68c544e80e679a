"""The learner as a service: a bounded unroll queue feeding a training thread.

`LearnerService` runs without Ray: actors hand it unrolls through `enqueue`
(which blocks while the queue is full: back-pressure, nothing dropped), a
background thread runs `Learner.step` on batches of `batch_size` unrolls, each
taken and prepared by a second one while the step before runs
(`learner/staging.py`). `learner/ray_learner.py` wraps it as a Ray actor.

The service composes small parts, each with its own module:
  - `Accounting` (`learner/accounting.py`): frames produced, consumed and queued,
    episodes, recent returns, busy time and policy lag; the report's counters.
    `frames_produced == frames_consumed + frames_queued` in every report.
  - `WeightPublisher` (`learner/publishing.py`): after a step the new weights are
    published only if an actor has been handed the ones published before; otherwise
    those wait for the first actor that asks, and the next step publishes.
  - `CheckpointSchedule` (`learner/checkpoint_schedule.py`): checkpoints (optional, a
    `RunCheckpoint`) are written by the training thread between steps, every
    `checkpoint_every_s`, and by `save` once training has stopped, so a checkpoint
    never sees a half-applied update.
  - `ActorLiveness` (`learner/liveness.py`): each actor's silence, so that a hung
    actor shows and one waiting on a full queue does not.
  - `HostGroup` (`learner/host_group.py`): this host's place in a multi-host group.

Several services, one per learner host of a `MultiWorkerMirroredStrategy` group
(`learner/learner_group.py`), run in lock-step: the group's `sync` makes every
host agree, before each step, that all of them hold a batch and none is
stopping, and on which steps to checkpoint (checkpoints under that strategy
must be written by all hosts at the same step). A host of a group therefore
leaves the training loop only through that agreement, never on its own stop flag:
one that left on its own would leave its peers waiting in the agreement forever.
A host whose actors are slow makes the others wait in that agreement:
back-pressure, as a full queue is. Only the chief host publishes weights
(`publish=None` on the others).
"""

from __future__ import annotations

import dataclasses
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from impala_rep.learner.accounting import Accounting
from impala_rep.learner.checkpoint_schedule import CheckpointSchedule
from impala_rep.learner.host_group import HostGroup
from impala_rep.learner.liveness import ActorLiveness
from impala_rep.learner.publishing import WeightPublisher
from impala_rep.learner.report import LearnerReport
from impala_rep.learner.unroll_queue import QueueClosed, UnrollQueue
from impala_rep.startup import stamp
from impala_rep.unroll import EpisodeStats, Unroll

__all__ = ["LearnerService", "TrainingPlan"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainingPlan:
    """What one learner host trains on, and how long.

    Args:
      batch_size: unrolls (env columns) per learner step on this host.
      total_frames: stop after this host has consumed this many frames in the whole run
        (resumed runs included), counted as the queue counts them (agent steps:
        T * columns).
      queue_capacity: unroll blocks held before `enqueue` blocks.
      passes: learner updates on each batch (sample reuse, `LearnerConfig.passes`); the
        weights are published at most once, after the last.
      target_kl: stops a batch's passes early at this `kl` (`Learner.step`); None: all.
      frames_per_step: agent steps one batch holds over every host (T x B).
        Given, a resumed learner's learning-rate schedule is re-anchored to the
        restored frames (`Learner.align_schedule`), so a resume with another batch
        size or unroll length continues the rate where it was.
    """

    batch_size: int
    total_frames: int
    queue_capacity: int
    passes: int = 1
    target_kl: float | None = None
    frames_per_step: int | None = None


class LearnerService:
    """Owns a `Learner` and its queue; trains until `plan.total_frames` have been consumed.

    Args:
      learner: a `Learner` (step, prepare, get_weights, num_steps, agent, align_schedule).
      plan: the batches, frames and passes this host trains on.
      publish: turns the weight list into what actors receive (`ray_learner.publish` under
        Ray); None on a group's non-chief hosts.
      checkpoint: a `RunCheckpoint`, or None for no checkpoints.
      checkpoint_every_s: seconds between checkpoints written while training.
      resume: restore the newest readable checkpoint before training starts.
      group: this host's place in a multi-host learner (`HostGroup`); None: a single host
        (a group of one).
      transforms: the extensions' `BatchTransform`s (`impala_rep.extensions`; reward scaling
        divides each batch's rewards before the update), applied in order; their states go
        into checkpoints and come back on resume.
      clock: seconds on a monotonic clock (checkpoint timing, actor silence, busy time);
        injected so that tests step time instead of sleeping.
    """

    def __init__(
        self,
        *,
        learner,
        plan: TrainingPlan,
        publish: Callable[[list[np.ndarray]], Any] | None = lambda weights: weights,
        checkpoint=None,
        checkpoint_every_s: float = 600.0,
        resume: bool = False,
        group: HostGroup | None = None,
        transforms: Sequence[Any] = (),
        clock: Callable[[], float] = time.monotonic,
    ):
        group = HostGroup() if group is None else group
        self._learner, self._plan, self._group = learner, plan, group
        self._transforms = tuple(transforms)
        self._queue = UnrollQueue(plan.queue_capacity)
        self._liveness = ActorLiveness(clock)
        self._error: str | None = None
        self._non_finite: str | None = None
        self.restored_from: str | None = None
        last_checkpoint = None
        if resume:
            if checkpoint is None:
                raise ValueError("resume=True needs a checkpoint")
            path, counters = checkpoint.restore()
            self.restored_from = path
            last_checkpoint = (path, learner.num_steps)
            # Every host of a group consumes the same frames per step, so each resumes
            # from an equal share (and all reach `total_frames` at the same step).
            frames, episodes = group.share(counters.frames, counters.episodes)
            self._accounting = Accounting(
                clock=clock,
                frames=frames,
                episodes=episodes,
                recent_returns=counters.recent_returns,
            )
            for transform in self._transforms:
                if transform.checkpoint_key in counters.extension_states:
                    transform.restore(counters.extension_states[transform.checkpoint_key])
            if plan.frames_per_step is not None:
                learner.align_schedule(round(counters.frames / plan.frames_per_step) * plan.passes)
        else:
            self._accounting = Accounting(clock=clock)
        # The transforms' states as of the last batch trained on, for checkpoints: the stager
        # merges the next batch's while a step runs.
        self._trained_states = {t.checkpoint_key: tuple(t.state) for t in self._transforms}
        self._done = threading.Event()
        self._publisher = WeightPublisher(
            read_weights=lambda: learner.agent.get_weights(),
            publish=publish,
            version=learner.num_steps,
        )
        self._checkpoints = CheckpointSchedule(
            checkpoint, every_s=checkpoint_every_s, clock=clock, last=last_checkpoint
        )
        # Start-up stages this service sees (`impala_rep.startup`): set once each, by
        # whichever thread gets there first.
        self._startup = {"learner built": stamp()}
        self._thread = threading.Thread(target=self._train_loop, name="learner", daemon=True)
        self._thread.start()

    # --- called by actors -----------------------------------------------------------
    def enqueue(
        self, unroll: Unroll, stats: EpisodeStats | None = None, *, sender: int | None = None
    ) -> tuple[bool, int, list]:
        """Queues one unroll (blocking while full); replies (stop, version, [weights]).

        `sender`: the actor's slot, so the driver can tell a hung actor from one that
        waits on a full queue (`LearnerReport.actor_silence_s`)."""
        with self._liveness.sending(sender):
            if not self._done.is_set():
                try:
                    self._queue.put(unroll, stats)
                except QueueClosed:
                    pass
                self._startup.setdefault("first unroll", stamp())
        version, weights = self._publisher.hand_out()
        return self._done.is_set(), version, weights

    def latest_weights(self) -> tuple[int, list]:
        return self._publisher.hand_out()

    # --- called by the driver -------------------------------------------------------
    def report(self) -> LearnerReport:
        """Counters, latest step metrics and the episodes finished since the last report."""
        return LearnerReport(
            learner_steps=self._learner.num_steps,
            **self._accounting.report_fields(self._queue.counts),
            done=self._done.is_set(),
            error=self._error,
            non_finite=self._non_finite,
            last_checkpoint=self._checkpoints.last,
            actor_silence_s=self._liveness.silence_s(),
            startup=dict(self._startup),
        )

    def stop(self, timeout_s: float = 300.0) -> bool:
        """Stops training after the step in progress; unblocks every waiting actor.

        Returns whether the training thread ended within `timeout_s` (a host of a
        multi-host learner can stay blocked in a collective if another host died).
        """
        self._done.set()
        self._queue.close()
        self._thread.join(timeout=timeout_s)
        return not self._thread.is_alive()

    def save(self) -> tuple[str, int] | None:
        """Writes a final checkpoint after `stop`; returns (path, learner step).

        Writes nothing (and returns the last good checkpoint) if training stopped
        on a non-finite loss or an error, when the state in memory is not trusted,
        or before the first step.
        """
        if self._thread.is_alive():
            raise RuntimeError("save() needs the training thread stopped: call stop() first")
        if not self._checkpoints.enabled:
            return None
        # Not at step 0 either: untrained weights are nothing to resume from, and a run that
        # failed before its first step then leaves no checkpoint (the driver cleans up).
        if self._error is None and self._non_finite is None and self._learner.num_steps > 0:
            self._save_checkpoint()
        return self._checkpoints.last

    def get_weights(self) -> tuple[int, list[np.ndarray]]:
        return self._learner.get_weights()

    # --- the training thread --------------------------------------------------------
    def _save_checkpoint(self) -> None:
        from impala_rep.learner.checkpointing import RunCounters

        frames, episodes, recent_returns = self._accounting.progress()
        # The group's totals: in a group every host saves at the same step (a collective).
        frames, episodes = self._group.totals(frames, episodes)
        counters = RunCounters(
            frames=frames,
            episodes=episodes,
            recent_returns=recent_returns,
            extension_states=dict(self._trained_states),
        )
        self._checkpoints.save(counters, step=self._learner.num_steps)

    def _train_loop(self) -> None:
        # Here, not at the top: these import TensorFlow, and importing this module must not
        # (tests/test_staging.py checks the modules a driver imports).
        from impala_rep.learner.learner import NonFiniteError
        from impala_rep.learner.staging import StagedBatches

        plan, group, accounting = self._plan, self._group, self._accounting
        batches = None
        try:
            # The next batch is taken and prepared while this thread runs the step before it.
            batches = StagedBatches(
                queue=self._queue,
                batch_size=plan.batch_size,
                # What is left to take: a resumed host has consumed some already.
                frames=plan.total_frames - accounting.frames_consumed,
                learner=self._learner,
                transforms=self._transforms,
                sync=group.sync,
            )
            # A host of a group leaves only through the agreement below, never on its own
            # stop flag: one that left here would leave its peers waiting in `agree`
            # forever (seen: a SIGTERM to a 2-host run stopped only one host).
            while accounting.frames_consumed < plan.total_frames and (
                group.lockstep or not self._done.is_set()
            ):
                try:
                    taken = batches.get()
                except Exception:
                    if group.lockstep:  # leave through the agreement: no peer waits in it
                        group.leave()
                    raise
                if group.lockstep:
                    # Every host takes this decision together, so none of them is left
                    # waiting in a collective of a step the others will not run. A batch
                    # not trained on stays counted as queued.
                    go, save = group.agree(
                        ready=taken is not None and not self._done.is_set(),
                        checkpoint=self._checkpoints.due(),
                    )
                    if not go:
                        break
                if taken is None:
                    break
                if taken.prepared is None:
                    taken = batches.transformed(taken)
                accounting.step_started()
                try:
                    # Sample reuse: every host runs the same passes (a target KL stops all
                    # of them at the same pass: they share the reduced `kl`), so the group's
                    # collectives stay in step without another agreement. The policy lag
                    # is the actors' (at the first pass), not that of the earlier passes.
                    metrics = self._learner.step(
                        taken.prepared, passes=plan.passes, target_kl=plan.target_kl
                    )
                except NonFiniteError as err:
                    # The weights were left alone; keep the last good checkpoint.
                    self._non_finite = str(err)
                    break
                self._publisher.stepped(int(metrics.pop("learner_steps")))
                # The one per-host measure (how stale this host's batch was): reported
                # apart from the loss metrics, which every host shares.
                policy_lag = (metrics.pop("policy_lag_mean"), metrics.pop("policy_lag_max"))
                metrics.update(taken.metrics)
                accounting.step_ended(
                    frames=taken.batch.num_frames,
                    stats=taken.stats,
                    metrics=metrics,
                    policy_lag=policy_lag,
                )
                self._trained_states.update(taken.states)
                self._startup.setdefault("first trained frame", stamp())
                if not group.lockstep:
                    save = self._checkpoints.due()  # a single host decides after its step
                if save and self._checkpoints.enabled:
                    self._save_checkpoint()
            # The final weights, for the actors' last replies (and `latest_weights` after
            # the run) whether or not the last step's publication was skipped.
            self._publisher.finish(self._learner.num_steps)
        except Exception:  # surfaced to the driver through report()
            self._error = traceback.format_exc()
        finally:
            accounting.training_ended()
            self._done.set()
            self._queue.close()
            if batches is not None:
                batches.close()
