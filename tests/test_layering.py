"""The package layers show in the imports: the algorithm core imports no other layer, and the
layers (core, learner, actors, envs, run) import each other without a cycle."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
# Source folder -> the package it installs as (pyproject's package-dir).
FOLDERS = {
    "impala_rep": "impala_rep",
    "learner": "impala_rep.learner",
    "actors": "impala_rep.actors",
    "envs": "impala_rep.envs",
}
LAYERS = ("run", "learner", "actors", "envs")


def _modules():
    """(module name, path) of every installed source module."""
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            yield ".".join((package, *parts)), path


def _layer(module: str) -> str | None:
    """core, run, learner, actors, envs; None outside impala_rep."""
    parts = module.split(".")
    if parts[0] != "impala_rep":
        return None
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else "core"


def _imports(path: pathlib.Path, module: str) -> set[str]:
    """Every module `path` imports, at the top or inside functions (lazy imports count)."""
    package = module.rsplit(".", 1)[0] if path.name != "__init__.py" else module
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1]
                    + ([base] if base else [])
                )
            # `from impala_rep import run` imports a subpackage; `from x import name` a name.
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def _layer_graph() -> dict[str, dict[str, set[str]]]:
    """layer -> imported layer -> the modules that import it."""
    known = {name for name, _ in _modules()}
    graph: dict[str, dict[str, set[str]]] = {}
    for module, path in _modules():
        if module == "impala_rep" or module == "impala_rep.__main__":
            continue  # the public facade (lazy re-exports) and the CLI entry point
        source = _layer(module)
        for imported in _imports(path, module):
            if imported not in known:
                continue
            target = _layer(imported)
            if target is not None and target != source:
                graph.setdefault(source, {}).setdefault(target, set()).add(module)
    return graph


def test_the_algorithm_core_imports_no_other_layer():
    graph = _layer_graph()
    assert graph.get("core", {}) == {}, graph.get("core")


def test_learner_actors_and_envs_never_import_the_run_layer():
    graph = _layer_graph()
    offenders = {layer: graph.get(layer, {}).get("run") for layer in ("learner", "actors", "envs")}
    assert not any(offenders.values()), offenders


def test_the_layers_import_each_other_without_a_cycle():
    graph = _layer_graph()
    edges = {source: set(targets) for source, targets in graph.items()}

    def cycle_from(node, path):
        for nxt in sorted(edges.get(node, ())):
            if nxt in path:
                return path[path.index(nxt) :] + [nxt]
            found = cycle_from(nxt, path + [nxt])
            if found:
                return found
        return None

    for layer in edges:
        cycle = cycle_from(layer, [layer])
        assert cycle is None, " -> ".join(cycle) + f" ({graph})"


def test_the_layer_walk_sees_lazy_and_relative_imports(tmp_path):
    source = tmp_path / "mod.py"
    source.write_text(
        "def f():\n    from impala_rep.run import training\n    from . import vtrace\n"
    )
    assert {
        "impala_rep.run",
        "impala_rep.run.training",
        "impala_rep",
        "impala_rep.vtrace",
    } <= _imports(source, "impala_rep.mod")
