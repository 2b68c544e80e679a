"""The learner host as a Ray actor, so that in a cluster it lands where its devices are.

A thin wrapper around `build_learner_service` (learner/build.py): the actor is
cheap to construct, reports the address Ray placed it at, and builds its
service in `start` (the first TensorFlow work in the process, once TF_CONFIG
can be written for a multi-host group); then it serves the service's methods
to actors and the driver. A single learner is a group of one of these
(learner/learner_group.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import ray

from impala_rep.config import LearnerConfig, TrainConfig
from impala_rep.devices import parse_devices
from impala_rep.observation_nest import Shape
from impala_rep.startup import process_started, stamp

__all__ = ["LearnerHost", "RayLearnerHost", "learner_gpus", "publish"]

# Ray returns a reply of up to 100 KiB inline (its `max_direct_call_object_size`); larger ones
# go through the object store. Weights up to 64 KiB leave the reply's other bytes room.
INLINE_BYTES = 64 * 1024


def publish(weights: list) -> Any:
    """What actors receive: small weights as they are, inside each reply; large ones once in
    the object store, where every actor fetches the same copy (`actors/ray_actor.py` takes
    either).

    For a small network such as the CartPole MLP (19 KB) a `ray.put` at every publication,
    plus a fetch from the store in each actor, costs far more CPU than carrying the weights
    in a reply (docs/notebook.md, "Where the CPU goes"). A network over the limit would be
    copied into the store with every reply."""
    if sum(getattr(w, "nbytes", 0) for w in weights) <= INLINE_BYTES:
        return weights
    return ray.put(weights)


class LearnerHost:
    """One learner host: its `LearnerService`'s methods and where it runs."""

    def __init__(
        self,
        learner_config: LearnerConfig | None = None,
        *,
        importing: Callable[[], AbstractContextManager] = contextlib.nullcontext,
    ):
        """`learner_config`: given, this host starts importing TensorFlow at once, before the
        driver's `start` reaches it, so that the import overlaps the placement round trips
        (or, in the driver, Ray's start). `importing()` is entered around the import."""
        self._importing = importing
        self._service = None
        # Actors are started while this host builds (run/launch_ray.py): their calls
        # (`latest_weights`, `enqueue`) wait here until `start` has finished, and fail if it
        # failed.
        self._built = threading.Event()
        self._start_error: str | None = None
        started = process_started()
        # This process's start-up stages (`impala_rep.startup`); the service adds its own.
        self._startup = {} if started is None else {"learner process": started}
        self._preloading = learner_config is not None
        self._preload = threading.Thread(
            target=self._import_tensorflow, args=(learner_config,), name="import-tensorflow"
        )
        if self._preloading:
            self._preload.start()

    def _import_tensorflow(self, learner_config: LearnerConfig) -> None:
        """Imports TensorFlow, first pointing XLA at its compilation cache, and sets the
        thread pools of an XLA step (both before TensorFlow reads them). Nothing that builds
        anything: a group's TF_CONFIG and logical devices are set later, in `start`."""
        from impala_rep.learner import xla_cache

        xla = learner_config.xla
        if xla:
            xla_cache.enable(learner_config.xla_cache)
        try:
            with self._importing():
                import tensorflow as tf
        except Exception:  # noqa: BLE001 - `start` imports it again and reports what failed
            return

        self._startup["tensorflow imported"] = stamp()
        if xla:
            # XLA runs the step of a net this small (it is auto only for the built-in MLP) on
            # one thread anyway; TensorFlow's default pools only spun beside it: one thread
            # takes less learner CPU and gives more frames/s on CartPole. Not without XLA:
            # Pong's CNN step is slower on one thread (docs/notebook.md, "Where the CPU goes").
            try:
                tf.config.threading.set_intra_op_parallelism_threads(1)
                tf.config.threading.set_inter_op_parallelism_threads(1)
            except RuntimeError:  # a process that ran TensorFlow before (a learner in the
                pass  # driver of a program that had): its pools are set for good

    def wait_imported(self) -> None:
        """Returns once the import started by the constructor has ended (at once if none)."""
        if self._preloading:
            self._preload.join()

    def pid(self) -> int:
        return os.getpid()

    def node_id(self) -> str:
        """The Ray node this process runs on (where Ray placed it)."""
        return ray.get_runtime_context().get_node_id()

    def host_address(self) -> str:
        """ "IP:PORT" this host would serve a group's collectives on."""
        from impala_rep.learner.cluster_spec import free_port

        ip = ray.util.get_node_ip_address()
        return f"{ip}:{free_port(ip)}"

    def start(
        self,
        *,
        config: TrainConfig,
        observation_shape: Shape,
        agent_factory: Callable[[], Any],
        frame_skip: int = 1,
        loss_fn: Callable[..., Any] | None = None,
        resume: bool = False,
        host: int = 0,
        addresses: Sequence[str] = (),
    ) -> str | None:
        """Builds this host's service (restored, on resume); returns the checkpoint it
        restored from. With several `addresses` it returns once every host has joined."""
        if self._preloading:
            self.wait_imported()
        else:
            self._import_tensorflow(config.learner)
        from impala_rep.learner.build import build_learner_service

        try:
            self._service = build_learner_service(
                config=config,
                observation_shape=observation_shape,
                agent_factory=agent_factory,
                frame_skip=frame_skip,
                loss_fn=loss_fn,
                resume=resume,
                host=host,
                addresses=addresses,
                publish=publish,
            )
        except BaseException as error:
            self._start_error = f"{type(error).__name__}: {error}"
            raise
        finally:
            self._built.set()
        return self._service.restored_from

    def _built_service(self):
        """The service, once `start` has built it (waiting for that); RuntimeError if it failed.
        In a group an actor waits for the chief's weights, not for the build of the host it
        feeds, so `enqueue` waits here too."""
        if self._service is None:  # set before `_built`: once there, no wait
            self._built.wait()
            if self._service is None:
                raise RuntimeError(f"the learner could not start ({self._start_error})")
        return self._service

    # Called tens of times a second: without this Ray records every call's events in its GCS,
    # which then grows for as long as the run lasts (docs/notebook.md, "Soak").
    @ray.method(enable_task_events=False)
    def enqueue(self, unroll, stats=None, *, sender=None):
        return self._built_service().enqueue(unroll, stats, sender=sender)

    def latest_weights(self):
        return self._built_service().latest_weights()

    def report(self):
        report = self._service.report()
        return dataclasses.replace(report, startup={**self._startup, **report.startup})

    def stop(self, timeout_s: float = 300.0):
        return self._service.stop(timeout_s)

    def save(self):
        return self._service.save()

    def get_weights(self):
        return self._service.get_weights()


RayLearnerHost = ray.remote(LearnerHost)


def learner_gpus(devices: str) -> int:
    """GPUs to ask Ray for (one per replica of a learner host), so the learner is
    placed on a node that has them."""
    spec = parse_devices(devices)
    if spec.kind != "gpu":
        return 0  # "auto" takes whatever the node it lands on has
    return spec.count or 1
