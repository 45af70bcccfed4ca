"""The request guard (host side): what every HTTP request must satisfy before a route sees it.

Owns: `GuardPolicy` (the server's security and size settings) and `RequestGuard`, a pure ASGI
middleware around the app. In order, for each request:

    Host header not in the allow-list                          -> 403 (DNS rebinding)
    no `Authorization: Bearer KEY` (an API key is set)         -> 401  (/health exempt; /metrics unless public)
    POST whose Content-Type is not application/json            -> 415  (a web page's simple request)
    POST body past `max_request_bytes`                         -> 413  (by Content-Length before any byte
                                                                        is read, else while reading)
    any exception the app lets out before its response starts  -> 500 JSON, one log line, no traceback

The body is read here (at most `max_request_bytes`) and handed to the app whole, so a route never
reads an unbounded body. Error bodies are the OpenAI error shape; `param` names the header or `body`.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import traceback
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass
from typing import Any

from helios.errors import HeliosError

log = logging.getLogger("helios.server")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# TGI's payload limit is 2,000,000 bytes; a prompt that fills a 128k-token context is about 500 kB.
DEFAULT_MAX_REQUEST_BYTES = 2 * 1024 * 1024
UNAUTHENTICATED_PATHS = frozenset({"/health"})


class InvalidPolicy(HeliosError):
    """A server security or size option is out of range."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def default_allowed_hosts(bound: str) -> frozenset[str] | None:
    """Bound to loopback: the bound address and `localhost` (a foreign Host header is a rebinding
    attempt). Bound elsewhere: any (the names clients use are not known here; pass --allowed-host)."""
    if not is_loopback(bound):
        return None
    return frozenset({bound.strip("[]").lower(), "localhost"})


@dataclass(frozen=True, slots=True)
class GuardPolicy:
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    api_key: str | None = None  # bearer token required on every endpoint but /health (None: none)
    allowed_hosts: frozenset[str] | None = None  # Host header names accepted, without port (None: any)
    public_metrics: bool = False  # /metrics without the API key

    def __post_init__(self) -> None:
        if self.max_request_bytes < 1024:
            raise InvalidPolicy(f"--max-request-bytes must be at least 1024, got {self.max_request_bytes}")
        if self.api_key is not None and (not self.api_key or not self.api_key.isprintable() or " " in self.api_key):
            raise InvalidPolicy("the API key must be a non-empty token of printable characters without spaces")
        if self.allowed_hosts is not None:
            object.__setattr__(self, "allowed_hosts", frozenset(h.strip("[]").lower() for h in self.allowed_hosts))

    @classmethod
    def for_address(cls, host: str, *, allowed_hosts: Iterable[str] = (), **options: Any) -> GuardPolicy:
        """The policy of a server bound to `host`: explicit allowed hosts, else the default list."""
        hosts = frozenset(allowed_hosts) or default_allowed_hosts(host)
        return cls(allowed_hosts=hosts, **options)


def host_name(header: str) -> str:
    """The name of a Host header without its port: `127.0.0.1:8000` -> `127.0.0.1`, `[::1]:80` -> `::1`."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def _error(status: int, message: str, *, kind: str, param: str | None, code: str) -> tuple[int, bytes]:
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return status, json.dumps(body).encode()


def where(error: BaseException) -> str:
    """`module:line` of the innermost frame an exception came from (request-free, for one log line)."""
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return "?"
    frame = frames[-1]
    module = frame.filename.rsplit("/helios/", 1)[-1] if "/helios/" in frame.filename else frame.filename.rsplit("/", 1)[-1]
    return f"{module}:{frame.lineno}"


class RequestGuard:
    """The ASGI middleware of the module docstring."""

    def __init__(self, app: ASGIApp, policy: GuardPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self._refusal(scope)
        if refusal is None and scope["method"] == "POST":
            refusal, receive = await self._bounded_body(scope, receive)
        if refusal is not None:
            status, body = refusal
            await _send_json(send, status, body, close=status == 413,
                             extra=[(b"www-authenticate", b"Bearer")] if status == 401 else [])  # fmt: skip
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as error:  # NOTE: the last line of defence; routes map their own errors first
            log.error("%s %s 500 unexpected %s at %s", scope["method"], scope["path"], type(error).__name__, where(error))
            if not started:
                await _send_json(send, *_error(500, f"internal error ({type(error).__name__})",
                                               kind="server_error", param=None, code="internal_error"))  # fmt: skip

    def _refusal(self, scope: Scope) -> tuple[int, bytes] | None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        policy = self.policy
        if policy.allowed_hosts is not None and host_name(headers.get("host", "")) not in policy.allowed_hosts:
            return _error(403, "the Host header names a host this server does not answer for "
                               "(start it with --allowed-host NAME to add one)",
                          kind="permission_error", param="Host", code="host_not_allowed")  # fmt: skip
        path = scope["path"]
        exempt = path in UNAUTHENTICATED_PATHS or (path == "/metrics" and policy.public_metrics)
        if policy.api_key is not None and not exempt:
            scheme, _, token = headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), policy.api_key.encode()):
                return _error(401, "a valid API key is required: send `Authorization: Bearer KEY`",
                              kind="authentication_error", param="Authorization", code="invalid_api_key")  # fmt: skip
        if scope["method"] == "POST":
            media = headers.get("content-type", "").split(";", 1)[0].strip().lower()
            if media != "application/json":
                return _error(415, f"Content-Type must be application/json, got {media or 'none'!r}",
                              kind="invalid_request_error", param="Content-Type", code="unsupported_media_type")  # fmt: skip
        return None

    async def _bounded_body(self, scope: Scope, receive: Receive) -> tuple[tuple[int, bytes] | None, Receive]:
        """Read the whole body, refusing it past the limit: by its declared length before reading any
        of it, else as soon as the bytes read pass the limit. Returns a receive that replays it."""
        limit = self.policy.max_request_bytes
        too_large = _error(413, f"the request body exceeds the server's limit of {limit} bytes",
                           kind="invalid_request_error", param="body", code="request_too_large")  # fmt: skip
        for key, value in scope["headers"]:
            if key.lower() == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    return _error(400, "Content-Length is not a number", kind="invalid_request_error",
                                  param="Content-Length", code="invalid_header"), receive  # fmt: skip
                if declared > limit:
                    return too_large, receive
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return too_large, receive
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # then the connection's own messages (a disconnect)

        return None, replay


async def _send_json(send: Send, status: int, body: bytes, *, close: bool = False,
                     extra: list[tuple[bytes, bytes]] | None = None) -> None:  # fmt: skip
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *(extra or [])]
    if close:  # NOTE: the unread rest of a refused body cannot be parsed as a next request
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
