"""HTTP hardening for a server that users put behind proxies or open to a network.

- :class:`HostAllowList`: a request whose ``Host`` header names no allowed host gets a 400.
  A web page on another site can make a browser send requests to ``127.0.0.1:8000`` under a
  name it controls (DNS rebinding); checking ``Host`` refuses those.
- :data:`SECURITY_HEADERS` on every response: no MIME sniffing, no framing by other sites,
  and a Content-Security-Policy that lets the page load only its own script and style.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

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
