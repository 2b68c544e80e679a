"""Which TPU a "tpu" device spec asks the TPUClusterResolver for: decided without TensorFlow,
so it is tested here without a TPU (nothing below touches the network)."""

import pytest

from impala_rep.devices import DeviceSpec, parse_devices, tpu_resolver_args


@pytest.mark.parametrize(
    "spec, name",
    [
        ("tpu:my-tpu", "my-tpu"),
        ("tpu:grpc://10.0.0.2:8470", "grpc://10.0.0.2:8470"),
        ("tpu:local", "local"),
        ("TPU:Pod-Slice_1", "Pod-Slice_1"),  # the name keeps its case
    ],
)
def test_tpu_name_in_the_spec(spec, name):
    parsed = parse_devices(spec)
    assert parsed == DeviceSpec("tpu", None, name)
    assert tpu_resolver_args(parsed, {"TPU_NAME": "other"}) == {"tpu": name}  # the spec wins


def test_tpu_name_from_the_environment_then_local():
    parsed = parse_devices("tpu")
    assert tpu_resolver_args(parsed, {"TPU_NAME": "env-tpu"}) == {"tpu": "env-tpu"}
    # No name anywhere: the TPU VM's own, never the resolver's metadata-server lookup.
    assert tpu_resolver_args(parsed, {}) == {"tpu": "local"}
    assert tpu_resolver_args(parsed, {"TPU_NAME": "  "}) == {"tpu": "local"}


@pytest.mark.parametrize("spec", ["tpu:2", "tpu:", "tpu: x", "tpu:-x", "gpu:name"])
def test_bad_tpu_specs(spec):
    with pytest.raises(ValueError, match="bad device spec"):
        parse_devices(spec)


def test_only_tpu_specs_have_a_resolver():
    with pytest.raises(ValueError, match="only 'tpu'"):
        tpu_resolver_args(parse_devices("gpu"), {})
