"""`hanging_env:HangingCartPole-v1`: CartPole whose `step` hangs, once per test.

The first env (in any process) to step past `FAULT_AFTER` claims the marker file
named by `$HANGING_ENV_MARKER` and sleeps: its actor stays alive and sends
nothing, as an actor stuck in a C extension or a deadlocked env would. Every
other env, the replacement actor's included, steps normally, so a run that
replaces the hung actor finishes. Imported by gymnasium through the `module:id`
form, in Ray workers too (tests put tests/ on their PYTHONPATH).
"""

import os
import time

import gymnasium
from crashing_env import CrashingCartPole


class HangingCartPole(CrashingCartPole):
    def fault(self):
        if _claim(os.environ["HANGING_ENV_MARKER"]):
            time.sleep(3600)


def _claim(path: str) -> bool:
    """Whether this call created `path` (exactly one caller across processes does)."""
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


gymnasium.register(id="HangingCartPole-v1", entry_point=HangingCartPole)
