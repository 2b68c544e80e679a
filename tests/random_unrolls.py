"""Random `Unroll` batches for learner tests (shared by test files and their subprocess workers)."""

import numpy as np

from impala_rep.unroll import Unroll


def random_unroll(*, T, B, obs_size, num_actions, seed=0, initial_state=(), policy_version=None):
    """A [T+1, B] unroll with rewards often beyond [-1, 1] and some episode ends."""
    rng = np.random.default_rng(seed)
    return Unroll(
        observations=rng.normal(size=(T + 1, B, obs_size)).astype(np.float32),
        prev_actions=rng.integers(0, num_actions, (T + 1, B)).astype(np.int32),
        prev_rewards=rng.normal(size=(T + 1, B)).astype(np.float32),
        first=rng.random((T + 1, B)) < 0.2,
        actions=rng.integers(0, num_actions, (T, B)).astype(np.int32),
        rewards=(3 * rng.normal(size=(T, B))).astype(np.float32),
        terminated=rng.random((T, B)) < 0.15,
        truncated=rng.random((T, B)) < 0.15,
        truncation_values=rng.normal(size=(T, B)).astype(np.float32),
        behaviour_logits=rng.normal(size=(T, B, num_actions)).astype(np.float32),
        initial_state=initial_state(rng) if callable(initial_state) else initial_state,
        policy_version=np.zeros(B, np.int64)
        if policy_version is None
        else np.asarray(policy_version),
    )
