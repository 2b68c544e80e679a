"""The `train` flags, generated from the config's fields (`impala_rep.config.config_fields`).

One flag per field: its name, help text, choices and metavar come from the
field's metadata, its parser from the field's type, its default from the
effective defaults (the dataclasses' own, overlaid by a `--preset`), and its
`dest` is the field's key, so the parsed namespace feeds
`TrainConfig.from_keys` as it is. Flags are grouped by what they configure (the
config's groups), and a setting left to auto says how it resolves
(`impala_rep.config.auto`).

The parsers read the text: `int`, `float`, `str`, `bool` (a switch, `--x` or `--no-x`),
`tuple[int, ...]` as `64,64`, `tuple[str, ...]` as `image,direction`, and `X | None` also
as the word `none`. The dataclasses check the values (a bad one: `bad <key> <value>: ...`). A few
ranges are checked here as well, for a message naming the flag: counts (every
integer but those in `_INT_RANGES`, and layer sizes) are positive, and
`_RANGES`; tests/test_cli_flags.py checks that each takes exactly what its field takes.
"""

from __future__ import annotations

import argparse
import types
import typing
from collections.abc import Callable
from typing import Any

from impala_rep.config import ConfigField, TrainConfig, config_fields
from impala_rep.config.auto import AUTO_RULES
from impala_rep.config.validation import (
    SEED_RANGE,
    STICKY_ACTIONS_RANGE,
    is_seed,
    is_sticky_probability,
)

__all__ = [
    "add_config_flags",
    "config_values",
    "format_value",
    "is_switch",
    "positive_int",
    "seed_int",
    "NONE",
    "GROUP_TITLES",
    "group_class",
    "help_text",
    "field_type",
    "accepted_values",
]

NONE = "none"  # the word an optional field's flag takes for None

# The title of each config group's flags in `train --help` and the reference.
GROUP_TITLES = {
    "env": "environment",
    "agent": "agent",
    "actors": "actors",
    "learner": "learner",
    "loss": "loss",
    "optimizer": "optimizer",
    "run": "run",
}
_AUTO = {rule.key: rule for rule in AUTO_RULES}

# Integer fields whose range is not "positive" (every other integer is a count):
# key -> (what is allowed, check), the config's own statement of it.
_INT_RANGES: dict[str, tuple[str, Callable[[int], bool]]] = {"seed": (SEED_RANGE, is_seed)}
# Float fields whose range the flag checks too: key -> (what is allowed, check).
_RANGES: dict[str, tuple[str, Callable[[float], bool]]] = {
    "sticky_actions": (STICKY_ACTIONS_RANGE, is_sticky_probability),
}


def _checked(
    convert: Callable[[str], Any],
    what: str,
    ok: Callable[[Any], bool] = lambda v: True,
    *,
    optional: bool = False,
) -> Callable[[str], Any]:
    """An argparse type: `convert`, then `ok`; the error says what is allowed and what came."""

    def parse(text: str):
        if optional and text == NONE:
            return None
        try:
            value = convert(text)
        except ValueError:
            allowed = f"{what} or {NONE}" if optional else what
            raise argparse.ArgumentTypeError(f"expected {allowed}, got {text!r}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text}")
        return value

    return parse


def _positive(value: int) -> bool:
    return value >= 1


positive_int = _checked(int, "a positive integer", _positive)
seed_int = _checked(int, SEED_RANGE, is_seed)


def _int_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(","))


_INT_TUPLE = "comma-separated positive integers such as 64,64"
_STR_TUPLE = "comma-separated names such as image,direction"


def _str_tuple(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(","))


def _accepted(key: str, kind: Any) -> tuple[str, Callable[[Any], bool]]:
    """What a field's flag accepts, in words and as a check (before `none`)."""
    if kind is int:
        return _INT_RANGES.get(key, ("a positive integer", _positive))
    if kind is float:
        return _RANGES.get(key, ("a number", lambda v: True))
    if kind is str:
        return "a string", lambda v: True
    if kind == tuple[int, ...]:
        return _INT_TUPLE, lambda v: all(map(_positive, v))
    if kind == tuple[str, ...]:
        return _STR_TUPLE, lambda v: all(v) and len(set(v)) == len(v)
    raise TypeError(f"config field {key!r} has type {kind!r}, which no flag parser reads")


def accepted_values(field: ConfigField) -> str:
    """What the field's flag accepts, in words, as its errors say it (the reference's column)."""
    kind, optional = field_type(field)
    if kind is bool:
        return f"{field.flag} or --no-{field.flag[2:]}"
    what = _accepted(field.key, kind)[0]
    return f"{what} or {NONE}" if optional else what


def _parser(key: str, kind: Any, optional: bool) -> Callable[[str], Any]:
    what, ok = _accepted(key, kind)
    convert = {int: int, float: float, str: str, tuple[str, ...]: _str_tuple}.get(kind, _int_tuple)
    return _checked(convert, what, ok, optional=optional)


def is_switch(field: ConfigField) -> bool:
    """Whether the field's flag is an on/off switch with a `--no-` form: a bool, or a
    `bool | None` whose None means automatic."""
    return field_type(field)[0] is bool


def group_class(group: str) -> type:
    """The config dataclass of a group (`"loss"` -> `LossConfig`)."""
    return typing.get_type_hints(TrainConfig)[group]


def help_text(field: ConfigField) -> str:
    """The field's help, with how its auto resolves where it has one."""
    rule = _AUTO.get(field.key)
    return field.field.metadata["help"] + (f"; {NONE} (auto): {rule.rule}" if rule else "")


def field_type(field: ConfigField) -> tuple[Any, bool]:
    """The field's type without `| None`, and whether None is allowed."""
    kind = typing.get_type_hints(group_class(field.group))[field.name]
    if isinstance(kind, types.UnionType):
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        assert len(args) == 1, f"config field {field.key!r}: only `X | None` unions have a flag"
        return args[0], True
    return kind, False


def format_value(value: Any) -> str:
    """A value as its flag takes it (`none`, `64,64`, `0.0006`), so help shows what to type;
    a switch's as on or off."""
    if value is None:
        return NONE
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    return repr(value) if isinstance(value, float) else str(value)


def add_config_flags(
    parser: argparse.ArgumentParser, defaults: TrainConfig, *, explicit_only: bool = False
) -> dict[str, argparse.Action]:
    """Adds one flag per config field to `parser`; returns the actions by key.

    `defaults` gives each flag's default and the one its help shows;
    `explicit_only` leaves the defaults out of the namespace, so it holds just
    the flags that were given (what `--resume` changes).
    """
    actions = {}
    groups = {}
    for field in config_fields():
        if field.group not in groups:
            doc = (group_class(field.group).__doc__ or "").strip().splitlines()
            groups[field.group] = parser.add_argument_group(
                GROUP_TITLES[field.group], doc[0] if doc else None
            )
        default = defaults.get(field.key)
        meta = field.field.metadata
        # argparse %-formats help text.
        text = f"{help_text(field)} (default: {format_value(default)})".replace("%", "%%")
        kwargs: dict[str, Any] = {
            "dest": field.key,
            "help": text,
            "default": argparse.SUPPRESS if explicit_only else default,
        }
        kind, optional = field_type(field)
        if kind is bool:
            # `--x` and `--no-x`: a preset's True, or a resumed run's, can be switched off.
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs["type"] = _parser(field.key, kind, optional)
            if meta.get("choices"):
                kwargs["choices"] = tuple(meta["choices"]) + ((None,) if optional else ())
                if optional:  # the word, not argparse's repr of None
                    kwargs["metavar"] = "{" + ",".join((*meta["choices"], NONE)) + "}"
            if meta.get("metavar"):
                kwargs["metavar"] = meta["metavar"]
        actions[field.key] = groups[field.group].add_argument(field.flag, **kwargs)
    return actions


def config_values(args: argparse.Namespace) -> dict[str, Any]:
    """The config fields in a parsed namespace, as {key: value}."""
    given = vars(args)
    return {field.key: given[field.key] for field in config_fields() if field.key in given}
