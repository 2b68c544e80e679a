"""The learner as a service: a bounded unroll queue feeding a training thread.

`LearnerService` runs without Ray: actors hand it unrolls through `enqueue`
(which blocks while the queue is full: back-pressure, nothing dropped), a
background thread runs `Learner.step` on batches of `batch_size` unrolls, each
taken and prepared by a second one while the step before runs
(`learner/staging.py`), and after a step the new weights are published through the
injected `publish` function (identity without Ray; under Ray `ray_learner.publish`:
carried in each reply when small, else one copy in the object store that every actor
fetches) if an actor has been handed the ones published before; otherwise those wait
for the first actor that asks, and the next step publishes. `learner/ray_learner.py`
wraps it as a Ray actor.

Checkpoints (optional, a `RunCheckpoint`) are written by the training thread
between steps, every `checkpoint_every_s`, and by `save` once training has
stopped, so a checkpoint never sees a half-applied update.

Several services, one per learner host of a `MultiWorkerMirroredStrategy` group
(`learner/learner_group.py`), run in lock-step: a `sync` object makes every
host agree, before each step, that all of them hold a batch and none is
stopping, and on which steps to checkpoint (checkpoints under that strategy
must be written by all hosts at the same step). A host whose actors are slow
makes the others wait in that agreement: back-pressure, as a full queue is.
Only the chief host publishes weights (`publish=None` on the others).

Accounting, in agent steps: `frames_produced == frames_consumed + frames_queued`
in every report. Consumed frames are those trained on: a staged batch, or one taken
and never trained on (non-finite, or not agreed on by a group), counts as queued. A
resumed service starts both produced and consumed at the checkpoint's consumed
count: unrolls that were queued when the previous run stopped were never trained on
and are produced again.
"""

from __future__ import annotations

import collections
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from impala_rep.learner.report import LearnerReport
from impala_rep.learner.unroll_queue import QueueClosed, UnrollQueue
from impala_rep.unroll import EpisodeStats, Unroll

__all__ = ["LearnerService", "RETURN_WINDOW"]

RETURN_WINDOW = 100  # episodes in the reported mean return, as is usual for CartPole/Atari


class LearnerService:
    """Owns a `Learner` and its queue; trains until `total_frames` have been consumed.

    Args:
      learner: a `Learner` (step, get_weights, num_steps).
      batch_size: unrolls (env columns) per learner step.
      total_frames: stop after consuming this many frames in the whole run
        (resumed runs included), counted as the queue counts them (agent steps:
        T * columns).
      queue_capacity: unroll blocks held before `enqueue` blocks.
      publish: turns the weight list into what actors receive (`ray_learner.publish` under Ray).
      checkpoint: a `RunCheckpoint`, or None for no checkpoints.
      checkpoint_every_s: seconds between checkpoints written while training.
      resume: restore the newest readable checkpoint before training starts.
      sync: for one host of a multi-host learner, an object whose
        `agree(ready=, checkpoint=) -> (go, save)` returns whether EVERY host is
        ready to step and whether ANY wants a checkpoint now (a collective, so it
        blocks until all hosts call it). None: a single host.
      transforms: the extensions' `BatchTransform`s (`impala_rep.extensions`; reward scaling
        divides each batch's rewards before the update), applied in order; their states go
        into checkpoints and come back on resume.
      passes: learner updates on each batch (sample reuse, `LearnerConfig.passes`); the
        weights are published at most once, after the last.
      target_kl: stops a batch's passes early at this `kl` (`Learner.step`); None: all.
      frames_per_step: agent steps one batch holds over every host (T x B).
        Given, a resumed learner's learning-rate schedule is re-anchored to the
        restored frames (`Learner.align_schedule`), so a resume with another batch
        size or unroll length continues the rate where it was.
      host, hosts: this service's index in a multi-host group of `hosts` (0: the
        chief). A checkpoint holds the group's totals: every host consumes the
        same frames per step, so the frames are `hosts` times this host's, and the
        episodes are summed over the hosts (through `sync`). A resumed host starts
        from an equal share of both (the chief takes what does not divide).
      clock: seconds on a monotonic clock (checkpoint timing, actor silence, busy time);
        injected so that tests step time instead of sleeping.
    """

    def __init__(
        self,
        *,
        learner,
        batch_size: int,
        total_frames: int,
        queue_capacity: int,
        publish: Callable[[list[np.ndarray]], Any] | None = lambda weights: weights,
        checkpoint=None,
        checkpoint_every_s: float = 600.0,
        resume: bool = False,
        sync=None,
        host: int = 0,
        hosts: int = 1,
        frames_per_step: int | None = None,
        passes: int = 1,
        target_kl: float | None = None,
        transforms: Sequence[Any] = (),
        clock: Callable[[], float] = time.monotonic,
    ):
        self._learner, self._clock = learner, clock
        self._target_kl = target_kl
        self._transforms = tuple(transforms)
        self._passes = passes
        self._batch_size = batch_size
        self._total_frames = total_frames
        self._publish = publish
        self._checkpoint = checkpoint
        self._checkpoint_every_s = checkpoint_every_s
        self._sync = sync
        self._hosts = hosts
        self._queue = UnrollQueue(queue_capacity)
        self._lock = threading.Lock()
        self._new_returns: list[float] = []
        self._recent_returns: collections.deque = collections.deque(maxlen=RETURN_WINDOW)
        self._base_frames = 0  # consumed before this service started (resume)
        self._frames_trained = 0  # by this service (taken, not staged nor skipped)
        self._episodes = 0
        self._metrics: dict[str, float] = {}
        self._policy_lag: tuple[float, float] | None = None  # (mean, max) of the last step
        self._busy_s = 0.0
        self._step_started: float | None = None  # set while a step runs
        self._error: str | None = None
        self._non_finite: str | None = None
        self._last_checkpoint: tuple[str, int] | None = None  # (path, learner step)
        self._last_heard: dict[int, float] = {}  # actor slot -> when it last sent (monotonic)
        self._waiting: collections.Counter = collections.Counter()  # slot -> sends in enqueue
        self.restored_from: str | None = None
        if resume:
            if checkpoint is None:
                raise ValueError("resume=True needs a checkpoint")
            path, counters = checkpoint.restore()
            self.restored_from = path
            self._last_checkpoint = (path, learner.num_steps)
            # Every host of a group consumes the same frames per step, so each resumes
            # from an equal share (and all reach `total_frames` at the same step).
            self._base_frames = counters.frames // hosts
            self._episodes = counters.episodes // hosts + (
                counters.episodes % hosts if host == 0 else 0
            )
            self._recent_returns.extend(counters.recent_returns)
            for transform in self._transforms:
                if transform.checkpoint_key in counters.extension_states:
                    transform.restore(counters.extension_states[transform.checkpoint_key])
            if frames_per_step is not None:
                learner.align_schedule(round(counters.frames / frames_per_step) * passes)
        # The transforms' states as of the last batch trained on, for checkpoints: the stager
        # merges the next batch's while a step runs.
        self._trained_states = {t.checkpoint_key: tuple(t.state) for t in self._transforms}
        self._done = threading.Event()
        # Actors get the published object inside a list so that Ray passes an object
        # store reference through instead of resolving it on every reply.
        self._published = self._publish_weights()
        # Set when an actor is handed `_published`: the training thread publishes after a
        # step only then. Actors ask about once per unroll block, which holds several
        # batches, so most publications (a weight read, and under Ray perhaps a
        # `ray.put`) would never be fetched. An actor that asks after skipped ones gets the
        # weights of the last step that ended after a reply: usually one batch older (the
        # policy lag shows it).
        self._handed_out = False
        self._last_save_time = self._clock()
        self._thread = threading.Thread(target=self._train_loop, name="learner", daemon=True)
        self._thread.start()

    # --- called by actors -----------------------------------------------------------
    def enqueue(
        self, unroll: Unroll, stats: EpisodeStats | None = None, *, sender: int | None = None
    ) -> tuple[bool, int, list]:
        """Queues one unroll (blocking while full); replies (stop, version, [weights]).

        `sender`: the actor's slot, so the driver can tell a hung actor from one that
        waits on a full queue (`LearnerReport.actor_silence_s`)."""
        self._heard(sender, +1)
        try:
            if not self._done.is_set():
                try:
                    self._queue.put(unroll, stats)
                except QueueClosed:
                    pass
        finally:
            self._heard(sender, -1)
        version, weights = self._published
        self._handed_out = True  # after the read: at worst one publication too many
        return self._done.is_set(), version, weights

    def latest_weights(self) -> tuple[int, list]:
        published = self._published
        self._handed_out = True
        return published

    def _heard(self, sender: int | None, waiting: int) -> None:
        if sender is not None:
            with self._lock:
                self._last_heard[sender] = self._clock()
                self._waiting[sender] += waiting

    def _actor_silence_s(self) -> dict[int, float]:
        now = self._clock()
        return {
            slot: 0.0 if self._waiting[slot] else now - heard
            for slot, heard in self._last_heard.items()
        }

    # --- called by the driver -------------------------------------------------------
    def report(self) -> LearnerReport:
        """Counters, latest step metrics and the episodes finished since the last report."""
        with self._lock:
            new_returns, self._new_returns = self._new_returns, []
            recent = list(self._recent_returns)
            episodes = self._episodes
            metrics = dict(self._metrics)
            policy_lag = self._policy_lag
            # Count a step in progress up to now, so each report gets the busy time
            # that fell inside it (a long step, e.g. the first one with tracing,
            # would otherwise land whole in one report and exceed 100%).
            busy_s = self._busy_s
            if self._step_started is not None:
                busy_s += self._clock() - self._step_started
            last_checkpoint = self._last_checkpoint
            actor_silence_s = self._actor_silence_s()
            trained = self._frames_trained
        counts = self._queue.counts()
        return LearnerReport(
            learner_steps=self._learner.num_steps,
            # Consumed: trained on. A staged batch counts as queued, so
            # produced == consumed + queued holds in every report.
            frames_produced=self._base_frames + counts.frames_put,
            frames_consumed=self._base_frames + trained,
            frames_queued=counts.frames_put - trained,
            queue_size=counts.size,
            learner_busy_s=busy_s,
            new_episode_returns=tuple(new_returns),
            episodes=episodes,
            episode_return_mean=float(np.mean(recent)) if recent else None,
            window_episodes=len(recent),
            metrics=metrics,
            policy_lag_mean=None if policy_lag is None else policy_lag[0],
            policy_lag_max=None if policy_lag is None else policy_lag[1],
            done=self._done.is_set(),
            error=self._error,
            non_finite=self._non_finite,
            last_checkpoint=last_checkpoint,
            actor_silence_s=actor_silence_s,
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
        if self._checkpoint is None:
            return None
        # Not at step 0 either: untrained weights are nothing to resume from, and a run that
        # failed before its first step then leaves no checkpoint (the driver cleans up).
        if self._error is None and self._non_finite is None and self._learner.num_steps > 0:
            self._save_checkpoint()
        return self._last_checkpoint

    def get_weights(self) -> tuple[int, list[np.ndarray]]:
        return self._learner.get_weights()

    # --- the training thread --------------------------------------------------------
    def _frames_consumed(self) -> int:
        """Frames trained on, in the whole run (a staged batch is not)."""
        return self._base_frames + self._frames_trained

    def _publish_weights(self, version: int | None = None) -> tuple[int, list]:
        """`version`: the step counter the last step reported (None: read it)."""
        if version is None:
            version = self._learner.num_steps
        if self._publish is None:  # not the chief host: its weights are the chief's
            return version, [None]
        return version, [self._publish(self._learner.agent.get_weights())]

    def _save_checkpoint(self) -> None:
        from impala_rep.learner.checkpointing import RunCounters

        with self._lock:
            episodes = self._episodes
        if self._sync is not None:  # every host saves at the same step: the group's total
            episodes = self._sync.total(episodes)
        with self._lock:
            counters = RunCounters(
                frames=self._hosts * self._frames_consumed(),
                episodes=episodes,
                recent_returns=tuple(self._recent_returns),
                extension_states=dict(self._trained_states),
            )
        path = self._checkpoint.save(counters)
        with self._lock:
            self._last_checkpoint = (path, self._learner.num_steps)
        self._last_save_time = self._clock()

    def _checkpoint_due(self) -> bool:
        return (
            self._checkpoint is not None
            and self._clock() - self._last_save_time >= self._checkpoint_every_s
        )

    def _train_loop(self) -> None:
        # Here, not at the top: the driver imports this module (RETURN_WINDOW), and these
        # import TensorFlow.
        from impala_rep.learner.learner import NonFiniteError
        from impala_rep.learner.staging import StagedBatches

        batches = None
        try:
            # The next batch is taken and prepared while this thread runs the step before it.
            batches = StagedBatches(
                queue=self._queue,
                batch_size=self._batch_size,
                frames=self._total_frames - self._base_frames,
                learner=self._learner,
                transforms=self._transforms,
                sync=self._sync,
            )
            # A host of a group leaves only through the agreement below, never on its own
            # stop flag: one that left here would leave its peers waiting in `agree`
            # forever (seen: a SIGTERM to a 2-host run stopped only one host).
            while self._frames_consumed() < self._total_frames and (
                self._sync is not None or not self._done.is_set()
            ):
                try:
                    taken = batches.get()
                except Exception:
                    if self._sync is not None:  # leave through the agreement: no peer waits in it
                        self._sync.agree(ready=False, checkpoint=False)
                    raise
                if self._sync is not None:
                    # Every host takes this decision together, so none of them is left
                    # waiting in a collective of a step the others will not run. A batch
                    # not trained on stays counted as queued.
                    go, save = self._sync.agree(
                        ready=taken is not None and not self._done.is_set(),
                        checkpoint=self._checkpoint_due(),
                    )
                    if not go:
                        break
                if taken is None:
                    break
                if taken.prepared is None:
                    taken = batches.transformed(taken)
                batch, stats = taken.batch, taken.stats
                with self._lock:
                    self._step_started = self._clock()
                try:
                    # Sample reuse: every host runs the same passes (a target KL stops all
                    # of them at the same pass: they share the reduced `kl`), so the group's
                    # collectives stay in step without another agreement. The policy lag
                    # is the actors' (at the first pass), not that of the earlier passes.
                    metrics = self._learner.step(
                        taken.prepared, passes=self._passes, target_kl=self._target_kl
                    )
                except NonFiniteError as err:
                    # The weights were left alone; keep the last good checkpoint.
                    self._non_finite = str(err)
                    break
                steps = int(metrics.pop("learner_steps"))
                if self._handed_out:
                    self._handed_out = False
                    self._published = self._publish_weights(steps)
                # The one per-host measure (how stale this host's batch was): reported
                # apart from the loss metrics, which every host shares.
                policy_lag = (metrics.pop("policy_lag_mean"), metrics.pop("policy_lag_max"))
                metrics.update(taken.metrics)
                returns = [float(r) for s in stats if s is not None for r in np.asarray(s.returns)]
                with self._lock:
                    self._busy_s += self._clock() - self._step_started
                    self._step_started = None
                    self._frames_trained += batch.num_frames
                    self._trained_states.update(taken.states)
                    self._metrics = metrics
                    self._policy_lag = policy_lag
                    self._new_returns.extend(returns)
                    self._recent_returns.extend(returns)
                    self._episodes += len(returns)
                if self._sync is None:
                    save = self._checkpoint_due()  # a single host decides after its step
                if save and self._checkpoint is not None:
                    self._save_checkpoint()
            # The final weights, for the actors' last replies (and `latest_weights` after
            # the run) whether or not the last step's publication was skipped.
            if self._published[0] != self._learner.num_steps:
                self._published = self._publish_weights()
        except Exception:  # surfaced to the driver through report()
            self._error = traceback.format_exc()
        finally:
            with self._lock:
                self._step_started = None
            self._done.set()
            self._queue.close()
            if batches is not None:
                batches.close()
