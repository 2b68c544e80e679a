"""The checks a setting's value goes through, and how a config group declares a field
(TensorFlow-free).

The config groups (`impala_rep.config.schema`) build every field with `field` and validate
them in `__post_init__` with the checks here; an error names the field by its *key* (the flag
without dashes), as flags, presets and `--resume` do. The flag parsers (`impala_rep.run.flags`),
the env builders (`impala_rep.envs`) and the learner's arguments reuse the same rules
(`is_int`, `is_seed`, ...) and the same words for them, so the allowed range never drifts apart.

A leaf module: it imports nothing of the project.
"""

from __future__ import annotations

import dataclasses
import math
from numbers import Integral, Real
from typing import Any

__all__ = [
    "STICKY_ACTIONS_RANGE",
    "SEED_RANGE",
    "require",
    "is_int",
    "is_number",
    "is_sticky_probability",
    "is_seed",
    "ConfigField",
    "field",
    "key_of",
    "positive_ints",
    "bools",
    "numbers",
    "declared_choices",
]

STICKY_ACTIONS_RANGE = "a probability in [0, 1)"
SEED_RANGE = "an integer in [0, 2**32)"


# --- one value ------------------------------------------------------------------------------


def require(condition: bool, key: str, value: Any, allowed: str) -> None:
    """ValueError `bad KEY VALUE: ALLOWED` unless `condition`."""
    if not condition:
        raise ValueError(f"bad {key} {value!r}: {allowed}")


def is_int(value: Any) -> bool:
    """Whether `value` is an integer (Python's or numpy's), and not a bool."""
    return isinstance(value, Integral) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(value)


def is_sticky_probability(value: Any) -> bool:
    """Whether `value` is a repeat-action probability: 1 would never take the chosen action."""
    return is_number(value) and 0.0 <= value < 1.0


def is_seed(value: Any) -> bool:
    """Whether `value` can seed a run (numpy's SeedSequence takes no negative entropy)."""
    return is_int(value) and 0 <= value < 2**32


# --- a config group's fields ----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ConfigField:
    """One settable field: its key (flag name without dashes), group, name and metadata."""

    key: str
    group: str
    name: str
    field: dataclasses.Field

    @property
    def flag(self) -> str:
        return self.field.metadata.get("flag") or "--" + self.name.replace("_", "-")


def field(
    default: Any,
    help: str,
    *,
    flag: str | None = None,
    choices: tuple | None = None,
    metavar: str | None = None,
) -> Any:
    """A config field with what its flag needs: help text, and a flag name when it is not
    `--` + the field's name."""
    return dataclasses.field(
        default=default,
        metadata={"help": help, "flag": flag, "choices": choices, "metavar": metavar},
    )


def positive_ints(config: Any, *names: str) -> None:
    for name in names:
        value = getattr(config, name)
        require(
            is_int(value) and value >= 1, _key(config, name), value, "must be a positive integer"
        )


def bools(config: Any, *names: str, auto: bool = False) -> None:
    """Each named field is True or False; with `auto`, also None (decided for the env later)."""
    for name in names:
        value = getattr(config, name)
        require(
            isinstance(value, bool) or (auto and value is None),
            _key(config, name),
            value,
            "must be True, False or None (auto)" if auto else "must be True or False",
        )


def numbers(
    config: Any, names: tuple[str, ...], ok, allowed: str, *, optional: bool = False
) -> None:
    """Each named field is a finite number for which `ok` holds; with `optional`, also None."""
    for name in names:
        value = getattr(config, name)
        if value is None and optional:
            continue
        require(
            is_number(value) and ok(value),
            _key(config, name),
            value,
            allowed + (", or None" if optional else ""),
        )


def declared_choices(config: Any, *names: str) -> None:
    """Each named field's value is one of the `choices` its `field(...)` declares (the
    flag's choices too), so the allowed values are stated once."""
    for name in names:
        value = getattr(config, name)
        allowed = type(config).__dataclass_fields__[name].metadata["choices"]
        require(value in allowed, _key(config, name), value, f"must be one of {', '.join(allowed)}")


def key_of(field: dataclasses.Field) -> str:
    """The field's key: its flag without the dashes."""
    return (field.metadata.get("flag") or "--" + field.name)[2:].replace("-", "_")


def _key(config: Any, name: str) -> str:
    return key_of(type(config).__dataclass_fields__[name])
