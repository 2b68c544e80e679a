"""Parsing the Replicator's device specs ("auto", "cpu:2", "gpu", ...).

Kept free of TensorFlow so the command line can check its flags without
paying for a TensorFlow import. `tpu_resolver_args` (which TPU a "tpu" spec
means) lives here for the same reason, and so that it is testable without a TPU.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

__all__ = ["DeviceSpec", "parse_devices", "ALLOWED_SPECS", "tpu_resolver_args"]

ALLOWED_SPECS = (
    '"auto", "cpu", "cpu:N", "gpu", "gpu:N", "tpu" or "tpu:NAME" (N a positive '
    "integer, NAME a TPU name or grpc:// address)"
)
_SPEC_RE = re.compile(r"^(auto|cpu|gpu|tpu)(?::(\d+))?$")
# A TPU name as Cloud TPU spells it, "local" (a TPU VM), or a grpc://HOST:PORT address.
_TPU_NAME_RE = re.compile(r"^(?i:tpu):((?:grpc://)?[A-Za-z0-9][A-Za-z0-9._:/-]*)$")


@dataclasses.dataclass(frozen=True)
class DeviceSpec:
    """A parsed `devices` string: the device kind and how many (None = all there are)."""

    kind: str  # "auto" | "cpu" | "gpu" | "tpu"
    count: int | None = None
    tpu_name: str | None = None  # "tpu:NAME" only


def parse_devices(spec: str) -> DeviceSpec:
    """Parses a device spec such as "auto", "cpu:2" or "gpu:4".

    Raises:
      ValueError: naming the bad spec and what is allowed.
    """
    text = spec.strip().lower() if isinstance(spec, str) else None
    match = _SPEC_RE.match(text) if text is not None else None
    if match is None and text is not None and text.startswith("tpu:"):
        named = _TPU_NAME_RE.match(spec.strip())
        if named is not None and not named.group(1).isdigit():
            return DeviceSpec("tpu", None, named.group(1))  # names keep their case
    if match is None:
        raise ValueError(f"bad device spec {spec!r}: expected {ALLOWED_SPECS}")
    kind, count = match.group(1), match.group(2)
    if count is not None:
        if kind in ("auto", "tpu"):
            raise ValueError(
                f"bad device spec {spec!r}: {kind!r} takes no count; expected {ALLOWED_SPECS}"
            )
        if int(count) < 1:
            raise ValueError(f"bad device spec {spec!r}: N must be >= 1; expected {ALLOWED_SPECS}")
        return DeviceSpec(kind, int(count))
    return DeviceSpec(kind, 1 if kind == "cpu" else None)


def tpu_resolver_args(spec: DeviceSpec, environ: Mapping[str, str]) -> dict[str, str]:
    """Keyword arguments for `tf.distribute.cluster_resolver.TPUClusterResolver`.

    Which TPU a "tpu" spec means, in order: the NAME of "tpu:NAME"; else the
    TPU_NAME environment variable (what Cloud TPU tooling sets); else "local",
    the TPU attached to this VM (a Cloud TPU VM). Never None: with no name the
    resolver would query the GCE metadata server, a network probe that fails
    slowly anywhere else.
    """
    if spec.kind != "tpu":
        raise ValueError(f"bad device spec kind {spec.kind!r}: only 'tpu' has a TPU resolver")
    name = spec.tpu_name or environ.get("TPU_NAME", "").strip() or "local"
    return {"tpu": name}
