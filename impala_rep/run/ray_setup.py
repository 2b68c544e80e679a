"""What the driver asks of Ray before importing it: loopback only, and its signals kept.

Ray reads these settings once, when `ray` is first imported, so `train()` sets
them before anything imports it; a process that imported Ray earlier keeps
Ray's defaults (and, for the loopback one, gets a warning from the launcher).

- Loopback. Left to itself, a local `ray.init` gives the node the machine's
  network address (even when asked for 127.0.0.1: Ray replaces a loopback
  address with a reachable one) and its raylet, GCS, workers and driver listen
  on every interface. Ray's local-only mode, `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`
  (the default on macOS and Windows, where Ray does not support clusters), keeps
  the node at 127.0.0.1 and every server bound to it. Only for an embedded Ray:
  joining a cluster (`--ray-address`) is left alone.
- Signals. While `ray.init` runs, Ray's core worker installs a failure-signal
  handler that aborts the driver on SIGTERM (exit 134, not 143, and no clean
  stop). `RAY_DISABLE_FAILURE_SIGNAL_HANDLER=1` leaves SIGTERM to the driver
  (`impala_rep.run.shutdown`). Ray reads it when `ray` is imported, so the driver
  sets it back to `0` while it starts the embedded node (`WORKER_ENV`): the node's
  processes, and the workers they start, inherit that and keep their crash reports.
"""

from __future__ import annotations

import ipaddress
import os
import sys

__all__ = ["prepare_ray_import", "is_loopback", "WORKER_ENV"]

_LOCAL_ONLY = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
_NO_FAILURE_HANDLER = "RAY_DISABLE_FAILURE_SIGNAL_HANDLER"

# What the workers of an embedded Ray get back (in the environment the node starts with):
# their crash handlers.
WORKER_ENV = {_NO_FAILURE_HANDLER: "0"}


def prepare_ray_import(*, embedded: bool) -> None:
    """Sets the driver's Ray settings (see the module docstring) unless `ray` is imported
    already; `embedded`: Ray will be started here, not joined."""
    if "ray" in sys.modules:
        return
    os.environ[_NO_FAILURE_HANDLER] = "1"
    if embedded:
        os.environ[_LOCAL_ONLY] = "0"


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
