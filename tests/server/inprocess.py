"""An in-process server for host tests: the real app and SequentialRuntime over a scripted engine and the
tiny frontend, served by uvicorn on a free loopback port in a thread."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import uvicorn

from helios.engine.sequential import SequentialRuntime
from helios.frontend.preparation import Preparer
from helios.runtime.limits import AdmissionLimits
from helios.server.app import create_app
from helios.server.guard import GuardPolicy
from helios.server.serve import HeliosServer
from helios.server.state import ServerState
from tests.frontend import tinyfront

SERVED_ID = "tiny-chat"
ALIASES = ("tiny",)


def wait_healthy(base: str, process, log, *, timeout_s: float, what: str) -> None:
    """Wait until the server process at `base` answers /health with 200; kill it and fail with its
    log when it exits or `timeout_s` passes first."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(base + "/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"{what} did not start:\n" + log.read_text())
        time.sleep(0.05)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def serving(engine, *, limits=AdmissionLimits(max_active=2, queue_capacity=2), context_tokens=2048,
            rejections=(), policy: GuardPolicy | None = None) -> Iterator[tuple[str, ServerState]]:  # fmt: skip
    bootstrap = tinyfront.make_bootstrap()
    runtime = SequentialRuntime(
        engine, limits, context_tokens=context_tokens, vocab_size=bootstrap.vocab_size, rejections=rejections
    )
    preparer = Preparer(bootstrap, served_id=SERVED_ID, aliases=ALIASES, context_tokens=context_tokens)
    state = ServerState(runtime=runtime, preparer=preparer, policy=policy or GuardPolicy.for_address("127.0.0.1"))
    with serving_state(state) as served:
        yield served


@contextlib.contextmanager
def serving_state(state: ServerState) -> Iterator[tuple[str, ServerState]]:
    """`state` (any runtime) served by uvicorn on a free loopback port in a thread."""
    port = free_port()
    config = uvicorn.Config(create_app(state), host="127.0.0.1", port=port, log_level="warning",
                            timeout_graceful_shutdown=6)  # fmt: skip
    server = HeliosServer(config, state)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 10
    while not server.started:
        if time.time() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}", state
    finally:
        server.should_exit = True
        thread.join(10)
