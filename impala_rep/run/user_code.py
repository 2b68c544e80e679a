"""User code named as `module:attribute` (`--agent`, `--loss`) or an env id's module
(`--env module:EnvId`), made available to every Ray process.

A spec is either `package.module:name`, imported with the current directory
first on `sys.path` (as `python -m` does), or `path/to/file.py:name`, loaded
from that file with the file's directory first on `sys.path` while it is
imported (as `python path/to/file.py` would), so it can import modules beside
it. Code of your own (the module named, and every module it newly imports from
that directory, or from the current directory for the first form) is
registered with Ray's cloudpickle to be pickled BY VALUE, so the learner and
actor processes receive the code itself and need not import it: the file's
folder is not on their `sys.path`, and with `--ray-address` they may run on
other machines. This is the mechanism Ray Serve uses for user classes named by
import path. Modules from installed packages travel by reference, as usual
(workers import them). As with any code pickled by value, an `import` that
runs only later, inside a function, is not covered: workers cannot resolve it.

An env id's module registers the id with gymnasium when imported (gymnasium's own
`module:EnvId` form); `load_env` imports it the same way and hands the processes that
build envs the registered spec with its entry point resolved to the callable itself, so
the code travels too.

Nothing here imports TensorFlow; Ray is imported only to register a module.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import os
import pathlib
import sys
from collections.abc import Callable
from typing import Any

from impala_rep.config.code_specs import CODE_SPEC_FORMS, parse_code_spec
from impala_rep.observation_nest import Shape, shape_of

__all__ = ["load", "load_env", "absolute_code_spec", "agent_builder", "resolve_agent_and_loss"]


def _import(module: str, *, spec: str, what: str):
    """Imports `module` (a dotted name or a .py path); returns it and whether it is the user's
    own. The user's modules it newly imports are registered for pickling by value."""
    if module.endswith(".py"):
        return _import_file(pathlib.Path(module), spec=spec, what=what), True
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)  # as `python -m` would: the user's modules are found here
    before = set(sys.modules)
    try:
        imported = importlib.import_module(module)
    except ModuleNotFoundError as err:
        raise ValueError(
            f"bad {what} {spec!r}: no module named {err.name!r} (the current "
            f"directory and sys.path were searched); expected {CODE_SPEC_FORMS[what]}"
        ) from None
    except Exception as err:  # the user's module raised while importing: say so, on one line
        raise ValueError(
            f"bad {what} {spec!r}: importing {module!r} raised {type(err).__name__}: {err}"
        ) from None
    _register_new_modules(before, pathlib.Path(cwd))
    file = getattr(imported, "__file__", None)
    own = file is not None and pathlib.Path(file).resolve().is_relative_to(
        pathlib.Path.cwd().resolve()
    )
    return imported, own


def _register_new_modules(before: set[str], directory: pathlib.Path) -> None:
    """Registers for pickling by value every module imported since `before` (names in
    sys.modules) that was found in `directory`, the user's folder on sys.path.

    cloudpickle pickles a function or class by value only if its own module is registered
    (a package covers its submodules), and a module object (`import helper`) likewise; the
    rest travel by reference, and a worker without `directory` on its path cannot import
    them. "Found in directory": the module's top-level package was new too and lives right
    there (`directory/top.py`, `directory/top/`), so neither an installed package that
    happens to lie below it (a virtualenv in the project folder) nor new submodules of a
    package imported earlier (this one, in an editable install) are sent by value.
    """
    directory = directory.resolve()
    own = [
        sys.modules[name]
        for name in sorted(set(sys.modules) - before)
        if sys.modules.get(name) is not None
        and (top := name.partition(".")[0]) not in before
        and top in sys.modules
        and _found_in(sys.modules[top], directory)
    ]
    if own:
        import ray.cloudpickle

        for module in own:
            ray.cloudpickle.register_pickle_by_value(module)


def _found_in(module, directory: pathlib.Path) -> bool:
    """Whether top-level `module` is the source file `directory/NAME.py` or the package
    `directory/NAME/` (a compiled extension cannot travel by value)."""
    name, file = module.__name__, getattr(module, "__file__", None)
    if file is not None:
        return pathlib.Path(file).resolve() in (
            directory / f"{name}.py",
            directory / name / "__init__.py",
        )
    return any(
        pathlib.Path(location).resolve() == directory / name  # a namespace package
        for location in getattr(module, "__path__", ())
    )


def _import_file(path: pathlib.Path, *, spec: str, what: str):
    if not path.is_file():
        raise ValueError(
            f"bad {what} {spec!r}: no file {str(path)!r}; expected {CODE_SPEC_FORMS[what]}"
        )
    name = path.stem
    if not name.isidentifier():
        raise ValueError(
            f"bad {what} {spec!r}: {path.name!r} is not a valid module file name "
            "(letters, digits and underscores)"
        )
    existing = sys.modules.get(name)
    if existing is not None:
        if (
            getattr(existing, "__file__", None)
            and pathlib.Path(existing.__file__).resolve() == path.resolve()
        ):
            return existing
        raise ValueError(
            f"bad {what} {spec!r}: a different module named {name!r} is already "
            "imported; rename the file"
        )
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    directory = path.resolve().parent
    before = set(sys.modules)
    sys.modules[name] = module  # cloudpickle's by-value registration needs it there
    # Its siblings are found while it is imported (as `python path/to/file.py` finds them);
    # afterwards the driver's path is as before, as the workers' is.
    sys.path.insert(0, str(directory))
    try:
        module_spec.loader.exec_module(module)
    except Exception as err:
        del sys.modules[name]
        raise ValueError(
            f"bad {what} {spec!r}: importing {str(path)!r} raised {type(err).__name__}: {err}"
        ) from None
    finally:
        if str(directory) in sys.path:  # unless the module took it off itself
            sys.path.remove(str(directory))
    _register_new_modules(before, directory)
    return module


def load(spec: str, *, what: str) -> Callable[..., Any]:
    """Imports the callable `spec` names and registers the user's module for pickling by value.

    Raises:
      ValueError: one line naming the spec, for a bad form, a module that cannot be
        found or fails to import, a missing attribute, or one that is not callable.
    """
    module_name, name = parse_code_spec(spec, what=what)
    module, own = _import(module_name, spec=spec, what=what)
    if not hasattr(module, name):
        raise ValueError(f"bad {what} {spec!r}: module {module_name!r} has no attribute {name!r}")
    value = getattr(module, name)
    if not callable(value):
        raise ValueError(f"bad {what} {spec!r}: {name!r} is a {type(value).__name__}, not callable")
    if own:
        import ray.cloudpickle

        ray.cloudpickle.register_pickle_by_value(module)
    return value


def absolute_code_spec(spec: str | None) -> str | None:
    """`spec` with a file's path made absolute (`path/to/file.py:name`), as a run records it
    so that its config names the file from any directory; a module's spec, or None, as it is."""
    if spec is None or ":" not in spec:
        return spec
    module, _, name = spec.rpartition(":")
    if not module.endswith(".py"):
        return spec
    return f"{pathlib.Path(module).resolve()}:{name}"


def load_env(env_id: str) -> tuple[str, Any]:
    """`(env_id, registration)` for `--env`: a plain gymnasium id as it is, with no
    registration; for `module:EnvId` or `path/to/file.py:EnvId`, imports the module as
    `--agent`'s are imported (which registers EnvId) and returns the id with the absolute
    path of the user's own module file (so `evaluate` finds it from any directory) and the
    registered gymnasium `EnvSpec`, its entry point the callable itself, for
    `impala_rep.envs.register_env` in the processes that build the env.

    Raises:
      ValueError: one line naming the id, for a module that cannot be found or fails to
        import, or one that registers no such id.
    """
    if ":" not in env_id:
        return env_id, None
    import dataclasses

    import gymnasium

    module_name, _, registered_id = env_id.rpartition(":")  # as envs' `_check_env_id` reads it
    if not module_name or not registered_id:
        raise ValueError(f"bad env {env_id!r}: expected {CODE_SPEC_FORMS['env']}")
    module, own = _import(module_name, spec=env_id, what="env")
    registered = gymnasium.envs.registry.get(registered_id)
    if registered is None:
        raise ValueError(
            f"bad env {env_id!r}: importing {module_name!r} registered no gymnasium id "
            f"{registered_id!r}"
        )
    file = getattr(module, "__file__", None)
    if own and file is not None and pathlib.Path(file).name == f"{module.__name__}.py":
        env_id = f"{pathlib.Path(file).resolve()}:{registered_id}"
    entry_point = registered.entry_point
    if isinstance(entry_point, str):
        entry_point = gymnasium.envs.registration.load_env_creator(entry_point)
    return env_id, dataclasses.replace(registered, entry_point=entry_point)


def agent_builder(
    spec: str,
    *,
    observation_shape: Shape,
    num_actions: int,
    action_distribution: Any = None,
) -> Callable[[], Any]:
    """The zero-argument agent builder `train` wants, from an `--agent module:factory` spec.

    The factory is called as `factory(observation_shape=(...), num_actions=P)` and
    returns a new, unbuilt `Agent`; the learner and every actor process call it once.
    A factory that also takes `action_distribution` is given the env's
    (`impala_rep.distributions`; `num_actions` is then its `num_params`), which an agent
    acting in a `Box` or `MultiDiscrete` space names as its own. Its signature is checked
    here (nothing is built in the driver).
    """
    factory = load(spec, what="agent")
    given = {
        "observation_shape": shape_of(observation_shape),
        "num_actions": int(num_actions),
    }
    try:
        signature = inspect.signature(factory)
    except ValueError:  # no signature to inspect (some builtins): let the call decide
        return functools.partial(factory, **given)
    try:
        signature.bind(**given)
    except TypeError:
        raise ValueError(
            f"bad agent {spec!r}: the factory must accept the keyword arguments "
            "observation_shape and num_actions"
        ) from None
    try:
        signature.bind(**given, action_distribution=action_distribution)
        given["action_distribution"] = action_distribution
    except TypeError:  # a factory for discrete actions only
        pass
    return functools.partial(factory, **given)


def resolve_agent_and_loss(
    *,
    agent_spec: str | None,
    loss_spec: str | None,
    agent: Callable[[], Any] | None,
    loss: Callable[..., Any] | None,
    observation_shape: Shape,
    num_actions: int,
    action_distribution: Any = None,
):
    """`(agent builder or None, loss function or None)` from specs or objects, not both."""
    if agent_spec is not None:
        if agent is not None:
            raise ValueError(f"bad agent {agent_spec!r}: train() also got agent=; give one of them")
        agent = agent_builder(
            agent_spec,
            observation_shape=observation_shape,
            num_actions=num_actions,
            action_distribution=action_distribution,
        )
    if loss_spec is not None:
        if loss is not None:
            raise ValueError(f"bad loss {loss_spec!r}: train() also got loss=; give one of them")
        loss = load(loss_spec, what="loss")
    return agent, loss
