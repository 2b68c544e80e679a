"""An `Actor` as a Ray actor process: a thin wrapper around `run_actor_loop`.

It pushes its unrolls to a learner that is a Ray actor (`run`). With a multi-host
learner an actor feeds one learner host (`learner`) but takes its weights from the
chief host (`weights_from`), the only one that publishes them: after each reply from
its host it asks the chief for the newest version. A learner in the driver's process
cannot be called from here: it pulls the unrolls instead (`produce`,
`impala_rep/run/driver_learner.py`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import ray

from impala_rep.config import ActorConfig, EnvConfig, TrainConfig
from impala_rep.extensions import actor_return_discount, extensions_for

__all__ = ["RayActor", "create_actor", "fetched_weights", "one_tensorflow_thread"]


class _ActorProcess:
    def __init__(
        self,
        *,
        env: EnvConfig,
        actors: ActorConfig,
        seed: int,
        agent_factory: Callable[[], Any],
        learner=None,
        weights_from=None,
        slot: int | None = None,
        return_discount: float | None = None,
        env_registration: Any = None,
    ):
        from impala_rep.actors.build import build_actor

        one_tensorflow_thread(agent_factory)
        self._actor = build_actor(
            env=env,
            actors=actors,
            agent_factory=agent_factory,
            seed=seed,
            return_discount=return_discount,
            env_registration=env_registration,
        )
        self._learner = learner
        self._slot = slot  # sent with each unroll: the learner tells the driver who is silent
        self._weights_from = learner if weights_from is None else weights_from
        if learner is not None:  # else the first `produce` brings the weights
            version, published = ray.get(self._weights_from.latest_weights.remote())
            self._actor.set_weights(fetched_weights(published[0]), version)

    def pid(self) -> int:
        return os.getpid()

    def node_id(self) -> str:
        """The Ray node this process runs on (where Ray placed it)."""
        return ray.get_runtime_context().get_node_id()

    def run(self, max_unrolls: int | None = None) -> int:
        from impala_rep.actors.actor_loop import run_actor_loop

        receive = ray.get
        if self._weights_from is not self._learner:

            def receive(pending):
                stop, _, _ = ray.get(pending)  # this host's version may run ahead of the chief's
                version, published = ray.get(self._weights_from.latest_weights.remote())
                return stop, version, published

        return run_actor_loop(
            actor=self._actor,
            send=lambda unroll, stats: self._learner.enqueue.remote(
                unroll, stats, sender=self._slot
            ),
            receive=receive,
            fetch_weights=fetched_weights,
            max_unrolls=max_unrolls,
        )

    @ray.method(enable_task_events=False)  # tens of calls a second, as the learner's enqueue
    def produce(self, weights: tuple[int, list] | None = None):
        """For a learner that pulls (`learner=None`): loads `weights` (version, [published];
        None: nothing newer than the last ones), then returns the next (unroll, stats). The
        first call must bring weights."""
        if weights is not None:
            version, published = weights
            self._actor.set_weights(fetched_weights(published[0]), version)
        return self._actor.unroll()


def one_tensorflow_thread(agent_factory: Callable[[], Any]) -> None:
    """In a process that acts with an agent through TensorFlow (one without a numpy twin,
    `impala_rep.agent_factory.acting_agent`): one thread each for TensorFlow's ops. Many such
    processes share few cores, and oversubscription slows every one of them down. A twin acts
    in numpy: TensorFlow is not imported."""
    from impala_rep.agent_factory import acting_agent

    if acting_agent(agent_factory) is None:
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)


def fetched_weights(published: Any) -> list:
    """The weight list from what the learner published: carried in the reply when small, in
    the object store when large (`learner/ray_learner.py`'s `publish`)."""
    return ray.get(published) if isinstance(published, ray.ObjectRef) else published


RayActor = ray.remote(_ActorProcess)


def create_actor(
    *,
    config: TrainConfig,
    agent_factory,
    seed: int,
    learner=None,
    weights_from=None,
    slot: int | None = None,
    env_registration: Any = None,
):
    """Starts one actor process for `config` that feeds `learner` (and takes its weights
    from `weights_from`, default `learner`) as actor `slot`, or (`learner=None`) one a
    learner in the driver pulls from. Ray spreads actors over the cluster's nodes."""
    return RayActor.options(num_cpus=1, scheduling_strategy="SPREAD").remote(
        env=config.env,
        actors=config.actors,
        seed=seed,
        agent_factory=agent_factory,
        learner=learner,
        weights_from=weights_from,
        slot=slot,
        return_discount=actor_return_discount(extensions_for(config.loss)),
        env_registration=env_registration,
    )
