"""`slow_start_env:SlowStartCartPole-v1`: CartPole that takes `SLOW_START_S` seconds to build.

An actor building its envs with it starts slowly, as one on a loaded machine does
(a process, TensorFlow's import): for the test that start-up is not taken for a
hang. Imported by gymnasium through the `module:id` form.
"""

import os
import time

import gymnasium


class SlowStartCartPole(gymnasium.Wrapper):
    def __init__(self):
        time.sleep(float(os.environ["SLOW_START_S"]))
        super().__init__(gymnasium.make("CartPole-v1"))


gymnasium.register(id="SlowStartCartPole-v1", entry_point=SlowStartCartPole)
