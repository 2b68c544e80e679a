"""`hanging_env:HangingCartPole-v1`: CartPole whose `step` hangs, once per test.

The first env (in any process) to reach step `HANG_AFTER` claims the marker file
named by `$HANGING_ENV_MARKER` and sleeps: its actor stays alive and sends
nothing, as an actor stuck in a C extension or a deadlocked env would. Every
other env, the replacement actor's included, steps normally, so a run that
replaces the hung actor finishes. Imported by gymnasium through the `module:id`
form, in Ray workers too (tests put tests/ on their PYTHONPATH).
"""

import os
import time

import gymnasium


class HangingCartPole(gymnasium.Wrapper):
    HANG_AFTER = 30  # steps: inside an actor's second unroll of 20

    def __init__(self):
        super().__init__(gymnasium.make("CartPole-v1"))
        self._steps = 0

    def step(self, action):
        self._steps += 1
        if self._steps == self.HANG_AFTER and _claim(os.environ["HANGING_ENV_MARKER"]):
            time.sleep(3600)
        return self.env.step(action)


def _claim(path: str) -> bool:
    """Whether this call created `path` (exactly one caller across processes does)."""
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


gymnasium.register(id="HangingCartPole-v1", entry_point=HangingCartPole)
