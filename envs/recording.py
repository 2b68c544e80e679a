"""Recording an env's frames for a video (`impala-rep evaluate --video`)."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import gymnasium
import numpy as np

__all__ = ["FirstEpisodeFrames", "recording_first_sub_env"]


class FirstEpisodeFrames(gymnasium.Wrapper):
    """Appends the env's rendered frame to `frames` at its first reset and after each step of
    its first episode; the episodes after it are not drawn (rendering costs more than a step)."""

    def __init__(self, env: gymnasium.Env, frames: list):
        super().__init__(env)
        self._frames = frames
        self._recording = True
        self._stepped = False

    def reset(self, **kwargs):
        result = self.env.reset(**kwargs)
        if self._recording and not self._stepped:  # a reset before any step starts it again
            self._frames[:] = [self._frame()]
        return result

    def step(self, action):
        result = self.env.step(action)
        self._stepped = True
        if self._recording:
            self._frames.append(self._frame())
            self._recording = not (result[2] or result[3])
        return result

    def _frame(self) -> np.ndarray:
        with warnings.catch_warnings():
            # gymnasium's env checker warns once that MinAtar draws floats, not uint8: the
            # video's writer converts them (`impala_rep.run.video`).
            warnings.simplefilter("ignore", UserWarning)
            return np.asarray(self.env.render())


def recording_first_sub_env(
    wrap: Callable[[gymnasium.Env], gymnasium.Env], frames: list | None
) -> tuple[Callable[[gymnasium.Env], gymnasium.Env], list[gymnasium.Env]]:
    """A sub-env wrapper for `gymnasium.make_vec` that applies `wrap` and, with `frames`,
    records the first sub-env made (`FirstEpisodeFrames`); and the list of the envs `wrap`
    returned, filled as the vector env makes them (their metadata say what they render)."""
    made: list[gymnasium.Env] = []

    def wrapper(env: gymnasium.Env) -> gymnasium.Env:
        env = wrap(env)
        made.append(env)
        return FirstEpisodeFrames(env, frames) if frames is not None and len(made) == 1 else env

    return wrapper, made
