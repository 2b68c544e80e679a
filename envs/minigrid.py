"""MiniGrid's image observations as one-hot planes.

MiniGrid (`pip install -e '.[minigrid]'`) codes each cell of the agent's view as three small
integers: the object's index (11 kinds: unseen, empty, wall, door, key, goal, ...), its
colour's (6) and its state's (a door open, closed or locked; the agent's direction where a
wrapper puts the agent in the view). Its space says `Box(0, 255, (7, 7, 3), uint8)`, so taken
as pixels the codes would reach the network as 0 to 10/255 of a pixel's range, and as
magnitudes, though a wall (2) is no more "door" (4) than half of it. `one_hot_image` gives each
index a plane of its own instead, 0/255 uint8 as MinAtar's channels are (the pixel networks
scale uint8 by 1/255, `impala_rep.networks`): `[7, 7, 3]` becomes `[7, 7, 21]`, 11 + 6 + 4
planes, the last four wide enough for a direction. Only the `image` key changes; the others
(the direction, the mission) are kept or refused as any Dict part is
(`impala_rep.envs.factory`). `ImgObsWrapper`'s bare image and `FullyObsWrapper`'s whole grid
get planes too; what a wrapper made of the codes (RGBImgObsWrapper's pixels,
SymbolicObsWrapper's coordinates) is kept as it is.
"""

from __future__ import annotations

import sys

import gymnasium
import numpy as np

__all__ = ["PLANES", "is_minigrid_env", "one_hot_image"]

# Planes per code: objects, colours, and states or an agent's direction (0-3), from minigrid's
# own tables (minigrid.core.constants), checked against them where the planes are made.
OBJECTS, COLOURS, STATES = 11, 6, 4
PLANES = OBJECTS + COLOURS + STATES


def is_minigrid_env(env: gymnasium.Env) -> bool:
    """Whether `env` is a MiniGrid environment (its own or a user's subclass). Reads only what
    is imported already: an env built from a MiniGrid id has imported minigrid."""
    module = sys.modules.get("minigrid.minigrid_env")
    return module is not None and isinstance(env.unwrapped, module.MiniGridEnv)


def one_hot_image(env: gymnasium.Env) -> gymnasium.Env:
    """`env` with its image of MiniGrid's codes as one-hot planes (the module docstring): the
    `image` of its Dict observations, or the observation itself where it is that image
    (`ImgObsWrapper`'s); `env` itself when it has no such image."""
    from minigrid.core.constants import COLOR_TO_IDX, DIR_TO_VEC, OBJECT_TO_IDX, STATE_TO_IDX

    sizes = (len(OBJECT_TO_IDX), len(COLOR_TO_IDX), max(len(STATE_TO_IDX), len(DIR_TO_VEC)))
    if sizes != (OBJECTS, COLOURS, STATES):
        raise RuntimeError(f"minigrid's codes changed: {sizes} kinds, planes for {PLANES}")
    space = env.observation_space
    bare = isinstance(space, gymnasium.spaces.Box)  # ImgObsWrapper's: the image alone
    image = space if bare else None
    if isinstance(space, gymnasium.spaces.Dict):
        image = space.spaces.get("image")
    if not isinstance(image, gymnasium.spaces.Box) or not _codes(image, env.unwrapped):
        return env
    planes = gymnasium.spaces.Box(0, 255, (*image.shape[:2], PLANES), np.uint8)
    if bare:
        return gymnasium.wrappers.TransformObservation(env, image_planes, planes)
    one_hot = gymnasium.spaces.Dict({**space.spaces, "image": planes})
    return gymnasium.wrappers.TransformObservation(
        env, lambda obs: {**obs, "image": image_planes(obs["image"])}, one_hot
    )


def _codes(image: gymnasium.spaces.Box, grid_env) -> bool:
    """Whether `image` holds MiniGrid's cell codes: uint8, 3 per cell, one cell per entry of
    the agent's view or of the whole grid (FullyObsWrapper's). Not what a wrapper made of them:
    RGBImgObsWrapper's pixels (a tile of pixels per cell), SymbolicObsWrapper's coordinates."""
    view = grid_env.agent_view_size
    cells = {(view, view), (grid_env.width, grid_env.height)}
    return image.dtype == np.uint8 and image.shape[2:] == (3,) and image.shape[:2] in cells


# Each code's offset among the planes.
_OFFSETS = np.array([0, OBJECTS, OBJECTS + COLOURS])


def image_planes(image: np.ndarray) -> np.ndarray:
    """`[H, W, 3]` MiniGrid codes -> `[H, W, PLANES]` uint8, 255 on each code's plane."""
    planes = np.zeros((*image.shape[:2], PLANES), np.uint8)
    np.put_along_axis(planes, image + _OFFSETS, 255, axis=-1)  # each code's plane, per cell
    return planes
