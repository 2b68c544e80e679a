"""The checks a setting's value goes through, stated once (TensorFlow-free).

The config groups (`impala_rep.config`) validate with these; the flag parsers
(`impala_rep.run.flags`) and the env builders (`impala_rep.envs`) reuse the
same rule and the same words for it, so the allowed range never drifts apart.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

__all__ = [
    "STICKY_ACTIONS_RANGE",
    "SEED_RANGE",
    "require",
    "is_int",
    "is_number",
    "is_sticky_probability",
    "is_seed",
]

STICKY_ACTIONS_RANGE = "a probability in [0, 1)"
SEED_RANGE = "an integer in [0, 2**32)"


def require(condition: bool, key: str, value: Any, allowed: str) -> None:
    """ValueError `bad KEY VALUE: ALLOWED` unless `condition`."""
    if not condition:
        raise ValueError(f"bad {key} {value!r}: {allowed}")


def is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def is_sticky_probability(value: Any) -> bool:
    """Whether `value` is a repeat-action probability: 1 would never take the chosen action."""
    return is_number(value) and 0.0 <= value < 1.0


def is_seed(value: Any) -> bool:
    """Whether `value` can seed a run (numpy's SeedSequence takes no negative entropy)."""
    return is_int(value) and 0 <= value < 2**32
