"""Parsing the Replicator's device specs ("auto", "cpu:2", "gpu", ...).

Kept free of TensorFlow so the command line can check its flags without
paying for a TensorFlow import.
"""

from __future__ import annotations

import dataclasses
import re

__all__ = ["DeviceSpec", "parse_devices", "ALLOWED_SPECS"]

ALLOWED_SPECS = '"auto", "cpu", "cpu:N", "gpu", "gpu:N" or "tpu" (N a positive integer)'
_SPEC_RE = re.compile(r"^(auto|cpu|gpu|tpu)(?::(\d+))?$")


@dataclasses.dataclass(frozen=True)
class DeviceSpec:
    """A parsed `devices` string: the device kind and how many (None = all there are)."""

    kind: str  # "auto" | "cpu" | "gpu" | "tpu"
    count: int | None = None


def parse_devices(spec: str) -> DeviceSpec:
    """Parses a device spec such as "auto", "cpu:2" or "gpu:4".

    Raises:
      ValueError: naming the bad spec and what is allowed.
    """
    text = spec.strip().lower() if isinstance(spec, str) else None
    match = _SPEC_RE.match(text) if text is not None else None
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
