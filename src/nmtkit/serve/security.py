"""HTTP hardening for a server that users put behind proxies or open to a network.

- :class:`HostAllowList`: a request whose ``Host`` header names no allowed host gets a 400.
  A web page on another site can make a browser send requests to ``127.0.0.1:8000`` under a
  name it controls (DNS rebinding); checking ``Host`` refuses those.
- :data:`SECURITY_HEADERS` on every response: no MIME sniffing, no framing by other sites,
  and a Content-Security-Policy that lets the page load only its own script and style.
- Start-up checks of ``nmtkit serve``'s options, run before the model is loaded (each raises
  ``ValueError`` naming the option): :func:`parse_allowed_hosts`, :func:`check_keep_alive`,
  :func:`check_bindable`.
"""

from __future__ import annotations

import errno
import math
import socket
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..errors import UserError

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

SECURITY_HEADERS = {
    b"x-content-type-options": b"nosniff",
    b"x-frame-options": b"DENY",
    b"referrer-policy": b"no-referrer",
    b"content-security-policy": (b"default-src 'self'; script-src 'self'; "
                                 b"style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
                                 b"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; "
                                 b"form-action 'self'"),
}

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


def default_allowed_hosts(bind: str) -> list[str]:
    """The bind address and the loopback names (``0.0.0.0``/``::`` bind every address: then
    the operator must name the public host names with ``--allowed-hosts``)."""
    hosts = list(LOCAL_HOSTS)
    if bind not in ("0.0.0.0", "::", "") and bind not in hosts:
        hosts.append(bind)
    return hosts


MAX_KEEP_ALIVE_S = 3600.0
"""Longest ``--timeout-keep-alive``: an idle connection held longer only ties up the server."""


def parse_allowed_hosts(text: str) -> list[str]:
    """``--allowed-hosts`` (``"example.org,127.0.0.1"``; ``"*"``: any) -> the host names,
    lowercased. ``ValueError`` for an empty list or entry (``","``, ``"a,,b"``), or an entry
    that no ``Host`` header could match (a port, brackets, spaces): such a server would
    answer every request with a 400."""
    hosts = [h.strip().lower() for h in text.split(",")]
    if not any(hosts):
        raise UserError(f"--allowed-hosts names no host, got {text!r}: give host names, "
                         "comma-separated ('*' = any)")
    for h in hosts:
        if not h:
            raise UserError(f"--allowed-hosts has an empty host name in {text!r}")
        if any(c.isspace() for c in h) or host_name(h) != h or "/" in h:
            raise UserError(f"--allowed-hosts: {h!r} is not a host name: give names or "
                             "addresses without scheme, port or brackets (e.g. example.org, ::1)")
    return hosts


def check_keep_alive(seconds: float) -> float:
    """``--timeout-keep-alive``, checked: a finite number of seconds in (0, 3600]."""
    if (isinstance(seconds, bool) or not isinstance(seconds, (int, float))
            or not math.isfinite(seconds) or not 0 < seconds <= MAX_KEEP_ALIVE_S):
        raise UserError(f"--timeout-keep-alive must be a finite number > 0 and "
                         f"<= {MAX_KEEP_ALIVE_S:g} (seconds), got {seconds!r}")
    return float(seconds)


def check_bindable(host: str, port: int) -> None:
    """Raise ``ValueError`` (naming ``host``, ``port`` and why) unless the server could listen
    on ``host:port`` now: binds, as uvicorn (asyncio's ``create_server``) would, a socket with
    ``SO_REUSEADDR`` to each address ``host`` resolves to, then closes them. Port 0 (any free
    port) never conflicts, but its host is still checked. Another process may still take the
    port between this check and the server's start."""
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise UserError(f"cannot listen on {where}: port out of range 0-65535")
    try:
        infos = socket.getaddrinfo(host or None, port, socket.AF_UNSPEC, socket.SOCK_STREAM,
                                   0, socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as e:
        reason = getattr(e, "strerror", None) or str(e)
        raise UserError(f"cannot listen on {where}: cannot resolve host {host!r} ({reason}); "
                         "check --host") from None
    bound: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            bound.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == getattr(socket, "AF_INET6", None) and hasattr(socket, "IPPROTO_IPV6"):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
    except OSError as e:
        reasons = {errno.EADDRINUSE: "address already in use (another server there? choose "
                                     "another --port, or 0 for any free port)",
                   errno.EADDRNOTAVAIL: "address not available on this machine (check --host)",
                   errno.EACCES: "permission denied (ports below 1024 need privileges)"}
        reason = reasons.get(e.errno or -1, e.strerror or str(e))
        raise UserError(f"cannot listen on {where}: {reason}") from None
    finally:
        for sock in bound:
            sock.close()


def host_name(header: str) -> str:
    """``example.org:8000`` -> ``example.org``; ``[::1]:8000`` -> ``::1``; lowercased."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


class HostAllowList:
    """ASGI middleware: refuse requests whose ``Host`` is not allowed (``*`` allows any),
    and add :data:`SECURITY_HEADERS` to every response."""

    def __init__(self, app: ASGIApp, allowed_hosts: Iterable[str] | None) -> None:
        self.app = app
        hosts = None if allowed_hosts is None else {h.strip().lower() for h in allowed_hosts}
        self.allowed = None if hosts is None or "*" in hosts else hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {k.lower() for k, _ in message.get("headers", [])}
                extra = [(k, v) for k, v in SECURITY_HEADERS.items() if k not in present]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        if self.allowed is not None:
            host = dict(scope.get("headers") or []).get(b"host", b"").decode("latin-1")
            if host_name(host) not in self.allowed:
                body = b'{"detail":"invalid Host header"}'
                await send_with_headers({"type": "http.response.start", "status": 400,
                                         "headers": [(b"content-type", b"application/json"),
                                                     (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        return await self.app(scope, receive, send_with_headers)
