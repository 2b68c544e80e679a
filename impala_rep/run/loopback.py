"""An embedded Ray that listens on loopback only.

Left to itself, a local `ray.init` gives the node the machine's network address
(even when asked for 127.0.0.1: Ray replaces a loopback address with a reachable
one) and its raylet, GCS, workers and driver listen on every interface. Ray's
local-only mode, `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0` (the default on macOS and
Windows, where Ray does not support clusters), keeps the node at 127.0.0.1 and
every server bound to it. Ray reads it once, when `ray` is first imported, so it
is set before that; a process that imported Ray earlier gets a warning instead.
Joining a cluster (`--ray-address`) is left alone.
"""

from __future__ import annotations

import ipaddress
import os
import sys

__all__ = ["keep_embedded_ray_on_loopback", "is_loopback"]

_LOCAL_ONLY = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def keep_embedded_ray_on_loopback() -> bool:
    """Asks Ray for its local-only mode unless `ray` is imported already; whether it could."""
    if "ray" in sys.modules:
        return os.environ.get(_LOCAL_ONLY) == "0"
    os.environ[_LOCAL_ONLY] = "0"
    return True


def is_loopback(address: str) -> bool:
    """Whether an IP address (IPv4, IPv6 or IPv4-mapped IPv6) is a loopback address ("*",
    every interface, is not)."""
    try:
        ip = ipaddress.ip_address(address.strip("[]"))
    except ValueError:  # "*": every interface
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback
