"""How a config group declares a field and checks its values (TensorFlow-free).

`impala_rep.config` builds every group's fields with `field` and validates them
in `__post_init__` with the checks here; an error names the field by its *key*
(the flag without dashes), as flags, presets and `--resume` do.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from impala_rep.value_checks import is_int, is_number, require

__all__ = [
    "ConfigField",
    "field",
    "key_of",
    "positive_ints",
    "bools",
    "numbers",
    "declared_choices",
]


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
