"""The public API: every name in `impala_rep.__all__` imports, is documented, and is lazy."""

import os
import pathlib
import subprocess
import sys

import pytest

import impala_rep

API_DOC = pathlib.Path(__file__).resolve().parents[1] / "docs" / "reference" / "api.md"


def test_every_public_name_imports():
    for name in impala_rep.__all__:
        assert getattr(impala_rep, name) is not None, name
    assert set(impala_rep.__all__) <= set(dir(impala_rep))


def test_every_public_name_is_documented():
    text = API_DOC.read_text()
    rendered = {line.rsplit(".", 1)[-1] for line in text.splitlines() if line.startswith("::: ")}
    # Names exported under another name than their own (`_EXPORTS`' (module, attribute) pairs).
    rendered |= {
        name
        for name, target in impala_rep._EXPORTS.items()
        if isinstance(target, tuple) and f"::: {target[0]}.{target[1]}" in text
    }
    missing = [
        name for name in impala_rep.__all__ if name != "__version__" and name not in rendered
    ]
    assert not missing, f"docs/reference/api.md does not render {missing}"


@pytest.mark.launches
def test_import_does_not_import_tensorflow():
    # The CLI checks its arguments (config included) before paying for TensorFlow.
    code = (
        "import sys, impala_rep, impala_rep.config, impala_rep.run.user_code\n"
        "impala_rep.config.TrainConfig.from_keys({'agent': 'm:f', 'loss': 'm.py:g'})\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras', 'ray')))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]"


def test_unknown_name_is_an_attribute_error():
    try:
        _ = impala_rep.NoSuchThing
    except AttributeError as err:
        assert "NoSuchThing" in str(err)
    else:
        raise AssertionError("expected AttributeError")
