"""gymnasium's SAME_STEP sync vector envs of wrapped sub-envs, and the recording of one
sub-env's frames for a video (`impala-rep evaluate --video`)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import gymnasium
import numpy as np
from gymnasium.vector import AutoresetMode

__all__ = ["FirstEpisodeFrames", "same_step_sync_vector_env"]


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


def same_step_sync_vector_env(
    env_id: str,
    *,
    num_envs: int,
    wrap: Callable[[gymnasium.Env], gymnasium.Env],
    frames: list | None = None,
    **make_kwargs: Any,
) -> gymnasium.vector.SyncVectorEnv:
    """gymnasium's `SyncVectorEnv` of `num_envs` `env_id` envs (made with `make_kwargs`), each
    wrapped by `wrap`, autoreset SAME_STEP. With `frames`, the sub-envs render `rgb_array` and
    the first one's first episode is recorded into it (`FirstEpisodeFrames`); ValueError for
    an env without the `rgb_array` render mode (TypeError from an env class that takes no
    `render_mode` at all)."""
    made: list[gymnasium.Env] = []

    def wrapper(env: gymnasium.Env) -> gymnasium.Env:
        env = wrap(env)
        made.append(env)
        return FirstEpisodeFrames(env, frames) if frames is not None and len(made) == 1 else env

    render = {} if frames is None else {"render_mode": "rgb_array"}
    env = gymnasium.make_vec(
        env_id,
        num_envs=num_envs,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
        wrappers=[wrapper],
        **render,
        **make_kwargs,
    )
    if frames is not None and "rgb_array" not in made[0].metadata.get("render_modes", ()):
        env.close()
        raise ValueError(
            f"environment {env_id!r} cannot render a video: it has no 'rgb_array' render mode"
        )
    return env
