"""URLs given on the command line (`build --model-base`, `regress --connect`, `--advertise`, `--app-url`), read
without a traceback: urlsplit raises on an unclosed IPv6 bracket, and a port beyond 65535 only when it is asked."""

from __future__ import annotations

import ipaddress
import re
import urllib.parse

# A DNS name as a Content-Security-Policy host source takes it: ASCII labels of letters, digits and inner hyphens.
HOST_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")


def split(text: str) -> tuple[urllib.parse.SplitResult | None, str | None]:
    """(the parts of `text`, None), or (None, why it is no URL)."""
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in text):
        return None, "contains a space or a control character"
    try:
        parts = urllib.parse.urlsplit(text)
        port = parts.port
    except ValueError as exc:  # "Invalid IPv6 URL", "Port out of range 0-65535", "Port could not be cast ..."
        return None, f"is not a URL ({exc})"
    if port == 0:
        return None, "names port 0, which no server listens on"
    return parts, None


def host_problem(parts: urllib.parse.SplitResult) -> str | None:
    """Why the host of `parts` is not one a browser fetches from and a CSP source names, or None: no user name or
    password (fetch refuses URLs with credentials), a DNS name of ASCII letters, digits and hyphens, or an IP
    address."""
    if "@" in parts.netloc:
        return "carries a user name or password (user:pw@host), which browsers refuse to fetch with"
    host = parts.hostname or ""
    if parts.netloc.startswith("["):
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return f"has the host [{host}], which is no IPv6 address"
        return None
    if not host:
        return "names no host"
    if not all(HOST_LABEL.fullmatch(label) for label in host.removesuffix(".").split(".")):
        return (
            f"has the host {host!r}: a host is ASCII letters, digits, '-' and '.' (an international name in its "
            "xn-- form)"
        )
    return None
