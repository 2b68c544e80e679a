"""`impala-rep train`'s flags are the config's fields: one flag per field, its default and
range as the dataclass has them, `none` where a field is optional, one-line refusals naming
the key, and the generated flag reference listing them all."""

import pytest
from in_process_cli import refused_in_process


def _train_help(capsys, *argv):
    from impala_rep.run.cli import parse_args

    with pytest.raises(SystemExit) as stop:
        parse_args(["train", *argv, "--help"])
    assert stop.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("preset", [None, "cartpole", "atari-paper", "atari"])
def test_every_config_field_has_one_flag_and_its_default(capsys, preset):
    import argparse
    import re

    from impala_rep.config import TrainConfig, config_fields
    from impala_rep.config.presets import PRESETS
    from impala_rep.run.cli import parse_args
    from impala_rep.run.flags import add_config_flags, format_value, is_switch

    fields = list(config_fields())
    expected = TrainConfig.from_keys(PRESETS[preset] if preset else {})
    argv = ["train", "--preset", preset] if preset else ["train"]
    # The train parser's options: one per field, plus the hand-written ones.
    usage = _train_help(capsys, *argv).split("\n\n")[0]
    assert set(re.findall(r"\[(--?[a-z-]+)", usage)) == (
        {f.flag for f in fields} | {"-h", "--preset", "--resume", "--config"}
    )
    # Each field's value lands under its key, the preset's value or else the dataclass default.
    parsed = vars(parse_args(argv))
    assert set(parsed) == {f.key for f in fields} | {"command", "preset", "resume", "config"}
    for field in fields:
        assert parsed[field.key] == expected.get(field.key), field.key
        assert type(parsed[field.key]) is type(expected.get(field.key)), field.key
    # ... and its help shows that default.
    actions = add_config_flags(argparse.ArgumentParser(), expected)
    assert set(actions) == {f.key for f in fields}
    for field in fields:
        action = actions[field.key]
        # A switch (bool, or bool | None whose None means auto) has a --no- form.
        negated = ["--no-" + field.flag[2:]] if is_switch(field) else []
        assert action.option_strings == [field.flag, *negated] and action.dest == field.key
        assert action.help.endswith(f"(default: {format_value(expected.get(field.key))})"), (
            field.key
        )


def test_each_flag_reads_back_the_value_its_help_shows():
    from impala_rep.config import TrainConfig, config_fields
    from impala_rep.run.cli import explicit_args
    from impala_rep.run.flags import format_value, is_switch

    default = TrainConfig()
    for field in config_fields():
        value = default.get(field.key)
        if is_switch(field):  # switches, including auto (None) ones
            for given, value in ([field.flag], True), (["--no-" + field.flag[2:]], False):
                assert vars(explicit_args(["train", *given])) == {
                    "command": "train",
                    field.key: value,
                }
            continue
        else:
            given = [field.flag, format_value(value)]
        assert vars(explicit_args(["train", *given])) == {"command": "train", field.key: value}


def _rejects(argv) -> bool:
    from impala_rep.run.cli import parse_args

    try:
        parse_args(argv)
    except SystemExit:
        return True
    return False


def _config_takes(key, value) -> bool:
    from impala_rep.config import TrainConfig

    try:
        TrainConfig.from_keys({key: value})
    except ValueError:
        return False
    return True


def _flag_of(key):
    from impala_rep.config import config_fields

    return {f.key: f.flag for f in config_fields()}[key]


@pytest.mark.parametrize(
    "key, probes",
    [
        ("sticky_actions", [-0.5, 0.0, 0.5, 0.99, 1.0, 1.5]),
        ("hidden_sizes", [(0,), (1,), (32, 16), (32, 0), (-1,)]),
    ],
)
def test_flag_range_checks_agree_with_the_dataclasses(key, probes, capsys):
    """The few ranges a flag checks itself (for a message naming the flag) are the
    dataclass's: a value passes the flag exactly when the config takes it."""
    from impala_rep.run.flags import format_value

    for value in probes:
        rejected = _rejects(["train", _flag_of(key), format_value(value)])
        assert rejected == (not _config_takes(key, value)), (key, value)
    capsys.readouterr()


def test_every_integer_flag_takes_what_its_field_takes(capsys):
    """Integer fields are counts (positive) unless flags.py lists them; this fails for a
    new integer field whose range is another."""
    from impala_rep.config import TrainConfig, config_fields

    default = TrainConfig()
    integers = [
        f.key
        for f in config_fields()
        if isinstance(default.get(f.key), int) and not isinstance(default.get(f.key), bool)
    ]
    assert "num_actors" in integers and "seed" in integers
    for key in integers:
        for value in (-1, 0, 1, 2):
            rejected = _rejects(["train", _flag_of(key), str(value)])
            assert rejected == (not _config_takes(key, value)), (key, value)
    capsys.readouterr()


def test_none_clears_optional_fields():
    from impala_rep.run.cli import config_from_args, parse_args

    config = config_from_args(
        parse_args(
            [
                "train",
                "--max-grad-norm",
                "none",
                "--clip-rho-threshold",
                "none",
                "--clip-pg-rho-threshold",
                "none",
                "--sticky-actions",
                "none",
                "--ray-address",
                "none",
            ]
        )
    )
    assert config.optimizer.max_grad_norm is None
    assert config.loss.clip_rho_threshold is None and config.loss.clip_pg_rho_threshold is None
    assert config.env.sticky_actions is None and config.run.ray_address is None
    assert (
        config_from_args(parse_args(["train", "--max-grad-norm", "0.5"])).optimizer.max_grad_norm
        == 0.5
    )


def test_none_is_refused_where_a_value_is_required(capsys):
    from impala_rep.run.cli import parse_args

    with pytest.raises(SystemExit) as stop:
        parse_args(["train", "--learning-rate", "none"])
    assert stop.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.endswith("argument --learning-rate: expected a number, got 'none'"), last


def test_hidden_sizes_and_the_new_flags_reach_the_config():
    from impala_rep.run.cli import config_from_args, parse_args

    config = config_from_args(
        parse_args(
            [
                "train",
                "--hidden-sizes",
                "32,16",
                "--lambda",
                "0.95",
                "--rmsprop-momentum",
                "0.5",
                "--launcher",
                "local",
                "--report-every",
                "0.5",
                "--checkpoint-every",
                "30",
            ]
        )
    )
    assert config.agent.hidden_sizes == (32, 16)
    assert config.loss.lambda_ == 0.95 and config.optimizer.rmsprop_momentum == 0.5
    assert config.run.launcher == "local" and config.run.report_every_s == 0.5
    assert config.learner.checkpoint_every_s == 30.0
    assert config_from_args(parse_args(["train", "--hidden-sizes", "8"])).agent.hidden_sizes == (8,)
    value = parse_args(["train", "--value-hidden-sizes", "256,128"])
    assert config_from_args(value).agent.value_hidden_sizes == (256, 128)


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--hidden-sizes", "0"],
            "argument --hidden-sizes: expected comma-separated positive integers "
            "such as 64,64, got 0",
        ),
        (
            ["--hidden-sizes", "32,,16"],
            "expected comma-separated positive integers such as 64,64, got '32,,16'",
        ),
        (["--rmsprop-momentum", "1"], "bad rmsprop_momentum 1.0: must be in [0, 1)"),
        (["--learning-rate", "0"], "bad learning_rate 0.0: must be a positive number"),
        (["--learning-rate", "inf"], "bad learning_rate inf: must be a positive number"),
        (["--seed", "1.5"], "argument --seed: expected an integer in [0, 2**32), got '1.5'"),
        (["--learner-hosts", "3"], "bad batch_size 32: must split evenly over 3 learner hosts"),
        (["--agent", "nocolon"], "bad agent 'nocolon'"),
        (["--target-kl", "0"], "bad target_kl 0.0: must be > 0, or None"),
        (
            ["--target-kl", "0.02", "--loss", "my_loss:fn"],
            "bad target_kl 0.02: needs the built-in loss's kl metric; leave it unset with --loss",
        ),
    ],
)
def test_config_misuse_is_one_line_naming_the_key(argv, message, capsys):
    last = refused_in_process(["train", *argv], capsys)
    assert last.startswith("impala-rep") and message in last, last


def test_the_flag_reference_lists_every_train_flag():
    import pathlib
    import re

    from impala_rep.config import config_fields

    reference = (pathlib.Path(__file__).parent.parent / "docs" / "reference" / "cli.md").read_text()
    table = "\n".join(line for line in reference.splitlines() if line.startswith("| `--"))
    listed = set(re.findall(r"^\| `(--[a-z-]+)`", table, re.M))
    assert {f.flag for f in config_fields()} | {"--preset", "--resume"} <= listed
