"""The actor side of impala_rep: stepping environments with a copy of the policy.

`Actor` is imported lazily so that importing this package does not import
TensorFlow.
"""

import importlib

# public name -> module that defines it
_EXPORTS = {
    "Actor": "impala_rep.actors.actor",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'impala_rep.actors' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
