"""The `tf.distribute` strategy a Replicator device spec asks for: logical CPU devices, GPUs
or a TPU system. Kept apart from `replicator`, whose subject is running a step on them."""

from __future__ import annotations

import os

import tensorflow as tf

from impala_rep.devices import DeviceSpec, parse_devices, tpu_resolver_args

__all__ = ["make_strategy"]


def _logical_cpus(count: int) -> list[str]:
    """Splits the host CPU into `count` logical devices (only before TF initialises)."""
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(count)]
        )
    except RuntimeError:
        # TF has already initialised its devices; the split can no longer change.
        pass
    devices = [d.name for d in tf.config.list_logical_devices("CPU")]
    if len(devices) != count:
        raise ValueError(
            f"device spec 'cpu:{count}' asks for {count} logical CPU devices but TensorFlow "
            f"has already initialised with {len(devices)}; ask for cpu:{len(devices)} or "
            "create the Replicator before any other TensorFlow work in the process"
        )
    return devices


def _gpus(spec: str, count: int | None) -> list[str]:
    devices = [d.name for d in tf.config.list_logical_devices("GPU")]
    if not devices:
        raise ValueError(
            f"device spec {spec!r}: no GPU is visible to TensorFlow; use 'cpu' or 'cpu:N'"
        )
    if count is not None:
        if count > len(devices):
            raise ValueError(
                f"device spec {spec!r}: only {len(devices)} GPU(s) visible; "
                f"allowed N is 1..{len(devices)}"
            )
        devices = devices[:count]
    return devices


def _tpu_strategy(spec: str, resolver_args: dict[str, str]) -> tf.distribute.Strategy:
    # Untested on hardware (no TPU here); tests cover `tpu_resolver_args`, which
    # decides what the resolver is asked for.
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(**resolver_args)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (ValueError, RuntimeError, tf.errors.OpError) as err:
        raise ValueError(
            f"device spec {spec!r}: no TPU could be reached at {resolver_args['tpu']!r} ({err})"
        ) from err
    return tf.distribute.TPUStrategy(resolver)


def make_strategy(spec: str) -> tf.distribute.Strategy:
    """Builds the in-graph `tf.distribute` strategy a device spec asks for.

    "tpu" / "tpu:NAME" builds a `TPUStrategy` from a `TPUClusterResolver` for the
    TPU that `tpu_resolver_args` picks (NAME, else $TPU_NAME, else "local").
    """
    parsed = parse_devices(spec)
    if parsed.kind == "tpu":
        return _tpu_strategy(spec, tpu_resolver_args(parsed, os.environ))
    if parsed.kind == "auto":
        gpus = tf.config.list_logical_devices("GPU")
        parsed = DeviceSpec("gpu", None) if gpus else DeviceSpec("cpu", 1)
    if parsed.kind == "gpu":
        return tf.distribute.MirroredStrategy(devices=_gpus(spec, parsed.count))
    devices = _logical_cpus(parsed.count)
    # ReductionToOneDevice rather than the default: with several strategies alive in
    # one process (tests, evaluation next to training) the default collectives of
    # one could hang or break the other's; reducing through one device avoided it
    # and costs nothing that matters on CPU.
    return tf.distribute.MirroredStrategy(
        devices=devices, cross_device_ops=tf.distribute.ReductionToOneDevice()
    )
