"""Free TCP ports for servers the tests start themselves.

Ports come from below Linux's ephemeral range (32768-60999 by default): a port
picked there can be taken by any outgoing connection before the server binds
it, which made a dev server fail to start once in a full run.
"""

from __future__ import annotations

import random
import socket

LOW, HIGH = 20000, 32000


def free_port() -> int:
    """A port in [20000, 32000) that nothing listens on right now."""
    for _ in range(200):
        port = random.randrange(LOW, HIGH)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in [{LOW}, {HIGH})")
