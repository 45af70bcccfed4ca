"""Serving (host side): one `ServerState` (a runtime and its frontend preparer, composed by
`helios.cli.compose`) behind the HTTP app, run by uvicorn until SIGTERM or SIGINT.

Owns: `listen` (the socket is bound before anything says it serves, so a port in use is one error
line) and `HeliosServer`, uvicorn's server with Helios's stop: either signal starts the drain
(drain.py: admission stops at once, running requests get five seconds, then every open response
ends with its terminal error), uvicorn closes the connections, the lifespan shuts the runtime
down, and `serve` returns normally after one "stopped" line: the process exits 0, by either
signal, without re-raising it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import threading
from collections.abc import Callable, Iterator

import uvicorn

from helios.errors import HeliosError
from helios.server.app import create_app
from helios.server.drain import DRAIN_S
from helios.server.state import ServerState

SHUTDOWN_DRAIN_S = DRAIN_S
# uvicorn's own limit on waiting for connections, past the drain (which ends every response):
# a backstop for a client that stopped reading, not the normal way out.
CONNECTION_CLOSE_S = 1.0
log = logging.getLogger("helios.server")


class ListenFailed(HeliosError):
    """The server cannot listen on the address and port asked for (in use, not local, not allowed)."""

    exit_code = 1


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on (host, port); port 0 picks a free one."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as error:
        raise ListenFailed(f"cannot listen on {host}:{port}: {error.strerror} (socket.gaierror)") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as error:
        sock.close()
        raise ListenFailed(f"cannot listen on {host}:{port}: {error.strerror} ({type(error).__name__})") from None
    sock.setblocking(False)
    return sock


class HeliosServer(uvicorn.Server):
    """uvicorn's `Server` with the stop of the module docstring."""

    def __init__(self, config: uvicorn.Config, state: ServerState) -> None:
        super().__init__(config)
        self.state = state

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # NOTE: uvicorn re-raises a captured signal after shutting down, so SIGTERM ended the process
        # by the signal (rc -15) and SIGINT as KeyboardInterrupt. A stop is the normal end of a
        # server: handle both, restore the handlers, raise nothing.
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        original = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        state = self.state
        closing = asyncio.create_task(state.drain.close_after(lambda: state.admission.in_use, SHUTDOWN_DRAIN_S))
        await super().shutdown(sockets)
        if not closing.done():  # every connection closed before the drain window ended
            closing.cancel()
            state.drain.close()


def serve(state: ServerState, *, host: str, port: int, runtime: str, on_shutdown: Callable[[], None],
          sock: socket.socket | None = None) -> None:  # fmt: skip
    """Serve until SIGTERM or SIGINT; returns after the drain (the caller exits 0)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    sock = sock if sock is not None else listen(host, port)
    bound_port = sock.getsockname()[1]
    limits = state.runtime.limits
    policy = state.policy
    log.info(
        "serving %s (%s runtime) on http://%s:%d: max_active=%d queue_capacity=%d frontend_workers=%d "
        "max_request_bytes=%d api_key=%s allowed_hosts=%s",
        state.preparer.served_id, runtime, host, bound_port, limits.max_active, limits.queue_capacity,
        limits.frontend_workers, policy.max_request_bytes, "required" if policy.api_key else "none",
        ",".join(sorted(policy.allowed_hosts)) if policy.allowed_hosts is not None else "any",
    )  # fmt: skip
    costs = state.runtime.metrics().round_costs
    if costs:  # adaptive speculation: the measured round costs its program choice reads (also on /metrics)
        from helios.runtime.costs import RoundCosts

        log.info("measured round costs (adaptive speculation):\n  %s", "\n  ".join(RoundCosts(tuple(costs)).lines()))
    app = create_app(state, on_shutdown=on_shutdown)
    config = uvicorn.Config(
        app,
        host=host,
        port=bound_port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=SHUTDOWN_DRAIN_S + CONNECTION_CLOSE_S,
        lifespan="on",
    )
    try:
        HeliosServer(config, state).run(sockets=[sock])
    except KeyboardInterrupt:  # a Ctrl-C before the signal handlers were installed
        pass
    finally:
        sock.close()
    log.info("stopped")
