"""The mean and standard deviation of a vector env's observations under random play.

The MLP agent standardises its inputs with them (`AgentConfig.scale_observations`):
inputs of very different scales, such as MountainCar's position (std 0.075 under
random play) and velocity (0.0064), then weigh alike from the first update, and a
freshly initialised policy already depends on every input (on MountainCar, what
makes its first successes possible). Measured once, before the run starts, from a
seeded env and seeded uniform actions, so every process of a run, and a resumed
run, get the same numbers. Unlike SB3's `VecNormalize`, which keeps updating its
statistics while it trains, these are constants: nothing to ship with the weights
or to checkpoint.
"""

from __future__ import annotations

import gymnasium
import numpy as np

__all__ = ["random_play_statistics"]

STEPS = 5_000  # ~0.05 s on CartPole, ~0.2 s on Acrobot


def random_play_statistics(env_id: str, *, seed: int, steps: int = STEPS
                           ) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """`(mean, std)` per dimension of `env_id`'s observations over `steps` uniformly random
    actions (episodes reset as they end), the first observation of each episode included.

    Only for gymnasium envs with rank-1 Box observations (the MLP's); raises ValueError
    for others.
    """
    env = gymnasium.make(env_id)
    try:
        if len(env.observation_space.shape) != 1:
            raise ValueError(f"random_play_statistics needs vector observations; {env_id!r} has "
                             f"shape {env.observation_space.shape}")
        env.action_space.seed(seed)
        observation, _ = env.reset(seed=seed)
        seen = [observation]
        for _ in range(steps - 1):
            observation, _, terminated, truncated, _ = env.step(env.action_space.sample())
            if terminated or truncated:
                observation, _ = env.reset()
            seen.append(observation)
    finally:
        env.close()
    seen = np.asarray(seen, np.float64)
    return tuple(seen.mean(axis=0).tolist()), tuple(seen.std(axis=0).tolist())
