"""The one place a learner service is built: host `host` of a group of `len(addresses)` (Ray-free).

A single learner is a group of one (`addresses=()`): the Replicator runs
`config.learner.devices` in this process. A group of K hosts runs one
`MultiWorkerMirroredStrategy` over `addresses` (`learner/cluster_spec.py`):
host 0, the chief, publishes weights and keeps the checkpoints in
`LOGDIR/checkpoints`; the others take part in each save into a scratch
directory and, on resume, restore from the chief's directory (so LOGDIR must be
readable from every learner node then, as it must be writable from the chief's).

Frame arithmetic is the same for every K: each host trains on
`batch_size // K` columns per step and stops after `ceil(total / K)` agent
steps; a resumed host starts from an equal share of the checkpoint's frames, so
every host reaches its end at the same step (they must: the steps are
collectives) and a run can resume onto another number of hosts.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from impala_rep.config import TrainConfig
from impala_rep.observation_nest import Shape, shape_of

__all__ = ["build_learner_service"]


def build_learner_service(
    *,
    config: TrainConfig,
    observation_shape: Shape,
    agent_factory: Callable[[], Any],
    frame_skip: int = 1,
    loss_fn: Callable[..., Any] | None = None,
    resume: bool = False,
    host: int = 0,
    addresses: Sequence[str] = (),
    publish: Callable[[list], Any] = lambda weights: weights,
):
    """Builds the Replicator, `Learner`, checkpoint and `LearnerService` of one learner host.

    The first TensorFlow work in the process happens here, so `cpu:N` logical
    devices and TF_CONFIG can still be set.

    Args:
      config: the run's configuration (learner, loss, optimizer, run groups are read).
      observation_shape: one observation's shape.
      agent_factory: builds the agent (called once, in this process).
      frame_skip: env frames per agent step (total frames are in env frames).
      loss_fn: the `Learner`'s loss hook; None: the IMPALA loss.
      resume: restore the newest readable checkpoint in `config.run.logdir` first.
      host: this host's index in `addresses`.
      addresses: "IP:PORT" of every host of a multi-host learner, in host order;
        empty for a single learner.
      publish: turns the chief's weights into what actors receive (`ray_learner.publish` under
        Ray).
    """
    hosts = max(1, len(addresses))
    if hosts > 1:
        from impala_rep.learner.cluster_spec import set_tf_config

        # Before any TensorFlow op: the strategy reads TF_CONFIG when it is created.
        set_tf_config(os.environ, list(addresses), host)
    if config.learner.xla:  # before TensorFlow reads its XLA flags (a no-op if done already)
        from impala_rep.learner.xla_cache import enable

        enable(config.learner.xla_cache)
    import tensorflow as tf

    from impala_rep.extensions import batch_transforms, extensions_for
    from impala_rep.learner.checkpointing import CHECKPOINT_SUBDIR, RunCheckpoint
    from impala_rep.learner.host_group import HostGroup
    from impala_rep.learner.host_sync import HostSync, ScratchCheckpoint
    from impala_rep.learner.learner import Learner
    from impala_rep.learner.replicator import Replicator
    from impala_rep.learner.service import LearnerService, TrainingPlan

    replicator = (
        Replicator(strategy=tf.distribute.MultiWorkerMirroredStrategy())
        if hosts > 1
        else Replicator(config.learner.devices, jit_compile=bool(config.learner.xla))
    )
    learner = Learner(
        agent=agent_factory(),
        replicator=replicator,
        observation_shape=shape_of(observation_shape),
        total_steps=config.total_learner_steps(frame_skip),
        loss=config.loss,
        optimizer=config.optimizer,
        loss_fn=loss_fn,
        loss_grad_norms=config.learner.loss_grad_norms,
        autograph=config.learner.autograph is not False,
    )
    chief = host == 0
    transforms = batch_transforms(extensions_for(config.loss))
    states = {t.checkpoint_key: t.state_size for t in transforms}
    checkpoint = None
    if config.run.logdir is not None:
        directory = os.path.join(config.run.logdir, CHECKPOINT_SUBDIR)
        checkpoint = (
            RunCheckpoint(learner=learner, directory=directory, extension_states=states)
            if chief
            else ScratchCheckpoint(
                learner=learner,
                restore_from=directory,
                extension_states=states,
            )
        )
    plan = TrainingPlan(
        batch_size=config.learner.batch_size // hosts,
        total_frames=-(-config.total_agent_steps(frame_skip) // hosts),
        queue_capacity=config.learner.queue_capacity,
        passes=config.learner.passes,
        target_kl=config.learner.target_kl,
        frames_per_step=config.steps_per_update,
    )
    return LearnerService(
        learner=learner,
        plan=plan,
        publish=publish if chief else None,
        checkpoint=checkpoint,
        checkpoint_every_s=config.learner.checkpoint_every_s,
        resume=resume,
        group=HostGroup(host, hosts, HostSync(replicator) if hosts > 1 else None),
        transforms=transforms,
    )
