"""Fitting a run's seeds into what an emulator accepts.

Actor seeds are any 32-bit unsigned integers (`actors/supervisor.actor_seed`
draws them from `numpy.random.SeedSequence`), and a vector env seeds sub-env i
with `seed + i`. Emulators take less: ALE's C++ `reset` takes C ints (a seed
of 2**31 or more fails with a pybind TypeError), MinAtar's
`numpy.random.RandomState` takes at most 2**32 - 1. `first_sub_env_seed` maps a
seed to the first of `num_envs` consecutive seeds that all fit.
"""

from __future__ import annotations

from impala_rep.config.validation import is_int

__all__ = ["first_sub_env_seed", "ALE_SEED_LIMIT", "NUMPY_SEED_LIMIT"]

ALE_SEED_LIMIT = 2**31  # ALE seeds must be below this (C int)
NUMPY_SEED_LIMIT = 2**32  # numpy.random.RandomState seeds must be below this


def first_sub_env_seed(seed: int, *, num_envs: int, limit: int) -> int:
    """`seed` if `seed + num_envs - 1 < limit`, else `seed` modulo `limit - num_envs + 1`.

    Seeds that already fit are kept, so small seeds mean what they always meant;
    larger ones wrap (two runs collide only if their seeds agree modulo ~2**31).
    ValueError for a negative or non-integer `seed`.
    """
    if not is_int(seed) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    if not 1 <= num_envs < limit:
        raise ValueError(f"num_envs must be in [1, {limit}), got {num_envs}")
    return int(seed) % (limit - num_envs + 1)
