"""One learner process of the weak-scaling measurement in benchmarks/scaling.py.

    python _weak_scaling_worker.py INDEX PER_REPLICA_BATCH STEPS WARMUP HIDDEN [ADDRESS ...]

With no ADDRESS (or one), a plain one-device learner; with several, host INDEX
of a MultiWorkerMirroredStrategy group (TF_CONFIG from
`impala_rep.learner.cluster_spec`). Each process uses ONE TensorFlow thread
(intra- and inter-op), so a replica is one core's worth of work. Random
CartPole-shaped unrolls; prints `RESULT {json}` with the timed steps' seconds.
"""

import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

T, OBS, ACTIONS = 20, 4, 2


def random_batch(rng, batch):
    from impala_rep.unroll import Unroll

    return Unroll(
        observations=rng.normal(size=(T + 1, batch, OBS)).astype(np.float32),
        prev_actions=rng.integers(0, ACTIONS, (T + 1, batch)).astype(np.int32),
        prev_rewards=np.ones((T + 1, batch), np.float32),
        first=rng.random((T + 1, batch)) < 0.05,
        actions=rng.integers(0, ACTIONS, (T, batch)).astype(np.int32),
        rewards=np.ones((T, batch), np.float32),
        terminated=rng.random((T, batch)) < 0.05,
        truncated=np.zeros((T, batch), bool),
        truncation_values=np.zeros((T, batch), np.float32),
        behaviour_logits=rng.normal(size=(T, batch, ACTIONS)).astype(np.float32),
        initial_state=(),
        policy_version=np.zeros(batch, np.int64),
    )


def main(index, batch, steps, warmup, hidden, addresses):
    if len(addresses) > 1:
        from impala_rep.learner.cluster_spec import set_tf_config

        set_tf_config(os.environ, addresses, index)  # before any TensorFlow work
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    from impala_rep import Replicator
    from impala_rep.agent import MLPAgent
    from impala_rep.learner.learner import Learner

    strategy = tf.distribute.MultiWorkerMirroredStrategy() if len(addresses) > 1 else None
    replicator = Replicator(strategy=strategy) if strategy else Replicator("cpu")
    learner = Learner(
        agent=MLPAgent(num_actions=ACTIONS, hidden_sizes=hidden),
        replicator=replicator,
        observation_shape=(OBS,),
        total_steps=10**6,
    )
    rng = np.random.default_rng(index)
    batches = [random_batch(rng, batch) for _ in range(4)]
    for i in range(warmup):  # tracing and the first collectives
        learner.step(batches[i % len(batches)])
    start = time.perf_counter()
    for i in range(steps):
        learner.step(batches[i % len(batches)])
    seconds = time.perf_counter() - start
    print(
        "RESULT "
        + json.dumps(
            {
                "index": index,
                "replicas": replicator.num_replicas,
                "seconds": seconds,
                "steps": steps,
                "host_batch": batch,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    args = sys.argv[1:]
    main(
        int(args[0]),
        int(args[1]),
        int(args[2]),
        int(args[3]),
        tuple(int(h) for h in args[4].split(",")),
        args[5:],
    )
