"""A user's env in files of their own, written into a test's folder: `masked_cartpole.py`
registers CartPole with its velocities hidden and imports `masking.py` beside it."""

# The env imports a module beside it, as a user's file would.
MASKING = """
import numpy as np

KEPT = [0, 2]  # the cart's position and the pole's angle, not their velocities


def masked(observation):
    return observation[KEPT].astype(np.float32)
"""

MASKED_CARTPOLE = """
import gymnasium
import numpy as np
from masking import KEPT, masked


class MaskedCartPole(gymnasium.ObservationWrapper):
    def __init__(self):
        super().__init__(gymnasium.make("CartPole-v1").unwrapped)
        self.observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (len(KEPT),), np.float32)

    def observation(self, observation):
        return masked(observation)


gymnasium.register({id!r}, entry_point=MaskedCartPole, max_episode_steps=500)
"""


def write_env(directory, env_id):
    directory.mkdir(exist_ok=True)
    (directory / "masking.py").write_text(MASKING)
    (directory / "masked_cartpole.py").write_text(MASKED_CARTPOLE.format(id=env_id))
