"""Reading a run's config.json, whichever version of the project wrote it.

`TrainConfig.from_json` turns what `flat_keys_of` returns into a config. Two older
layouts are read: the flat one (one object of keys, before the config was grouped)
and grouped ones that lack fields added since. A field added later takes its
default, except where that default is not what a run without the field did
(`BEFORE_THE_FIELD`): a resumed older run keeps behaving as it did.

It is given the config's fields (`impala_rep.config.schema.config_fields`) rather than
importing them, so the schema can read config.json with it and no import goes in a circle.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from impala_rep.config.validation import ConfigField

__all__ = ["flat_keys_of", "BEFORE_THE_FIELD"]

# Fields added after the first config.json, with the value that means what a run without
# them did, where that is not their default.
BEFORE_THE_FIELD = {
    "normalize_rewards": False,
    "scale_observations": False,
    "passes": 1,
    "surrogate_clip": None,
    "kl_cost": 0.0,
    "normalize_advantages": False,
    "rnd_cost": 0.0,
    "rnd_step_costs_only": False,
    "learner_xla": False,
    "learner_autograph": True,
    "normalize_observations": False,
    "separate_value_network": False,
    "observation_nests": False,
    "lambda": 1.0,  # auto since; a run's config.json always held its value
    "initial_log_std": 0.0,
}

# Keys of the flat config.json before the config was grouped, where they differ.
_RENAMED_KEYS = {"checkpoint_every_s": "checkpoint_every", "report_every_s": "report_every"}


def flat_keys_of(data: Mapping[str, Any], fields: Iterable[ConfigField]) -> dict[str, Any]:
    """`{key: value}` (the config's keys, as flags and presets use them) from a config.json's
    contents, given every field of this version's config; ValueError naming any field it does
    not know."""
    fields = list(fields)
    groups = {f.group for f in fields}
    if all(isinstance(data.get(group, {}), Mapping) for group in groups) and set(data) <= groups:
        flat = {}
        for group, values in data.items():
            names = {f.name: f.key for f in fields if f.group == group}
            unknown = sorted(set(values) - set(names))
            if unknown:
                raise ValueError(
                    f"unknown config fields {', '.join(f'{group}.{u}' for u in unknown)}"
                )
            flat.update({names[name]: value for name, value in values.items()})
    else:  # keys of the flat config, two of which had another name then
        flat = {_RENAMED_KEYS.get(key, key): value for key, value in data.items()}
    unknown = sorted(set(flat) - {f.key for f in fields})
    if unknown:
        raise ValueError(f"unknown config fields {', '.join(unknown)}")
    flat = {**{key: value for key, value in BEFORE_THE_FIELD.items() if key not in flat}, **flat}
    # JSON has lists, the config tuples (hidden_sizes, observation_keys).
    return {key: tuple(v) if isinstance(v, list) else v for key, v in flat.items()}
