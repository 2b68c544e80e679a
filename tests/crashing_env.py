"""`crashing_env:CrashingCartPole-v1`: CartPole whose `step` raises after a few steps.

An environment that crashes on every start, for the actor crash-loop test. The
`module:id` form makes gymnasium import this module (in Ray workers too: the
test session's Ray puts tests/ on their PYTHONPATH).
"""

import gymnasium


class CrashingCartPole(gymnasium.Wrapper):
    FAULT_AFTER = 30  # steps: inside an actor's second unroll of 20

    def __init__(self):
        super().__init__(gymnasium.make("CartPole-v1"))
        self._steps = 0

    def step(self, action):
        self._steps += 1
        if self._steps > self.FAULT_AFTER:
            self.fault()
        return self.env.step(action)

    def fault(self):
        """What goes wrong on every step past FAULT_AFTER (hanging_env.py overrides it)."""
        raise RuntimeError("simulated env crash")


gymnasium.register(id="CrashingCartPole-v1", entry_point=CrashingCartPole)
