"""The syntax of a user-code spec (`--agent`, `--loss`): `module:name` or `path/to/file.py:name`.

Only the form is checked here, so the config can validate it without importing
anything; `impala_rep.run.user_code` imports what a spec names.
"""

from __future__ import annotations

from typing import Any

__all__ = ["parse_code_spec", "CODE_SPEC_FORMS"]

# What a user-code spec looks like, for the messages that refuse one.
CODE_SPEC_FORMS = {
    "agent": "'module:factory' or 'path/to/file.py:factory'",
    "loss": "'module:function' or 'path/to/file.py:function'",
    "env": "a gymnasium id, 'module:EnvId' or 'path/to/file.py:EnvId'",
}


def parse_code_spec(spec: Any, *, what: str) -> tuple[str, str]:
    """Splits a user-code spec ('module:name' or 'path/file.py:name') into its two parts;
    ValueError unless it has that form. Only the syntax is checked: nothing is imported."""
    form = CODE_SPEC_FORMS[what]
    if not isinstance(spec, str) or spec.count(":") != 1:
        raise ValueError(f"bad {what} {spec!r}: expected {form}")
    module, name = spec.split(":")
    if not module or not name.isidentifier():
        raise ValueError(f"bad {what} {spec!r}: expected {form}")
    return module, name
