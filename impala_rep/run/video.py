"""`impala-rep evaluate --video PATH`: the first evaluation episode as an animated GIF.

GIF, written by imageio's Pillow plugin: it needs no codec beyond Pillow (MP4 would need
ffmpeg), and every browser and docs page shows it. The episode's return goes into the file's
comment, where `PIL.Image.open(PATH).info["comment"]` reads it.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Sequence

import numpy as np

__all__ = ["check_video_path", "write_gif"]

# Frames smaller than this (MinAtar's 10x10) are enlarged, each cell a square of pixels.
_MIN_SIDE = 160

# A GIF shows at most this much of an episode (an Atari game can last 30 minutes). It also
# keeps every frame's duration within the GIF's 16 bits of centiseconds, which Pillow would
# exceed when it merges a long run of identical frames (a game nobody starts) into one.
MAX_SECONDS = 600


def check_video_path(path: str) -> None:
    """ValueError (one line, naming it) unless `path` is a .gif file that can be written."""
    target = pathlib.Path(path).absolute()
    if target.suffix.lower() != ".gif":
        raise ValueError(f"bad video {path!r}: give a path ending in .gif")
    if target.is_dir() or not target.parent.is_dir() or not os.access(target.parent, os.W_OK):
        raise ValueError(
            f"bad video {path!r}: cannot be written; give a file path in an existing, "
            "writable directory"
        )


def write_gif(
    path: str, frames: Sequence[np.ndarray], *, fps: float, episode_return: float
) -> None:
    """`frames` (uint8 `[H, W, 3]`) as an animated GIF at `fps` frames a second, looping, with
    the episode's return in its comment; at most the first `MAX_SECONDS` of them."""
    import imageio.v3 as iio

    frames = frames[: max(1, int(fps * MAX_SECONDS))]
    iio.imwrite(
        path,
        np.stack([_pixels(frame) for frame in frames]),
        extension=".gif",
        duration=1000.0 / fps,  # ms a frame
        loop=0,
        comment=f"impala-rep evaluate: episode return {episode_return:.2f}",
    )


def _pixels(frame: np.ndarray) -> np.ndarray:
    """A rendered frame as uint8 RGB of at least `_MIN_SIDE` pixels a side: float colours in
    [0, 1] (MinAtar's) scaled to 0-255, a small grid's cells enlarged to squares."""
    frame = np.asarray(frame)
    if np.issubdtype(frame.dtype, np.floating):
        frame = np.clip(np.round(frame * 255.0), 0, 255)
    frame = frame.astype(np.uint8)
    scale = -(-_MIN_SIDE // min(frame.shape[:2]))
    if scale > 1:
        frame = frame.repeat(scale, axis=0).repeat(scale, axis=1)
    return frame
