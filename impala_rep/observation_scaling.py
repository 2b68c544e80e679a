"""Observation standardisation constants for the built-in MLP (numpy only, TensorFlow-free).

The driver computes them from the env's declared bounds before any process imports
TensorFlow (`impala_rep.run.prepare`); `MLPAgent(observation_normalization=)` applies them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["bounds_normalization", "observation_scaling"]

# A dimension that hardly varies is left unscaled rather than blown up.
_MIN_STD = 1e-6
# Bounds this wide are "unbounded": gymnasium envs write float32's largest value for them.
_UNBOUNDED_WIDTH = 1e6


def bounds_normalization(
    low: Sequence[float], high: Sequence[float]
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """`(mean, std)` for `observation_scaling` that map each dimension with finite bounds
    `[low, high]` onto `[-1, 1]` (mean the middle, std half the width); other dimensions
    (infinite, or wider than 1e6) get `(0, 1)`: unchanged."""
    low, high = np.asarray(low, np.float64), np.asarray(high, np.float64)
    if low.shape != high.shape or low.ndim != 1:
        raise ValueError(
            f"observation bounds must be two vectors of one length, got shapes "
            f"{low.shape} and {high.shape}"
        )
    with np.errstate(invalid="ignore", over="ignore"):
        width = high - low
        bounded = np.isfinite(low) & np.isfinite(high) & (width > 0) & (width < _UNBOUNDED_WIDTH)
        mean = np.where(bounded, (high + low) / 2, 0.0)
        std = np.where(bounded, width / 2, 1.0)
    return tuple(mean.tolist()), tuple(std.tolist())


def observation_scaling(
    mean: Sequence[float], std: Sequence[float]
) -> tuple[np.ndarray, np.ndarray]:
    """`(offset, scale)` standardising each dimension by `(x - offset) * scale`: the given mean
    and 1 / std; a dimension whose std is (nearly) 0 only has its mean removed."""
    mean, std = np.asarray(mean, np.float64), np.asarray(std, np.float64)
    if mean.shape != std.shape or mean.ndim != 1:
        raise ValueError(
            f"observation mean and std must be two vectors of one length, got shapes "
            f"{mean.shape} and {std.shape}"
        )
    if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(std)) and np.all(std >= 0)):
        raise ValueError("observation mean and std must be finite, the std >= 0")
    scale = np.where(std > _MIN_STD, 1.0 / np.maximum(std, _MIN_STD), 1.0)
    return mean.astype(np.float32), scale.astype(np.float32)
