"""The FastAPI app (host side): routes, HTTP admission, preparation slots, status codes, SSE.

Owns: `create_app`, the routes on a `state.ServerState` (what they share), wrapped in the request
guard (guard.py: Host allow-list, API key, Content-Type, body size); `responses.Responder` turns
events into the JSON body or SSE stream. Status codes, as the specification sets them: 429 when
HTTP admission is full; 400 for invalid requests (an OpenAI-style error body whose `param` names the
field; FastAPI's default 422 is never used); 503 for a scheduler admission rejection of a non-stream
request (permanent, naming the field and limit, or temporary with `Retry-After`); 500 for execution
failures and for anything unexpected in preparation (one log line, the connection kept); after SSE
headers, one terminal `error` event and no [DONE]. A dropped connection cancels its request. While
the server drains (drain.py) new requests get 503 with `Retry-After`.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

from helios.errors import HeliosError
from helios.frontend.errors import OutsideCapacity
from helios.frontend.openai_request import parse_chat_request, parse_completion_request
from helios.frontend.presentation import ChatPresenter, CompletionPresenter, Timing
from helios.frontend.request_body import decode_body
from helios.server.drain import MESSAGE as SHUTTING_DOWN_MESSAGE
from helios.server.guard import RequestGuard, where
from helios.server.metrics import HeliosCollector, build_registry
from helios.server.openapi import openapi_document
from helios.server.responses import RequestContext, Responder, error_response, outside_capacity_response
from helios.server.state import ServerState

log = logging.getLogger("helios.server")


def _version() -> str:
    try:
        return version("helios")
    except PackageNotFoundError:
        return "0"


def create_app(state: ServerState, *, on_shutdown: Callable[[], None] | None = None) -> RequestGuard:
    """The app wrapped in its request guard (an ASGI app; the FastAPI app is its `.app`)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state.preparation_slots = asyncio.Semaphore(state.runtime.limits.frontend_workers)
        state.runtime.start()
        try:
            yield
        finally:
            state.drain.close()  # whatever is still open ends with its terminal error now
            await asyncio.to_thread(state.runtime.shutdown)  # joins the worker off the event loop
            state.executor.shutdown(wait=False, cancel_futures=True)
            if on_shutdown is not None:
                on_shutdown()

    responder = Responder(state)
    app = FastAPI(title="Helios", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    registry = build_registry(
        HeliosCollector(
            state.runtime.metrics, state.counters, lambda: state.admission.in_use, state.admission.capacity
        )
    )
    preparer = state.preparer
    document = openapi_document(served_id=preparer.served_id, aliases=preparer.aliases,
                                context_tokens=preparer.context_tokens, vocab_size=preparer.bootstrap.vocab_size,
                                version=_version())  # fmt: skip

    @app.exception_handler(RequestValidationError)
    async def validationerror_response(request: Request, error: RequestValidationError) -> JSONResponse:
        first = error.errors()[0] if error.errors() else {}
        param = ".".join(str(p) for p in first.get("loc", ())[1:]) or "body"
        return error_response(
            400, str(first.get("msg", "invalid request")), kind="invalid_request_error", param=param
        )

    @app.exception_handler(StarletteHTTPException)
    async def httperror_response(request: Request, error: StarletteHTTPException) -> JSONResponse:
        param = "path" if error.status_code == 404 else "method" if error.status_code == 405 else None
        return error_response(error.status_code, str(error.detail), kind="invalid_request_error", param=param)

    @app.get("/health")
    async def health() -> JSONResponse:
        status = state.runtime.health()
        if state.drain.draining and status.ok:
            return JSONResponse({"status": "stopping", "detail": SHUTTING_DOWN_MESSAGE}, status_code=503)
        return JSONResponse(
            {"status": status.status, "detail": status.detail}, status_code=200 if status.ok else 503
        )

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/openapi.json")
    async def openapi() -> JSONResponse:
        return JSONResponse(document)

    @app.get("/v1/models")
    async def models() -> JSONResponse:
        preparer = state.preparer
        created = int(time.time())
        data = [
            {
                "id": name,
                "object": "model",
                "created": created,
                "owned_by": "helios",
                "root": preparer.served_id,
            }
            for name in (preparer.served_id, *preparer.aliases)
        ]
        return JSONResponse({"object": "list", "data": data})

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await _handle(request, chat=True)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await _handle(request, chat=False)

    def shutting_down(endpoint: str) -> JSONResponse:
        state.counters.record(endpoint, 503)
        return error_response(503, SHUTTING_DOWN_MESSAGE, kind="server_error", code="shutting_down",
                              retry_after=state.admission.retry_after())  # fmt: skip

    async def _handle(request: Request, *, chat: bool) -> Response:
        endpoint = "chat" if chat else "completions"
        started = time.monotonic()
        if state.drain.draining:
            return shutting_down(endpoint)
        try:
            body = decode_body(await request.body())  # the guard bounded its size
        except HeliosError as error:
            state.counters.record(endpoint, 400)
            return error_response(400, str(error), kind="invalid_request_error", param=getattr(error, "param", "body"))
        ingress_ns = state.runtime.clock.now_ns()  # chat-handler entry after JSON decoding
        permit = state.admission.try_acquire()
        if permit is None:
            state.counters.record(endpoint, 429)
            log.info("%s 429 admission full (%d requests held)", request.url.path, state.admission.capacity)
            return error_response(
                429,
                f"the server holds its maximum of {state.admission.capacity} requests; retry later",
                kind="rate_limit_error",
                code="admission_full",
                retry_after=state.admission.retry_after(),
            )
        request_id = ("chatcmpl-" if chat else "cmpl-") + secrets.token_hex(12)
        try:
            parsed = parse_chat_request(body) if chat else parse_completion_request(body)
            assert state.preparation_slots is not None
            async with state.preparation_slots:
                prepare = state.preparer.prepare_chat if chat else state.preparer.prepare_completion
                prepared = await asyncio.get_running_loop().run_in_executor(
                    state.executor, prepare, parsed, request_id
                )
            # NOTE: a bounded channel's sender waits: an admitted request is never refused for room
            await state.runtime.wait_for_ingress()
        except OutsideCapacity as error:
            permit.release()
            state.counters.record(endpoint, 503)
            log.info("%s %s 503 outside capacity: %s", request_id, request.url.path, error)
            return outside_capacity_response(error)
        except HeliosError as error:
            permit.release()
            state.counters.record(endpoint, 400)
            log.info("%s %s 400 %s", request_id, request.url.path, error)
            return error_response(
                400, str(error), kind="invalid_request_error", param=getattr(error, "param", None) or "body"
            )
        except Exception as error:  # a bug in preparation: this request fails, the connection stays usable
            permit.release()
            state.counters.record(endpoint, 500)
            log.error("%s %s 500 preparation failed: %s at %s", request_id, request.url.path,
                      type(error).__name__, where(error))  # fmt: skip
            return error_response(500, f"request preparation failed ({type(error).__name__})",
                                  kind="server_error", code="preparation_failed")  # fmt: skip
        except BaseException:
            permit.release()
            raise
        if state.drain.closed:
            permit.release()
            return shutting_down(endpoint)
        runtime_request = prepared.runtime_request
        stream = state.runtime.submit(runtime_request)
        timing_needed = runtime_request.observe_timestamps
        context = RequestContext(
            request_id=request_id,
            path=request.url.path,
            endpoint=endpoint,
            started=started,
            prompt_tokens=len(prepared.prompt_token_ids),
            timing=Timing(ingress_ns, stream.enqueue_ns or 0) if timing_needed else None,
            prompt_token_ids=prepared.prompt_token_ids,
        )
        scored = runtime_request.prompt_logprobs is not None
        token_text = state.preparer.token_text if scored else None
        created = int(time.time())
        model = state.preparer.served_id
        if chat:
            presenter: Any = ChatPresenter(
                completion_id=request_id,
                model=model,
                created=created,
                prompt_token_ids=prepared.prompt_token_ids,
                observe_tokens=runtime_request.observe_tokens,
                observe_timestamps=runtime_request.observe_timestamps,
                include_usage=parsed.include_usage,
                token_text=token_text,
            )
        else:
            presenter = CompletionPresenter(
                completion_id=request_id, model=model, created=created, include_usage=parsed.include_usage,
                echo=prepared.echo, scores_only=prepared.scores_only,
                score_format="logprobs" if parsed.echo_logprobs else "prompt_logprobs", token_text=token_text,
            )
        pipeline = prepared.pipeline if chat else None
        if parsed.stream:
            generator = (
                responder.stream_chat(stream, presenter, pipeline, permit, context)
                if chat
                else responder.stream_text(stream, presenter, permit, context)
            )
            return StreamingResponse(
                generator,
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            )
        return await responder.whole(request, stream, presenter, pipeline, permit, context)

    return RequestGuard(app, state.policy)
