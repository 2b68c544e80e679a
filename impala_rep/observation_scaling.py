"""Observation standardisation constants for the built-in MLP and RND's networks (numpy only,
TensorFlow-free).

The driver computes them from the env's declared bounds before any process imports
TensorFlow (`impala_rep.run.agents`); `MLPAgent(observation_normalization=)` applies them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["bounds_normalization", "declared_bounds_normalization", "observation_scaling"]

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


def declared_bounds_normalization(env_spec: Any) -> tuple | None:
    """`bounds_normalization` of an `EnvSpec`'s declared observation bounds; None without
    bounds (images have their own scaling).

    From the declared Box, not from stepping the env: nothing of the user's env runs in the
    driver (an env that crashes or hangs does so in an actor, where it is handled), and the
    numbers are the same in every process and on resume."""
    if env_spec.observation_bounds is None:
        return None
    return bounds_normalization(*env_spec.observation_bounds)


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
