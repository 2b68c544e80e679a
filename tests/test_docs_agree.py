"""The docs agree with each other and with the code.

docs/api.md and docs/custom_agent.md give the same L2 loss example (the code of
examples/custom_agent.py) and the same Agent table (every member of the protocol);
api.md's config table lists every field of the config dataclasses with its
default; the docs' Python examples import only public names; every preset is
documented in the README and in `--preset`'s help.
"""

import ast
import dataclasses
import os
import pathlib
import re
import subprocess
import sys

import pytest

import impala_rep
from impala_rep.config import TrainConfig
from impala_rep.presets import PRESETS

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
API = ROOT / "docs" / "api.md"
CUSTOM = ROOT / "docs" / "custom_agent.md"
EXAMPLE = ROOT / "examples" / "custom_agent.py"
AGENT_TABLE_HEADER = "| member | called by | contract |"


def python_blocks(path: pathlib.Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)


def the_block(path: pathlib.Path, marker: str) -> str:
    blocks = [b for b in python_blocks(path) if marker in b]
    assert len(blocks) == 1, f"{path.name}: expected one python block with {marker!r}, found {len(blocks)}"
    return blocks[0]


def code_lines(source: str) -> list[str]:
    """Non-blank lines with comments dropped and runs of whitespace made one space."""
    lines = (re.sub(r"\s+", " ", line.split("#", 1)[0]).strip() for line in source.splitlines())
    return [line for line in lines if line]


def agent_table(path: pathlib.Path) -> str:
    text = path.read_text()
    start = text.find(AGENT_TABLE_HEADER)
    assert start >= 0, f"{path.name} has no Agent table ({AGENT_TABLE_HEADER})"
    end = text.find("\n\n", start)
    return text[start:end if end >= 0 else len(text)]


# --- the L2 example ---------------------------------------------------------------------

def test_l2_example_is_the_same_in_both_docs():
    api = the_block(API, "def l2_regularised_loss")
    custom = the_block(CUSTOM, "def l2_regularised_loss")
    assert api == custom, "docs/api.md and docs/custom_agent.md give different L2 examples"


def test_l2_example_is_the_code_of_the_runnable_example():
    doc = code_lines(the_block(CUSTOM, "def l2_regularised_loss"))
    tree = ast.parse(EXAMPLE.read_text())
    function = next(node for node in tree.body
                    if isinstance(node, ast.FunctionDef) and node.name == "l2_regularised_loss")
    body = code_lines("\n".join(ast.get_source_segment(EXAMPLE.read_text(), stmt)
                                for stmt in function.body[1:]))  # the docstring dropped
    doc_body = doc[doc.index(next(line for line in doc if line.startswith("def "))) + 1:]
    assert " ".join(doc_body) == " ".join(body), (
        "the docs' l2_regularised_loss differs from examples/custom_agent.py's")


def test_doc_agent_and_l2_loss_meet_the_contracts():
    """custom_agent.md's agent and the L2 loss, as printed, pass the check `train` makes first."""
    from impala_rep.config import LossConfig
    from impala_rep.run.code_check import check_user_code

    namespace: dict = {}
    exec(the_block(CUSTOM, "class BatchNormMLPAgent"), namespace)  # noqa: S102 - our own docs
    exec(the_block(API, "def l2_regularised_loss"), namespace)  # noqa: S102
    agent = namespace["BatchNormMLPAgent"]
    assert isinstance(agent(num_actions=2).non_trainable_variables, list)
    check_user_code(agent_factory=lambda: agent(num_actions=2), loss_fn=namespace["l2_regularised_loss"],
                    agent_is_users=True, agent_spec=None, loss_spec=None, observation_shape=(4,),
                    observation_dtype="float32", num_actions=2, config=LossConfig())


# --- the Agent table ----------------------------------------------------------------------

def test_agent_table_is_the_same_in_both_docs():
    assert agent_table(API) == agent_table(CUSTOM), (
        "docs/api.md and docs/custom_agent.md give different Agent tables")


def test_agent_table_lists_every_protocol_member():
    source = (ROOT / "impala_rep" / "agent.py").read_text()
    protocol = next(node for node in ast.parse(source).body
                    if isinstance(node, ast.ClassDef) and node.name == "Agent")
    members = {node.target.id for node in protocol.body if isinstance(node, ast.AnnAssign)}
    members |= {node.name for node in protocol.body if isinstance(node, ast.FunctionDef)}
    # The optional members agent.py states in comments (read with getattr: the learner's
    # non_trainable_variables, the actors' host_step).
    for optional in ("non_trainable_variables", "host_step"):
        assert f"# Optional: `{optional}" in source
        members.add(optional)
    first_column = " ".join(row.split("|")[1] for row in agent_table(API).splitlines()[2:])
    listed = set(re.findall(r"`([a-z_]+)", first_column))
    assert members <= listed, f"the Agent table misses {sorted(members - listed)}"
    assert listed <= members, f"the Agent table lists {sorted(listed - members)}, not in impala_rep.agent.Agent"


# --- the config table ----------------------------------------------------------------------

def _config_row(group_class: type) -> str:
    rows = [line for line in API.read_text().splitlines()
            if line.startswith(f"| `{group_class.__name__}` |")]
    assert len(rows) == 1, f"docs/api.md: expected one config table row for {group_class.__name__}"
    return rows[0].split("|")[2]


@pytest.mark.parametrize("group", [f.name for f in dataclasses.fields(TrainConfig)])
def test_config_table_lists_every_field_with_its_default(group):
    cls = next(f.type for f in dataclasses.fields(TrainConfig) if f.name == group)
    cls = getattr(impala_rep, cls) if isinstance(cls, str) else cls
    row = _config_row(cls)
    documented = dict(re.findall(r"`([a-z_]+)=([^`]*)`", row))
    fields = {f.name: f for f in dataclasses.fields(cls)}
    assert set(documented) == set(fields), (
        f"docs/api.md's {cls.__name__} row lists {sorted(documented)}, the dataclass has {sorted(fields)}")
    for name, field in fields.items():
        assert ast.literal_eval(documented[name]) == field.default, (
            f"docs/api.md: {cls.__name__}.{name} default {documented[name]}, the code's {field.default!r}")
        key = (field.metadata.get("flag") or "--" + name)[2:].replace("-", "_")
        if key != name:
            assert f"(key `{key}`)" in row, f"docs/api.md: {cls.__name__}.{name} does not name its key {key!r}"


# --- public names and presets ----------------------------------------------------------------

@pytest.mark.parametrize("path", [README, API, CUSTOM], ids=lambda p: p.name)
def test_doc_examples_import_only_public_names(path):
    public = set(impala_rep.__all__)
    for block in python_blocks(path):
        for line in block.splitlines():
            line = line.strip()
            assert not re.match(r"(from|import) impala_rep\.", line), (
                f"{path.name}: {line!r} imports a private module; use `from impala_rep import ...`")
            match = re.match(r"from impala_rep import \(?([\w, ]+)", line)
            if match:
                names = {n.strip() for n in match.group(1).split(",") if n.strip()}
                assert names <= public, f"{path.name}: {sorted(names - public)} are not public names"


def test_every_preset_is_documented():
    flag_row = next(line for line in README.read_text().splitlines() if line.startswith("| `--preset` |"))
    api = API.read_text()
    proc = subprocess.run([sys.executable, "-m", "impala_rep", "train", "--help"], capture_output=True,
                          text=True, timeout=120, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    help_text = re.sub(r"\s+", " ", proc.stdout)
    for name in PRESETS:
        assert f"`{name}`" in flag_row, f"the README's --preset row does not name {name!r}"
        assert f"`{name}`" in api, f"docs/api.md does not name the preset {name!r}"
        assert f"'{name}'" in help_text, f"--preset's help does not name {name!r}"
