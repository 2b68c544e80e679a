"""The Replicator on its own: a small supervised task, trained on 1 and on 2 replicas.

    .venv/bin/python examples/replicator_supervised.py            # 300 steps, a few seconds
    .venv/bin/python examples/replicator_supervised.py --steps 20 --batch-size 32

TF-Replicator's programming model (Buchlovsky et al. 2019) in three pieces:

- `input_fn(step)` builds the HOST batch (numpy); `Replicator.run` splits it evenly
  over the replicas along the batch axis;
- `step_fn(batch)` is ONE replica's computation on its share; inside it the
  cross-replica primitives (`all_reduce`, `all_gather`, `broadcast`, `replica_id`,
  `num_replicas`) talk to the other replicas;
- `replicator.wrap_optimizer(optimizer)` mean-reduces the gradients over replicas and
  applies the same update everywhere, so the replicas stay identical.

The model has a `CrossReplicaBatchNorm`: its batch statistics are those of the global
batch, so the replicated run computes exactly what one device computes on the whole
batch. The script trains the same model from the same start on 2 replicas and on 1,
prints both loss curves, and exits 1 if the weights differ by more than 1e-4.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

TOLERANCE = 1e-4  # float32 sums in a different order across replicas differ by rounding only


# --8<-- [start:input_fn]
def input_fn(step: int, *, batch_size: int) -> dict[str, np.ndarray]:
    """The host batch for `step`: x `[batch_size, 8]`, y = a fixed non-linear map
    `[batch_size, 1]`."""
    rng = np.random.default_rng(step)
    x = rng.normal(size=(batch_size, 8)).astype(np.float32)
    y = np.sin(x[:, :4].sum(axis=1, keepdims=True)) + 0.5 * x[:, 4:5] * x[:, 5:6]
    return {"x": x, "y": y.astype(np.float32)}


# --8<-- [end:input_fn]


# --8<-- [start:make_model]
def make_model(tf, norm_layer):
    return tf.keras.Sequential(
        [
            tf.keras.Input((8,)),
            tf.keras.layers.Dense(32, use_bias=False),
            norm_layer(),
            tf.keras.layers.Activation("relu"),
            tf.keras.layers.Dense(1),
        ]
    )


# --8<-- [end:make_model]


# --8<-- [start:train_on]
def train_on(replicator, *, steps: int, batch_size: int, initial_weights=None):
    """Trains a fresh model with `replicator`; returns (losses, final weights, initial weights)."""
    import tensorflow as tf

    from impala_rep import CrossReplicaBatchNorm, all_reduce

    with replicator.scope():  # every variable, the optimizer's included, is created here
        model = make_model(tf, CrossReplicaBatchNorm)
        if initial_weights is not None:
            model.set_weights(initial_weights)
        optimizer = replicator.wrap_optimizer(tf.keras.optimizers.Adam(0.01))
        optimizer.build(model.trainable_variables)
    initial = model.get_weights()

    def step_fn(batch):
        """One replica: batch["x"] `[batch_size / replicas, 8]`."""
        with tf.GradientTape() as tape:
            prediction = model(batch["x"], training=True)  # global-batch normalisation
            loss = tf.reduce_mean(tf.square(prediction - batch["y"]))  # mean over this shard
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))  # mean over replicas
        # Shards are equal-sized, so the mean of the shard means is the global-batch mean.
        return all_reduce(loss, op="mean")

    losses = []
    for step in range(steps):
        per_replica = replicator.run(step_fn, input_fn(step, batch_size=batch_size))
        losses.append(float(per_replica[0]))  # identical on every replica
    return losses, model.get_weights(), initial


# --8<-- [end:train_on]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=64, help="global batch, a multiple of 2")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.batch_size < 2 or args.batch_size % 2:
        parser.error(
            f"need --steps >= 1 and an even --batch-size >= 2, got {args.steps}, {args.batch_size}"
        )
    from impala_rep import quiet_native_logs

    quiet_native_logs(verbose=False)  # TensorFlow's start-up notes, discarded: before its import
    from impala_rep import Replicator

    # The device count is fixed when TensorFlow initialises: ask for the 2 logical CPU
    # devices first. The 1-replica run uses the first of them through an explicit
    # strategy (Replicator(strategy=...) takes any tf.distribute strategy).
    # --8<-- [start:replicators]
    two = Replicator("cpu:2")
    import tensorflow as tf

    one = Replicator(
        strategy=tf.distribute.MirroredStrategy(
            ["/cpu:0"], cross_device_ops=tf.distribute.ReductionToOneDevice()
        )
    )
    # --8<-- [end:replicators]

    tf.keras.utils.set_random_seed(0)
    losses_2, weights_2, initial = train_on(two, steps=args.steps, batch_size=args.batch_size)
    losses_1, weights_1, _ = train_on(
        one, steps=args.steps, batch_size=args.batch_size, initial_weights=initial
    )

    print(
        f"{args.steps} steps of a global batch of {args.batch_size} "
        f"({args.batch_size // 2} per replica on 2 replicas)"
    )
    print(f"  {'step':>6s}{'2 replicas':>14s}{'1 replica':>14s}")
    for step in sorted(
        {0, *range(args.steps // 5, args.steps, max(1, args.steps // 5)), args.steps - 1}
    ):
        print(f"  {step + 1:6d}{losses_2[step]:14.6f}{losses_1[step]:14.6f}")
    difference = max(float(np.max(np.abs(a - b))) for a, b in zip(weights_2, weights_1))
    print(f"max |weight difference| (batch-norm moving statistics included): {difference:.2e}")
    if difference > TOLERANCE:
        print(f"error: 1 and 2 replicas differ by more than {TOLERANCE}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
