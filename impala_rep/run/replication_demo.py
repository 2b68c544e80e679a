"""A small supervised task trained with the Replicator, checked against one device.

This is the TF-Replicator programming model end to end (`input_fn` builds the
host batch, `step_fn` is one replica's computation, `wrap_optimizer` keeps the
replicas identical) and the proof that an install works: the replicated run
must produce the same weights as the same steps on a single device.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from typing import TextIO

import numpy as np


@dataclasses.dataclass(frozen=True)
class DemoResult:
    num_replicas: int
    losses: list[float]
    single_device_losses: list[float]
    max_weight_difference: float


def input_fn(step: int, batch_size: int, rng_seed: int = 0) -> dict[str, np.ndarray]:
    """The host batch for `step`: noisy samples of a fixed linear map."""
    rng = np.random.default_rng(rng_seed + step)
    true_w = np.linspace(-1.0, 1.0, 8 * 2, dtype=np.float32).reshape(8, 2)
    x = rng.normal(size=(batch_size, 8)).astype(np.float32)
    y = x @ true_w + 0.01 * rng.normal(size=(batch_size, 2)).astype(np.float32)
    return {"x": x, "y": y}


def run_demo(
    *, devices: str = "cpu:2", steps: int = 30, batch_size: int = 64, out: TextIO = sys.stdout
) -> DemoResult:
    """Trains on `devices` and on one device from the same start; reports both."""
    from impala_rep import Replicator  # imports TensorFlow; keep module import light

    replicator = Replicator(devices)
    import tensorflow as tf

    def make_model():
        return tf.keras.Sequential(
            [
                tf.keras.Input((8,)),
                tf.keras.layers.Dense(16, activation="tanh"),
                tf.keras.layers.Dense(2),
            ]
        )

    def make_optimizer():
        return tf.keras.optimizers.RMSprop(learning_rate=0.01, rho=0.99, momentum=0.0, epsilon=0.01)

    tf.keras.utils.set_random_seed(0)
    with replicator.scope():
        model = make_model()
        optimizer = replicator.wrap_optimizer(make_optimizer())
        optimizer.build(model.trainable_variables)
    single = make_model()
    for target, source in zip(single.trainable_variables, model.trainable_variables):
        target.assign(source)
    single_optimizer = make_optimizer()

    def step_fn(batch):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(batch["x"]) - batch["y"]))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    @tf.function
    def single_step(batch):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(single(batch["x"]) - batch["y"]))
        grads = tape.gradient(loss, single.trainable_variables)
        single_optimizer.apply_gradients(zip(grads, single.trainable_variables))
        return loss

    print(
        f"{replicator}: {steps} steps of a global batch of {batch_size}, "
        f"{batch_size // replicator.num_replicas} per replica",
        file=out,
    )
    losses, single_losses = [], []
    start = time.monotonic()
    for step in range(steps):
        batch = input_fn(step, batch_size)
        losses.append(float(replicator.reduce("mean", replicator.run(step_fn, batch))))
        single_losses.append(float(single_step(batch)))
        if step % 10 == 0 or step == steps - 1:
            print(
                f"  step {step + 1:4d}/{steps}  loss {losses[-1]:.5f}  "
                f"single-device loss {single_losses[-1]:.5f}  {time.monotonic() - start:5.1f}s",
                file=out,
                flush=True,
            )
    difference = max(
        float(np.max(np.abs(np.asarray(a) - b.numpy())))
        for a, b in zip(model.trainable_variables, single.trainable_variables)
    )
    result = DemoResult(replicator.num_replicas, losses, single_losses, difference)
    print("", file=out)
    print(f"  {'':24s}{'first loss':>12s}{'last loss':>12s}", file=out)
    print(f"  {f'{result.num_replicas} replicas':24s}{losses[0]:12.5f}{losses[-1]:12.5f}", file=out)
    print(
        f"  {'1 device, no strategy':24s}{single_losses[0]:12.5f}{single_losses[-1]:12.5f}",
        file=out,
    )
    print(f"  max |weight difference| after {steps} steps: {difference:.2e}", file=out)
    return result
