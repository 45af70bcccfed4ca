"""Serving (host side): one `ServerState` (a runtime and its frontend preparer, composed by
`helios.cli.compose`) behind the HTTP app, run by uvicorn until interrupted. Shutdown gives open
connections five seconds to drain before dropping them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from helios.server.app import create_app
from helios.server.state import ServerState

SHUTDOWN_DRAIN_S = 5


def serve(state: ServerState, *, host: str, port: int, runtime: str, on_shutdown: Callable[[], None]) -> None:
    import uvicorn

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    limits = state.runtime.limits
    logging.getLogger("helios.server").info(
        "serving %s (%s runtime) on http://%s:%d: max_active=%d queue_capacity=%d frontend_workers=%d",
        state.preparer.served_id,
        runtime,
        host,
        port,
        limits.max_active,
        limits.queue_capacity,
        limits.frontend_workers,
    )
    app = create_app(state, on_shutdown=on_shutdown)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=SHUTDOWN_DRAIN_S,
        lifespan="on",
    )
    try:
        uvicorn.Server(config).run()
    except KeyboardInterrupt:
        # NOTE: uvicorn drains, shuts the app down, then re-raises the captured Ctrl-C: that is
        # the normal way to stop a server, not an error.
        pass
    logging.getLogger("helios.server").info("stopped")
