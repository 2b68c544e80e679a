"""CartPoles with other observation spaces, for the env factory's tests (`module:id` form):

- `observation_spaces_env:TextObservation-v0`: Text observations, a space with no fixed-size
  vector form, which the factory must refuse;
- `observation_spaces_env:MixedObservation-v0`: a Dict of CartPole's Box ("state") and a
  MultiDiscrete step counter ("phase": the step number mod 2 and mod 3), which it flattens;
- `observation_spaces_env:GridObservation-v0`: MiniGrid's layout on CartPole: a Dict of an
  image ("image": [5, 5, 3] uint8, every cell the step number mod 11), a Discrete(4)
  ("direction": the step number mod 4) and a Text ("mission"), which needs keys kept;
- `observation_spaces_env:PixelsAndState-v0`: a Tuple of a bool image ([4, 4, 2], every cell
  True at odd step numbers) and CartPole's Box state, which travels as a nest;
- `observation_spaces_env:DictPendulum-v0`: Pendulum (a Box action) whose observation is a
  Dict of its state ("state", [3]) and its angular velocity alone ("velocity", [1]);
- `observation_spaces_env:WideIntegerPixels-v0`: a Dict of an int64 image with values up to
  1000 and CartPole's state: an image no CNN here takes.
"""

import gymnasium
import numpy as np


class TextObservation(gymnasium.ObservationWrapper):
    def __init__(self):
        super().__init__(gymnasium.make("CartPole-v1"))
        self.observation_space = gymnasium.spaces.Text(max_length=8)

    def observation(self, observation):
        return "cartpole"


class _CountingSteps(gymnasium.Wrapper):
    """CartPole whose observations (`_observation(state)`) may show the steps into the episode."""

    def __init__(self):
        super().__init__(gymnasium.make("CartPole-v1"))
        self._steps = 0

    def reset(self, **kwargs):
        self._steps = 0
        state, info = self.env.reset(**kwargs)
        return self._observation(state), info

    def step(self, action):
        self._steps += 1
        state, reward, terminated, truncated, info = self.env.step(action)
        return self._observation(state), reward, terminated, truncated, info


class MixedObservation(_CountingSteps):
    def __init__(self):
        super().__init__()
        self.observation_space = gymnasium.spaces.Dict(
            {"state": self.env.observation_space, "phase": gymnasium.spaces.MultiDiscrete([2, 3])}
        )

    def _observation(self, state):
        return {"state": state, "phase": np.array([self._steps % 2, self._steps % 3])}


class GridObservation(_CountingSteps):
    def __init__(self):
        super().__init__()
        self.observation_space = gymnasium.spaces.Dict(
            {
                "image": gymnasium.spaces.Box(0, 255, (5, 5, 3), np.uint8),
                "direction": gymnasium.spaces.Discrete(4),
                "mission": gymnasium.spaces.Text(max_length=16),
            }
        )

    def _observation(self, state):
        image = np.full((5, 5, 3), self._steps % 11, np.uint8)
        return {"image": image, "direction": self._steps % 4, "mission": "balancethepole"}


class PixelsAndState(_CountingSteps):
    def __init__(self):
        super().__init__()
        self.observation_space = gymnasium.spaces.Tuple(
            (gymnasium.spaces.Box(0, 1, (4, 4, 2), np.bool_), self.env.observation_space)
        )

    def _observation(self, state):
        return np.full((4, 4, 2), self._steps % 2 == 1), state


class WideIntegerPixels(gymnasium.ObservationWrapper):
    def __init__(self):
        super().__init__(gymnasium.make("CartPole-v1"))
        self.observation_space = gymnasium.spaces.Dict(
            {
                "image": gymnasium.spaces.Box(0, 1000, (4, 4, 1), np.int64),
                "state": self.env.observation_space,
            }
        )

    def observation(self, observation):
        return {"image": np.zeros((4, 4, 1), np.int64), "state": observation}


class DictPendulum(gymnasium.ObservationWrapper):
    def __init__(self):
        super().__init__(gymnasium.make("Pendulum-v1"))
        state = self.env.observation_space
        self.observation_space = gymnasium.spaces.Dict(
            {"state": state, "velocity": gymnasium.spaces.Box(state.low[2:], state.high[2:])}
        )

    def observation(self, state):
        return {"state": state, "velocity": state[2:]}


gymnasium.register(id="DictPendulum-v0", entry_point=DictPendulum)
gymnasium.register(id="PixelsAndState-v0", entry_point=PixelsAndState)
gymnasium.register(id="WideIntegerPixels-v0", entry_point=WideIntegerPixels)
gymnasium.register(id="TextObservation-v0", entry_point=TextObservation)
gymnasium.register(id="GridObservation-v0", entry_point=GridObservation)
gymnasium.register(id="MixedObservation-v0", entry_point=MixedObservation)
