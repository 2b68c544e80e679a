"""`endless_env:Endless-v0`: an env whose episodes never end (no terminal state, registered
with no time limit), for the console's no-episode hint and `--max-episode-steps`: reward 1
a step, so a return is exactly the episode's length."""

import gymnasium
import numpy as np


class Endless(gymnasium.Env):
    observation_space = gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return self.np_random.uniform(-1, 1, 2).astype(np.float32), 1.0, False, False, {}


gymnasium.register("Endless-v0", entry_point=Endless, max_episode_steps=None)
