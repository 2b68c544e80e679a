"""The learner as a Ray actor, so that in a cluster it lands where its devices are.

A thin wrapper: the process builds its own Replicator (the first TensorFlow work
in that process, so `cpu:N` logical devices can still be configured), the agent
and the `Learner`, and serves `LearnerService`'s methods to actors and the driver.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import ray

from impala_rep.config import TrainConfig
from impala_rep.learner.device_spec import parse_devices

__all__ = ["LearnerEndpoints", "RayLearner", "create_learner", "learner_gpus", "learner_hyperparams"]


def learner_hyperparams(config: TrainConfig, frame_skip: int = 1):
    """The `LearnerHyperparams` a run's config asks for."""
    from impala_rep.learner.learner import LearnerHyperparams

    return LearnerHyperparams(
        learning_rate=config.learning_rate,
        total_steps=config.total_learner_steps(frame_skip),
        discount=config.discount,
        baseline_cost=config.baseline_cost,
        entropy_cost=config.entropy_cost,
        clip_rho_threshold=config.clip_rho_threshold,
        clip_pg_rho_threshold=config.clip_pg_rho_threshold,
        rmsprop_decay=config.rmsprop_decay,
        rmsprop_epsilon=config.rmsprop_epsilon,
        max_grad_norm=config.max_grad_norm,
        reward_clipping=config.reward_clipping,
    )


class LearnerEndpoints:
    """What a learner Ray actor serves to actors and the driver: its `LearnerService`'s
    methods (`self._service`) and where it runs. Shared by the single learner below and
    the hosts of a multi-host learner (learner/learner_group.py)."""

    _service: Any

    def pid(self) -> int:
        return os.getpid()

    def node_id(self) -> str:
        """The Ray node this process runs on (where Ray placed it)."""
        return ray.get_runtime_context().get_node_id()

    def enqueue(self, unroll, stats=None):
        return self._service.enqueue(unroll, stats)

    def latest_weights(self):
        return self._service.latest_weights()

    def report(self):
        return self._service.report()

    def stop(self, timeout_s: float = 300.0):
        return self._service.stop(timeout_s)

    def save(self):
        return self._service.save()

    def get_weights(self):
        return self._service.get_weights()


class _LearnerProcess(LearnerEndpoints):
    def __init__(self, config: TrainConfig, observation_shape: tuple[int, ...],
                 agent_factory: Callable[[], Any], frame_skip: int = 1,
                 loss_fn: Callable[..., Any] | None = None, resume: bool = False):
        from impala_rep import Replicator

        replicator = Replicator(config.learner_devices)
        from impala_rep.learner.learner import Learner
        from impala_rep.learner.service import LearnerService

        learner = Learner(agent=agent_factory(), replicator=replicator,
                          hyperparams=learner_hyperparams(config, frame_skip),
                          observation_shape=observation_shape, loss_fn=loss_fn)
        checkpoint = None
        if config.logdir is not None:
            # The learner writes its own checkpoints: its variables live here. In a
            # cluster, LOGDIR must be on storage this node can write (shared or local).
            from impala_rep.learner.checkpointing import CHECKPOINT_SUBDIR, RunCheckpoint

            checkpoint = RunCheckpoint(learner=learner,
                                       directory=os.path.join(config.logdir, CHECKPOINT_SUBDIR))
        self._service = LearnerService(learner=learner, batch_size=config.batch_size,
                                       total_frames=config.total_agent_steps(frame_skip),
                                       queue_capacity=config.queue_capacity, publish=ray.put,
                                       checkpoint=checkpoint,
                                       checkpoint_every_s=config.checkpoint_every_s, resume=resume)

    def restored_from(self) -> str | None:
        return self._service.restored_from


RayLearner = ray.remote(_LearnerProcess)


def learner_gpus(devices: str) -> int:
    """GPUs to ask Ray for (one per replica of a learner host), so the learner is
    placed on a node that has them."""
    spec = parse_devices(devices)
    if spec.kind != "gpu":
        return 0  # "auto" takes whatever the node it lands on has
    return spec.count or 1


def create_learner(config: TrainConfig, observation_shape, agent_factory, frame_skip: int = 1,
                   loss_fn: Callable[..., Any] | None = None, resume: bool = False):
    """Starts the learner actor. Its methods run concurrently: every actor may be
    blocked in `enqueue` (back-pressure) while the driver still gets reports.

    `loss_fn` (picklable; None: the IMPALA loss) is the `Learner`'s loss hook.
    `resume` restores the newest readable checkpoint in `config.logdir` first."""
    return RayLearner.options(
        num_cpus=1,
        num_gpus=learner_gpus(config.learner_devices),
        max_concurrency=config.num_actors + 4,
    ).remote(config, tuple(observation_shape), agent_factory, frame_skip, loss_fn, resume)
