"""Host names in one form, so that JOBFEED_WEBHOOK_HOSTS and a notify_url's host
compare like with like however each was written: lower case, no trailing dot,
international names as their ASCII (punycode) labels, IP addresses as Python
writes them (IPv6 compressed)."""

from __future__ import annotations

import ipaddress
import re
import socket

# A host name's labels (RFC 1123; "_" too, as in some container names).
_LABEL = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)")


def canonical_host(text: str) -> str | None:
    """`text`'s comparable form, or None when it names no host. An IPv4 address
    in any form but dotted decimal (2130706433, 0x7f000001, 0177.0.0.1, 127.1)
    is none either: resolvers read it as an address the list may not show."""
    host = text.removesuffix(".")
    try:
        return ipaddress.ip_address(host).compressed
    except ValueError:
        pass
    try:
        host = host.encode("idna").decode("ascii").lower()
    except UnicodeError:  # an empty or over-long label, or no valid international name
        return None
    if len(host) > 253 or not all(_LABEL.fullmatch(label) for label in host.split(".")):
        return None
    try:
        socket.inet_aton(host)
    except OSError:
        return host
    return None
