"""The distribution installs the component folders under the impala_rep namespace."""

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
MODULES = [
    "impala_rep",
    "impala_rep.config",
    "impala_rep.actors",
    "impala_rep.learner",
    "impala_rep.envs",
    "impala_rep.learner.replicator",
    "impala_rep.vtrace",
    "impala_rep.losses",
]
CHECK = (
    "import importlib, json, sys\n"
    "mods = sys.argv[1:]\n"
    "print(json.dumps({m: importlib.import_module(m).__file__ for m in mods}))\n"
    "from impala_rep import Replicator\n"
)


def _import_from(cwd, env=None):
    proc = subprocess.run(
        [sys.executable, "-c", CHECK, *MODULES],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    import json

    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.launches
def test_installed_package_imports_outside_repo_root(tmp_path):
    files = _import_from(tmp_path)
    assert pathlib.Path(files["impala_rep.actors"]).parent == REPO / "actors"
    assert pathlib.Path(files["impala_rep.learner"]).parent == REPO / "learner"
    assert pathlib.Path(files["impala_rep.envs"]).parent == REPO / "envs"


@pytest.mark.launches
def test_generic_names_do_not_land_top_level(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", "import envs"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0 and "No module named 'envs'" in proc.stderr


@pytest.mark.launches
@pytest.mark.skipif(not os.access(REPO, os.W_OK), reason="needs a writable checkout to build")
def test_non_editable_install_maps_component_folders(tmp_path):
    target = tmp_path / "site"
    # Build from a copy: setuptools writes build/ and egg-info into the source tree.
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    for name in ("impala_rep", "actors", "learner", "envs"):
        shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stderr[-2000:]
    # PYTHONPATH puts the built copy ahead of the editable install of .venv.
    env = dict(os.environ, PYTHONPATH=str(target))
    files = _import_from(tmp_path, env=env)
    for module, path in files.items():
        assert pathlib.Path(path).is_relative_to(target), (module, path)
    assert (target / "impala_rep" / "learner" / "replicator.py").is_file()
    assert not (target / "envs").exists() and not (target / "learner").exists()
