"""Listen addresses: `HOST:PORT` split, and whether a host is loopback (where plain text is allowed).

The server (`mnemosync.server.app`) and the dashboard (`mnemosync.agent.dashboard`) both
refuse plain text off loopback, by the same rule.
"""

from __future__ import annotations

import ipaddress


def split_host_port(listen: str) -> tuple[str, int]:
    """Splits `host:port` (IPv6 hosts in brackets).

    Raises:
        ValueError: not of that form.
    """
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ValueError(f"listen address must be HOST:PORT, got {listen!r}")
    return host.strip("[]"), int(port)


def is_loopback(host: str) -> bool:
    """True for localhost and loopback addresses (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def join_host_port(host: str, port: int) -> str:
    """`host:port`, with an IPv6 host in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
