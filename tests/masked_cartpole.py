"""`masked_cartpole:MaskedCartPole-v1`: CartPole-v1 with its two velocities hidden.

The observation is the cart's position and the pole's angle only, so no policy of the
current observation alone balances the pole for long: the task of RLlib's stateless
CartPole example, which needs an agent with memory (`--use-lstm`). Imported by gymnasium
through the `module:id` form (tests put tests/ on the PYTHONPATH).
"""

import gymnasium
import numpy as np

_KEPT = [0, 2]  # x, theta; x_dot and theta_dot are dropped


class MaskedCartPole(gymnasium.ObservationWrapper):
    def __init__(self, **kwargs):
        super().__init__(gymnasium.make("CartPole-v1", **kwargs).unwrapped)
        space = self.env.observation_space
        self.observation_space = gymnasium.spaces.Box(
            space.low[_KEPT], space.high[_KEPT], dtype=np.float32
        )

    def observation(self, observation):
        return observation[_KEPT].astype(np.float32)


gymnasium.register(id="MaskedCartPole-v1", entry_point=MaskedCartPole, max_episode_steps=500)
