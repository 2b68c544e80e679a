"""What a run needs of memory: its unroll buffers and its processes, a lower bound in bytes.

`estimate_memory` counts only what a run certainly holds at once, from its settings and its
environment's observations (`impala_rep.unroll.UnrollSpec` lays out one unroll), and a
per-process cost measured below the real one, so the estimate errs on the side of running.
What the machine has is `run/machine.py`'s; `run/resources.py` refuses a run whose estimate
does not fit. Neither TensorFlow nor Ray is imported: the driver checks this before it starts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from impala_rep.config import TrainConfig
from impala_rep.observation_nest import Shape
from impala_rep.unroll import UnrollSpec

__all__ = [
    "MemoryEstimate",
    "estimate_memory",
    "estimate_from_sizes",
    "memory_sizes",
    "SIZE_KEYS",
    "PROCESS_BYTES",
    "XLA_LEARNER_BYTES",
    "GiB",
]

GiB = 2**30

# Memory of one TensorFlow process that is its own, not shared with the others
# (/proc/self/smaps_rollup, Private_Dirty): about what an imported TensorFlow with Ray, a
# CartPole actor and a Pong actor hold, the last a little more, so the estimate errs on the
# side of running. Most of a process's RSS is TensorFlow's shared libraries, mapped once for
# all processes, so they are not counted per process; Ray's own processes (raylet, GCS) are
# not counted either (docs/notebook.md, "Where the CPU goes").
PROCESS_BYTES = GiB // 4
# What XLA adds to a learner that compiles its step with it (`--learner-xla`), measured the same
# way for CartPole's MLP on the CPU (same entry); a larger network under XLA would add more,
# not less.
XLA_LEARNER_BYTES = 180 * 2**20

# The settings the unroll buffers scale with (each linearly).
SIZE_KEYS = ("envs_per_actor", "unroll_length", "num_actors", "batch_size", "queue_capacity")


@dataclasses.dataclass(frozen=True)
class MemoryEstimate:
    """Memory a run certainly holds at once, at the least (bytes)."""

    column_bytes: int  # one env column of one unroll: T+1 observations and T transitions
    held_unrolls: int  # actor-sized unroll blocks (E columns) held at once
    batch_columns: int  # columns of the learner's batch (a copy of its own)
    processes: int  # processes that import TensorFlow
    unroll_bytes: int  # one actor's unroll (E columns)
    xla_learners: int = 0  # learner processes compiling their step with XLA

    @property
    def buffer_bytes(self) -> int:
        return (self.held_unrolls * self.unroll_bytes) + self.batch_columns * self.column_bytes

    @property
    def process_bytes(self) -> int:
        return self.processes * PROCESS_BYTES + self.xla_learners * XLA_LEARNER_BYTES

    @property
    def total_bytes(self) -> int:
        return self.buffer_bytes + self.process_bytes


def estimate_memory(
    config: TrainConfig, observation_shape: Shape, observation_dtype, num_actions: int
) -> MemoryEstimate:
    """A lower bound of the memory the run's unroll buffers and processes hold at once.

    The buffers (actors/actor_loop.py, learner/unroll_queue.py, learner/service.py):
    - each actor holds 2 unrolls of E columns: the one it records, and the one it
      recorded before, which is still referenced while the next is recorded and then
      waits to be put into the learner's queue (Ray: sent, copied to the object store);
    - each learner host's queue holds up to `queue_capacity` such blocks; it is full
      whenever the learner is the slower side, which is what the back-pressure is for
      (under Ray these are the object store's copies, beyond the actors' own);
    - the learner trains on a batch of B columns converted to tensors (a copy).
    The processes: `PROCESS_BYTES` each (one per actor and learner host under Ray, one in
    all with the local launcher), and `XLA_LEARNER_BYTES` more for a learner under XLA.
    Not counted, so the estimate stays below the truth: the learner's activations and
    float copies of the observations, the envs' own state, the agent's recurrent state,
    Ray's object-store copies of the unrolls in flight, and Ray's system processes.
    """
    return estimate_from_sizes(
        memory_sizes(config), observation_shape, observation_dtype, num_actions
    )


def memory_sizes(config: TrainConfig) -> dict[str, int]:
    """The settings the estimate depends on, by key: `SIZE_KEYS`, and what decides the
    process count (learner hosts, the local launcher, a learner under XLA)."""
    sizes = {key: int(config.get(key)) for key in SIZE_KEYS}
    sizes["learner_hosts"] = config.learner.hosts
    sizes["local"] = int(config.run.launcher == "local")
    # The config allows XLA on one learner host only.
    sizes["xla_learners"] = int(bool(config.learner.xla))
    return sizes


def estimate_from_sizes(
    sizes: Mapping[str, int], observation_shape: Shape, observation_dtype, num_actions: int
) -> MemoryEstimate:
    """`estimate_memory` of `memory_sizes`' values, so that a check can try others."""
    actors, hosts = sizes["num_actors"], sizes["learner_hosts"]
    # One env column of one unroll, as impala_rep/unroll.py lays it out (FIELDS): T+1
    # observations, T transitions, the per-column fields (the agent's state not counted).
    column = UnrollSpec(
        unroll_length=sizes["unroll_length"],
        observation_shape=observation_shape,
        observation_dtype=observation_dtype,
        num_actions=num_actions,
    ).column_bytes()
    return MemoryEstimate(
        column_bytes=column,
        held_unrolls=2 * actors + sizes["queue_capacity"] * hosts,
        batch_columns=sizes["batch_size"],
        # The local launcher: one process, actors as threads. Ray: one per actor and learner host.
        processes=1 if sizes["local"] else actors + hosts,
        unroll_bytes=column * sizes["envs_per_actor"],
        xla_learners=sizes["xla_learners"],
    )
