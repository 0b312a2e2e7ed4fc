"""systemd's readiness protocol (sd_notify), without a dependency.

With `Type=notify`, systemd starts dependent units only once the broker says
`READY=1`, i.e. after recovery and with both listeners bound, and knows a stop is
under way from `STOPPING=1`. Outside systemd `NOTIFY_SOCKET` is unset and every call
does nothing.
"""

from __future__ import annotations

import os
import socket

from broker.logging import get_logger

log = get_logger(component="sdnotify")


def notify(state: str) -> bool:
    """Send `state` (e.g. "READY=1") to $NOTIFY_SOCKET; False when there is none."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):  # abstract namespace socket
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.sendto(state.encode(), address)
    except OSError as exc:
        log.warning("sd_notify_failed", socket=address, error=str(exc))
        return False
    return True
