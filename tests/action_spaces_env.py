"""Envs with other action spaces, for the actors' and the env factory's tests (`module:id` form):

- `action_spaces_env:MultiDiscreteCartPole-v0`: CartPole pushed by the first entry of a
  MultiDiscrete([2, 3]) action; the second must be in range (the env checks) and does nothing;
- `action_spaces_env:UnboundedPendulum-v0`: Pendulum with an action space of infinite bounds,
  which no Gaussian policy here is clipped to, so the factory must refuse it.
"""

import gymnasium
import numpy as np


class MultiDiscreteCartPole(gymnasium.ActionWrapper):
    def __init__(self):
        super().__init__(gymnasium.make("CartPole-v1"))
        self.action_space = gymnasium.spaces.MultiDiscrete([2, 3])

    def action(self, action):
        action = np.asarray(action)
        if action.shape != (2,) or not self.action_space.contains(action.astype(np.int64)):
            raise ValueError(f"action {action!r} is not in {self.action_space}")
        return int(action[0])


class UnboundedPendulum(gymnasium.ActionWrapper):
    def __init__(self):
        super().__init__(gymnasium.make("Pendulum-v1"))
        self.action_space = gymnasium.spaces.Box(-np.inf, np.inf, (1,), np.float32)

    def action(self, action):
        return np.clip(action, -2.0, 2.0)


gymnasium.register("MultiDiscreteCartPole-v0", entry_point=MultiDiscreteCartPole)
gymnasium.register("UnboundedPendulum-v0", entry_point=UnboundedPendulum)
