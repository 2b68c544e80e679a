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
    the episode's return in its comment."""
    import imageio.v3 as iio

    iio.imwrite(
        path,
        np.stack(frames),
        extension=".gif",
        duration=1000.0 / fps,  # ms a frame
        loop=0,
        comment=f"impala-rep evaluate: episode return {episode_return:.2f}",
    )
