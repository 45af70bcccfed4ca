"""The FastAPI app (host side): routes, HTTP admission, preparation slots, status codes, SSE.

Owns: `ServerState` (what the routes share) and `create_app`. Status codes, as the specification
sets them: 429 when HTTP admission is full; 400 for invalid requests (an OpenAI-style error body
whose `param` names the field; FastAPI's default 422 is never used); 503 for a scheduler admission
rejection of a non-stream request; 500 for execution failures; after SSE headers, one terminal
`error` event and no [DONE]. A dropped connection cancels its request.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

from helios.errors import HeliosError
from helios.frontend.detokenize import Piece
from helios.frontend.openai_request import parse_chat_request, parse_completion_request
from helios.frontend.pipeline import OutputAccumulator
from helios.frontend.preparation import Preparer
from helios.frontend.presentation import (
    SSE_DONE,
    ChatPresenter,
    CompletionPresenter,
    Timing,
    Usage,
    error_body,
    sse,
)
from helios.runtime.events import Failed, Finished, Rejected, Termination, TokenEvent
from helios.runtime.interface import EventStream, ModelRuntime
from helios.server.admission import HttpAdmission, Permit
from helios.server.metrics import HeliosCollector, ServerCounters, build_registry

log = logging.getLogger("helios.server")


@dataclass(slots=True)
class ServerState:
    runtime: ModelRuntime
    preparer: Preparer
    admission: HttpAdmission = field(init=False)
    counters: ServerCounters = field(default_factory=ServerCounters)
    executor: ThreadPoolExecutor = field(init=False)
    preparation_slots: asyncio.Semaphore | None = None  # created on the serving loop

    def __post_init__(self) -> None:
        limits = self.runtime.limits
        self.admission = HttpAdmission(limits.http_capacity)
        self.executor = ThreadPoolExecutor(limits.frontend_workers, thread_name_prefix="helios-frontend")


def _error(
    status: int, message: str, *, kind: str, param: str | None = None, code: str | None = None
) -> JSONResponse:
    return JSONResponse(error_body(message, kind=kind, param=param, code=code), status_code=status)


class _PermitJSONResponse(JSONResponse):
    """Releases the admission permit once the body was sent (or the send failed)."""

    def __init__(self, content: Any, permit: Permit, *, status_code: int = 200) -> None:
        super().__init__(content, status_code=status_code)
        self._permit = permit

    async def __call__(self, scope, receive, send) -> None:  # type: ignore[override]
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._permit.release()


def _finish_reason(finished: Finished, tool_calls: int) -> str:
    if finished.termination is Termination.EOS and tool_calls:
        return "tool_calls"
    return finished.termination.finish_reason or "stop"


def _pieces(event: TokenEvent | Finished) -> list[Piece]:
    return [p for p in event.pieces if isinstance(p, Piece)]


async def _watch_disconnect(request: Request, on_disconnect: Callable[[], None]) -> None:
    """Waits for the client to go away (the body is already read) and reports it."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            on_disconnect()
            return


def create_app(state: ServerState, *, on_shutdown: Callable[[], None] | None = None) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state.preparation_slots = asyncio.Semaphore(state.runtime.limits.frontend_workers)
        state.runtime.start()
        try:
            yield
        finally:
            await asyncio.to_thread(state.runtime.shutdown)  # joins the worker off the event loop
            state.executor.shutdown(wait=False, cancel_futures=True)
            if on_shutdown is not None:
                on_shutdown()

    app = FastAPI(title="Helios", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    registry = build_registry(
        HeliosCollector(
            state.runtime.metrics, state.counters, lambda: state.admission.in_use, state.admission.capacity
        )
    )

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, error: RequestValidationError) -> JSONResponse:
        first = error.errors()[0] if error.errors() else {}
        param = ".".join(str(p) for p in first.get("loc", ())[1:]) or None
        return _error(
            400, str(first.get("msg", "invalid request")), kind="invalid_request_error", param=param
        )

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        return _error(error.status_code, str(error.detail), kind="invalid_request_error")

    @app.get("/health")
    async def health() -> JSONResponse:
        status = state.runtime.health()
        return JSONResponse(
            {"status": status.status, "detail": status.detail}, status_code=200 if status.ok else 503
        )

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

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

    async def _handle(request: Request, *, chat: bool) -> Response:
        endpoint = "chat" if chat else "completions"
        started = time.monotonic()
        try:
            body = await request.json()
        except ValueError:
            state.counters.record(endpoint, 400)
            return _error(
                400, "the request body is not valid JSON", kind="invalid_request_error", param="body"
            )
        ingress_ns = state.runtime.clock.now_ns()  # chat-handler entry after JSON decoding
        permit = state.admission.try_acquire()
        if permit is None:
            state.counters.record(endpoint, 429)
            log.info("%s 429 admission full (%d requests held)", request.url.path, state.admission.capacity)
            return _error(
                429,
                f"the server holds its maximum of {state.admission.capacity} requests; retry later",
                kind="rate_limit_error",
                code="admission_full",
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
        except HeliosError as error:
            permit.release()
            state.counters.record(endpoint, 400)
            log.info("%s %s 400 %s", request_id, request.url.path, error)
            return _error(400, str(error), kind="invalid_request_error", param=getattr(error, "param", None))
        except BaseException:
            permit.release()
            raise
        runtime_request = prepared.runtime_request
        stream = state.runtime.submit(runtime_request)
        timing_needed = runtime_request.observe_timestamps
        context = _Context(
            request_id=request_id,
            path=request.url.path,
            endpoint=endpoint,
            started=started,
            prompt_tokens=len(prepared.prompt_token_ids),
            timing=Timing(ingress_ns, stream.enqueue_ns or 0) if timing_needed else None,
        )
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
            )
        else:
            presenter = CompletionPresenter(
                completion_id=request_id, model=model, created=created, include_usage=parsed.include_usage
            )
        pipeline = prepared.pipeline if chat else None
        if parsed.stream:
            generator = (
                _stream_chat(stream, presenter, pipeline, permit, context)
                if chat
                else _stream_text(stream, presenter, permit, context)
            )
            return StreamingResponse(
                generator,
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            )
        return await _whole(request, stream, presenter, pipeline, permit, context)

    @dataclass(slots=True)
    class _Context:
        request_id: str
        path: str
        endpoint: str
        started: float
        prompt_tokens: int
        timing: Timing | None

    def _log(context: _Context, status: int, outcome: str, output_tokens: int) -> None:
        state.counters.record(context.endpoint, status)
        log.info(
            "%s %s %d %s prompt=%d output=%d %.1fms",
            context.request_id,
            context.path,
            status,
            outcome,
            context.prompt_tokens,
            output_tokens,
            (time.monotonic() - context.started) * 1000,
        )

    async def _whole(request: Request, stream: EventStream, presenter: Any, pipeline: Any, permit: Permit,
                     context: _Context) -> Response:  # fmt: skip
        def client_gone() -> None:
            state.counters.cancelled_by_client += 1
            state.runtime.cancel(stream.request_id)

        watcher = asyncio.create_task(_watch_disconnect(request, client_gone))
        accumulator = OutputAccumulator()
        text: list[str] = []
        token_ids: list[int] = []
        timestamps: list[int | None] = []
        try:
            while True:
                event = await stream.next()
                if isinstance(event, TokenEvent):
                    token_ids.append(event.token_id)
                    timestamps.append(event.timestamp_ns)
                    if pipeline is not None:
                        accumulator.add(pipeline.feed(_pieces(event)))
                    else:
                        text.extend(p.text for p in _pieces(event))
                    continue
                break
        except BaseException:
            state.runtime.cancel(stream.request_id)
            permit.release()
            raise
        finally:
            watcher.cancel()
        if isinstance(event, Rejected):
            permit.release()
            _log(context, 503, "rejected", 0)
            return _error(503, event.reason, kind="server_error", code="admission_rejected")
        if isinstance(event, Failed):
            permit.release()
            _log(context, 500, "failed", len(token_ids))
            return _error(500, event.message, kind="server_error", code="execution_failed")
        assert isinstance(event, Finished)
        if event.termination is Termination.CANCELLED:
            permit.release()
            _log(context, 499, "cancelled", event.output_tokens)
            return Response(status_code=499)
        usage = Usage(event.prompt_tokens, event.output_tokens, event.reused_prompt_tokens)
        if pipeline is not None:
            accumulator.add(pipeline.feed(_pieces(event)))
            accumulator.add(pipeline.finish())
            finish_reason = _finish_reason(event, pipeline.tool_calls)
            body = presenter.response(
                accumulator.result(),
                finish_reason,
                usage,
                token_ids=token_ids,
                timestamps_ns=timestamps,
                timing=context.timing,
            )
        else:
            text.extend(p.text for p in _pieces(event))
            finish_reason = _finish_reason(event, 0)
            body = presenter.response("".join(text), finish_reason, usage)
        _log(context, 200, finish_reason, event.output_tokens)
        return _PermitJSONResponse(body, permit)

    async def _stream_chat(stream: EventStream, presenter: ChatPresenter, pipeline: Any, permit: Permit,
                           context: _Context) -> AsyncIterator[str]:  # fmt: skip
        outcome, status, output_tokens = "dropped", 200, 0
        try:
            yield sse(presenter.first_chunk())
            while True:
                event = await stream.next()
                if isinstance(event, TokenEvent):
                    output_tokens += 1
                    if presenter.observe_tokens:
                        yield sse(presenter.token_chunk(event.token_id, event.timestamp_ns))
                    for delta in pipeline.feed(_pieces(event)):
                        yield sse(presenter.delta_chunk(delta))
                elif isinstance(event, Finished):
                    if event.termination is Termination.CANCELLED:
                        outcome = "cancelled"
                        return
                    for delta in pipeline.feed(_pieces(event)) + pipeline.finish():
                        yield sse(presenter.delta_chunk(delta))
                    usage = Usage(event.prompt_tokens, event.output_tokens, event.reused_prompt_tokens)
                    outcome = _finish_reason(event, pipeline.tool_calls)
                    output_tokens = event.output_tokens
                    for chunk in presenter.final_chunks(outcome, usage, context.timing):
                        yield sse(chunk)
                    yield SSE_DONE
                    return
                else:
                    outcome, status = _sse_error(event)
                    yield sse(_sse_error_body(event))
                    return
        finally:
            if not stream.done:
                state.counters.cancelled_by_client += 1
                state.runtime.cancel(stream.request_id)
            permit.release()
            _log(context, status, outcome, output_tokens)

    async def _stream_text(stream: EventStream, presenter: CompletionPresenter, permit: Permit,
                           context: _Context) -> AsyncIterator[str]:  # fmt: skip
        outcome, status, output_tokens = "dropped", 200, 0
        try:
            while True:
                event = await stream.next()
                if isinstance(event, TokenEvent):
                    output_tokens += 1
                    text = "".join(p.text for p in _pieces(event))
                    if text:
                        yield sse(presenter.text_chunk(text))
                elif isinstance(event, Finished):
                    if event.termination is Termination.CANCELLED:
                        outcome = "cancelled"
                        return
                    text = "".join(p.text for p in _pieces(event))
                    if text:
                        yield sse(presenter.text_chunk(text))
                    usage = Usage(event.prompt_tokens, event.output_tokens, event.reused_prompt_tokens)
                    outcome = _finish_reason(event, 0)
                    output_tokens = event.output_tokens
                    for chunk in presenter.final_chunks(outcome, usage):
                        yield sse(chunk)
                    yield SSE_DONE
                    return
                else:
                    outcome, status = _sse_error(event)
                    yield sse(_sse_error_body(event))
                    return
        finally:
            if not stream.done:
                state.counters.cancelled_by_client += 1
                state.runtime.cancel(stream.request_id)
            permit.release()
            _log(context, status, outcome, output_tokens)

    return app


def _sse_error(event: Failed | Rejected) -> tuple[str, int]:
    """The logged outcome and the HTTP status (200: the headers were already sent)."""
    return ("rejected" if isinstance(event, Rejected) else "failed"), 200


def _sse_error_body(event: Failed | Rejected) -> dict[str, Any]:
    if isinstance(event, Rejected):
        return error_body(event.reason, kind="server_error", code="admission_rejected")
    return error_body(event.message, kind="server_error", code="execution_failed")
