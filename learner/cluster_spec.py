"""TF_CONFIG for a multi-host learner, from the addresses Ray placed its hosts at.

TensorFlow-free and Ray-free: `learner/learner_group.py` asks each learner host
actor for `host_address()` (its node's IP, as Ray reports it, and a port free
there), collects them in host order and hands every host `tf_config(addresses,
index)`. Nothing is hard-coded: the addresses exist only once Ray has placed
the hosts.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Sequence

__all__ = ["free_port", "tf_config", "set_tf_config"]


def free_port(ip: str) -> int:
    """A TCP port that is free on `ip` now (bound to port 0, then released).

    Another process could take it before TensorFlow binds it; on a learner node
    that window is a few seconds and the group would then fail to start with an
    address-in-use error rather than misbehave.
    """
    with socket.socket(socket.AF_INET6 if ":" in ip else socket.AF_INET) as sock:
        sock.bind((ip, 0))
        return int(sock.getsockname()[1])


def tf_config(addresses: Sequence[str], index: int) -> dict:
    """The TF_CONFIG of worker `index` in a MultiWorkerMirroredStrategy group.

    Args:
      addresses: "HOST:PORT" of every learner host, in host order (host 0 is the
        chief: it publishes weights and writes checkpoints).
      index: this host's position in `addresses`.
    """
    if not addresses:
        raise ValueError("tf_config needs at least one learner host address")
    for address in addresses:
        host, _, port = str(address).rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"bad learner host address {address!r}: expected HOST:PORT")
    if len(set(addresses)) != len(addresses):
        raise ValueError(f"learner host addresses repeat: {list(addresses)}")
    if not 0 <= index < len(addresses):
        raise ValueError(f"bad learner host index {index}: expected 0..{len(addresses) - 1}")
    return {"cluster": {"worker": list(addresses)}, "task": {"type": "worker", "index": index}}


def set_tf_config(environ, addresses: Sequence[str], index: int) -> None:
    """Writes TF_CONFIG into `environ` (os.environ). Must happen before the
    process creates its MultiWorkerMirroredStrategy."""
    environ["TF_CONFIG"] = json.dumps(tf_config(addresses, index))
