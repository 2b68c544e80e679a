"""Seeds of any actor fit the emulators: `impala_rep.envs.seeding`."""

import numpy as np
import pytest

from impala_rep.envs.seeding import ALE_SEED_LIMIT, NUMPY_SEED_LIMIT, first_sub_env_seed
from impala_rep.run.supervisor import actor_seed


@pytest.mark.parametrize("limit", [ALE_SEED_LIMIT, NUMPY_SEED_LIMIT])
@pytest.mark.parametrize("num_envs", [1, 16, 64])
def test_every_sub_env_seed_fits_and_small_seeds_are_kept(limit, num_envs):
    seeds = [0, 1, 12345, limit - num_envs, limit - num_envs + 1, limit, 2**32 - 1, 2**40 + 7]
    seeds += [actor_seed(seed=0, slot=slot, generation=0, start_step=0) for slot in range(50)]
    for seed in seeds:
        first = first_sub_env_seed(seed, num_envs=num_envs, limit=limit)
        assert 0 <= first and first + num_envs - 1 < limit, seed
        if seed + num_envs - 1 < limit:
            assert first == seed  # nothing changes for seeds that already fit


def test_actor_seeds_reach_beyond_ale_range():
    # Why the module exists: actor seeds are uint32, half of them beyond ALE's C int.
    seeds = np.array(
        [actor_seed(seed=0, slot=slot, generation=0, start_step=0) for slot in range(50)]
    )
    assert (seeds >= ALE_SEED_LIMIT).any()


@pytest.mark.parametrize("seed", [-1, 1.5, True, "3"])
def test_bad_seeds_are_refused(seed):
    with pytest.raises(ValueError, match="seed must be an integer >= 0"):
        first_sub_env_seed(seed, num_envs=4, limit=ALE_SEED_LIMIT)
