"""The docs: the site builds strictly, the generated pages are the code's, and the README and
guides state current facts (history lives in the notebook and the changelog)."""

import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

import impala_rep
from impala_rep.config import config_fields
from impala_rep.config.presets import PRESETS

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
# The pages a user reads for current facts: no dates, commits, times or machine diaries.
USER_PAGES = [
    README,
    DOCS / "index.md",
    DOCS / "getting-started.md",
    *sorted((DOCS / "guide").glob("*.md")),
    *sorted((DOCS / "reference").glob("*.md")),
]
_ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")


def _run(*argv: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        list(argv), cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=_ENV
    )


@pytest.mark.launches
def test_generated_pages_are_what_the_code_generates():
    """`make docs-check`: the reference, the results page and the README's table."""
    proc = _run(sys.executable, "docs/generate.py", "--check")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]


@pytest.mark.skipif(
    shutil.which("mkdocs", path=os.path.dirname(sys.executable)) is None,
    reason="the docs extra (mkdocs) is not installed",
)
@pytest.mark.launches
def test_the_site_builds_strictly(tmp_path):
    """`make docs`: a broken link, anchor or included file fails the build."""
    mkdocs = os.path.join(os.path.dirname(sys.executable), "mkdocs")
    proc = _run(mkdocs, "build", "--strict", "--quiet", "--site-dir", str(tmp_path / "site"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (tmp_path / "site" / "reference" / "cli" / "index.html").is_file()


def test_readme_is_short():
    lines = README.read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; keep it to 250"


_HISTORY = [
    (re.compile(r"\b20\d\d-\d\d-\d\d\b"), "a date"),
    (re.compile(r"\b\d\d:\d\d UTC\b|\bUTC\b"), "a UTC time"),
    (re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b"), "a commit hash"),
    (re.compile(r"\bsessions?\b|\b(?:this|the|another|a slow|a fast) box\b", re.I), "a diary word"),
    (re.compile(r"\bissue \d+\b", re.I), "an issue number"),
]


@pytest.mark.parametrize("page", USER_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_user_pages_hold_no_history(page):
    text = page.read_text()
    for pattern, what in _HISTORY:
        match = pattern.search(text)
        assert match is None, (
            f"{page.relative_to(ROOT)} holds {what} ({match.group(0)!r}): "
            "history goes in docs/notebook.md or CHANGELOG.md"
        )


def test_headings_are_short():
    """Short headings keep their anchors when a figure or a date would change."""
    for page in USER_PAGES:
        prose = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)  # code fences out
        for line in prose.splitlines():
            if re.match(r"#+ ", line):
                assert not re.search(r"\d{3}", line) and len(line) <= 70, (
                    f"{page.relative_to(ROOT)}: heading {line!r} holds a figure or is long"
                )


def test_cli_reference_lists_every_flag_preset_value_and_auto_rule():
    from impala_rep.config.auto import AUTO_RULES
    from impala_rep.run.resume import LOCKED_KEYS

    text = (DOCS / "reference" / "cli.md").read_text()
    for field in config_fields():
        assert f"| `{field.flag}` |" in text, f"the CLI reference misses {field.flag}"
    for flag in ("--preset", "--resume", "--episodes", "--json", "--devices"):
        assert f"`{flag}`" in text, flag
    for rule in AUTO_RULES:
        assert rule.rule in text, f"the CLI reference misses how {rule.key} resolves"
    for name, values in PRESETS.items():
        for key in values:
            assert f"{name}: `" in text, f"the CLI reference misses preset {name}'s {key}"
    rows = {
        line.split("|")[1].strip(): line for line in text.splitlines() if line.startswith("| `--")
    }
    for key in LOCKED_KEYS:
        flag = next(f.flag for f in config_fields() if f.key == key)
        assert "*On resume:* locked" in rows[f"`{flag}`"], f"{flag} is locked on resume"


@pytest.mark.launches
def test_train_help_groups_flags_by_what_they_configure():
    from impala_rep.run.flags import GROUP_TITLES

    proc = _run(sys.executable, "-m", "impala_rep", "train", "--help", timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    sections = {}
    for block in re.split(r"\n(?=\S)", proc.stdout):
        title, _, body = block.partition(":\n")
        sections[title.strip()] = body
    for field in config_fields():
        title = GROUP_TITLES[field.group]
        assert title in sections, f"train --help has no {title!r} group"
        assert re.search(rf"^\s+{re.escape(field.flag)}\b", sections[title], re.M), (
            f"{field.flag} is not under {title!r}"
        )
    for name in PRESETS:
        assert f"'{name}'" in sections["presets and resume"], name


@pytest.mark.parametrize(
    "path", [README, *sorted(DOCS.rglob("*.md"))], ids=lambda p: str(p.relative_to(ROOT))
)
def test_doc_examples_import_only_public_names(path):
    public = set(impala_rep.__all__)
    for block in re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S):
        for line in block.splitlines():
            line = line.strip()
            assert not re.match(r"(from|import) impala_rep\.", line), (
                f"{path.name}: {line!r} imports a private module; use `from impala_rep import ...`"
            )
            match = re.match(r"from impala_rep import \(?([\w, ]+)", line)
            if match:
                names = {n.strip() for n in match.group(1).split(",") if n.strip()}
                assert names <= public, (
                    f"{path.name}: {sorted(names - public)} are not public names"
                )


@pytest.mark.parametrize(
    "folder", ["impala_rep", "actors", "learner", "envs", "examples", "benchmarks"]
)
def test_source_says_why_not_when(folder):
    """Comments and docstrings hold no dates, issue numbers or diaries: a measured choice names
    its notebook entry instead."""
    for path in sorted((ROOT / folder).rglob("*.py")):
        text = path.read_text()
        for pattern, what in (_HISTORY[0], _HISTORY[1], _HISTORY[4]):
            match = pattern.search(text)
            assert match is None, (
                f"{path.relative_to(ROOT)} holds {what} ({match.group(0)!r}); "
                "say why, and name the docs/notebook.md entry"
            )
