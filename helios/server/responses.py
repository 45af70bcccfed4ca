"""Responses (host side): how one request's runtime events become an HTTP response.

Owns: `Responder` (a JSON body after the terminal event, or an SSE stream as events arrive), the
status-code mapping of terminal events (a temporary rejection's 503 carries `Retry-After`, a
permanent one names what can never fit and says not to retry), permit release after delivery,
cancellation of a request whose client went away or that the shutdown drain ended, and the one log
line per request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from helios.errors import HeliosError
from helios.frontend.detokenize import Piece
from helios.frontend.errors import OutsideCapacity
from helios.frontend.pipeline import OutputAccumulator
from helios.frontend.presentation import (
    SSE_DONE,
    ChatPresenter,
    CompletionPresenter,
    Timing,
    Usage,
    error_body,
    sse,
)
from helios.frontend.scores import ScoredPrompt
from helios.runtime.events import Failed, Finished, Rejected, Termination, TokenEvent
from helios.runtime.interface import EventStream
from helios.runtime.scores import PromptScoreEvent
from helios.server.admission import Permit
from helios.server.drain import ShuttingDown
from helios.server.guard import where
from helios.server.state import ServerState

log = logging.getLogger("helios.server")


def error_response(
    status: int, message: str, *, kind: str, param: str | None = None, code: str | None = None,
    retry_after: int | None = None,
) -> JSONResponse:
    """An OpenAI-style error; `retry_after` (seconds) marks it temporary with a `Retry-After` header."""
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    return JSONResponse(error_body(message, kind=kind, param=param, code=code), status_code=status, headers=headers)


def outside_capacity_response(error: OutsideCapacity) -> JSONResponse:
    """The specification's 503 for a request that can never fit: the field, its limit and the
    request's value; permanent, so no `Retry-After`, and `x-should-retry: false` (which the official
    openai clients honour instead of retrying a 5xx)."""
    body = error_body(str(error), kind="invalid_request_error", param=error.param, code="context_length_exceeded")
    body["error"].update(limit=error.limit, value=error.value)
    return JSONResponse(body, status_code=503, headers={"x-should-retry": "false"})


def _rejection_response(state: ServerState, event: Rejected) -> JSONResponse:
    if event.temporary:
        return error_response(503, event.reason, kind="server_error", code="admission_rejected",
                              retry_after=state.admission.retry_after())  # fmt: skip
    response = error_response(503, event.reason, kind="server_error", code="admission_rejected")
    response.headers["x-should-retry"] = "false"
    return response


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


@dataclass(slots=True)
class RequestContext:
    """What the request log line and the observation fields need."""

    request_id: str
    path: str
    endpoint: str
    started: float
    prompt_tokens: int
    timing: Timing | None
    prompt_token_ids: tuple[int, ...] = ()  # what the prompt's scores (a request asking for them) cover


class Responder:
    """Writes the responses of one server."""

    def __init__(self, state: ServerState) -> None:
        self.state = state

    def record(self, context: RequestContext, status: int, outcome: str, output_tokens: int) -> None:
        self.state.counters.record(context.endpoint, status)
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

    async def whole(
        self,
        request: Request,
        stream: EventStream,
        presenter: Any,
        pipeline: Any,
        permit: Permit,
        context: RequestContext,
    ) -> Response:
        def client_gone() -> None:
            self.state.counters.cancelled_by_client += 1
            self.state.runtime.cancel(stream.request_id)

        watcher = asyncio.create_task(_watch_disconnect(request, client_gone))
        self.state.drain.track(stream)
        accumulator = OutputAccumulator()
        text: list[str] = []
        token_ids: list[int] = []
        timestamps: list[int | None] = []
        scored: list[PromptScoreEvent] = []
        try:
            while True:
                event = await stream.next()
                if isinstance(event, PromptScoreEvent):  # before the first token (a request asking for them)
                    scored.append(event)
                    continue
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
            self.state.runtime.cancel(stream.request_id)
            permit.release()
            raise
        finally:
            watcher.cancel()
            self.state.drain.untrack(stream)
        if isinstance(event, ShuttingDown):
            self.state.runtime.cancel(stream.request_id)
            permit.release()
            self.record(context, 503, "shutdown", len(token_ids))
            return error_response(503, event.message, kind="server_error", code="shutting_down",
                                  retry_after=self.state.admission.retry_after())  # fmt: skip
        if isinstance(event, Rejected):
            permit.release()
            self.record(context, 503, "rejected", 0)
            return _rejection_response(self.state, event)
        if isinstance(event, Failed):
            permit.release()
            self.record(context, 500, "failed", len(token_ids))
            return error_response(500, event.message, kind="server_error", code="execution_failed")
        assert isinstance(event, Finished)
        if event.termination is Termination.CANCELLED:
            permit.release()
            self.record(context, 499, "cancelled", event.output_tokens)
            return Response(status_code=499)
        usage = Usage(event.prompt_tokens, event.output_tokens, event.reused_prompt_tokens)
        scores = None
        if stream_scores := scored or None:
            try:
                scores = ScoredPrompt.of(context.prompt_token_ids, stream_scores)
            except HeliosError as error:
                permit.release()
                self.record(context, 500, "failed", event.output_tokens)
                return error_response(500, f"output presentation failed: {error}", kind="server_error",
                                      code="output_failed")
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
                scores=scores,
            )
        else:
            text.extend(p.text for p in _pieces(event))
            finish_reason = _finish_reason(event, 0)
            body = presenter.response("".join(text), finish_reason, usage, scores=scores)
        self.record(context, 200, finish_reason, event.output_tokens)
        return _PermitJSONResponse(body, permit)

    def stream_chat(self, stream: EventStream, presenter: ChatPresenter, pipeline: Any, permit: Permit,
                    context: RequestContext) -> AsyncIterator[str]:
        """A chat completion's SSE stream (`_stream`)."""
        return self._stream(stream, _ChatStream(presenter, pipeline, context.timing), permit, context)

    def stream_text(self, stream: EventStream, presenter: CompletionPresenter, permit: Permit,
                    context: RequestContext) -> AsyncIterator[str]:
        """A text completion's SSE stream (`_stream`)."""
        return self._stream(stream, _TextStream(presenter), permit, context)

    async def _stream(self, stream: EventStream, body: _StreamBody, permit: Permit,
                      context: RequestContext) -> AsyncIterator[str]:
        """The SSE stream of one request, as its events arrive; what each write holds is `body`'s."""
        outcome, status, output_tokens = "dropped", 200, 0
        self.state.drain.track(stream)
        try:
            opening = body.opening()
            if opening:
                yield "".join(opening)
            while True:
                # NOTE: events that arrived while the previous write was in flight go out in one
                # write; their text is parsed together (fewer, larger deltas, the same result).
                out: list[str] = []
                pieces: list[Piece] = []
                terminal: Finished | Failed | Rejected | ShuttingDown | None = None
                for event in [await stream.next(), *stream.ready()]:
                    if isinstance(event, TokenEvent):
                        output_tokens += 1
                        out.extend(body.token(event, pieces))
                        pieces.extend(_pieces(event))
                    elif not isinstance(event, PromptScoreEvent):  # scores go in whole responses only
                        terminal = event
                if isinstance(terminal, Finished):
                    if terminal.termination is Termination.CANCELLED:
                        outcome = "cancelled"
                        return
                    pieces.extend(_pieces(terminal))
                out.extend(body.text(pieces))
                if isinstance(terminal, Finished):
                    usage = Usage(terminal.prompt_tokens, terminal.output_tokens, terminal.reused_prompt_tokens)
                    outcome, closing = body.finish(terminal, usage)
                    output_tokens = terminal.output_tokens
                    out.extend(closing)
                    out.append(SSE_DONE)
                elif terminal is not None:
                    outcome, status = _sse_error(terminal)
                    out.append(sse(_sse_error_body(terminal)))
                if out:
                    yield "".join(out)
                if terminal is not None:
                    return
        except Exception as error:  # a bug while presenting: the stream still ends with its error event
            outcome = "failed"
            log.error("%s %s presentation failed: %s at %s", context.request_id, context.path, type(error).__name__,
                      where(error))  # fmt: skip
            yield sse(error_body(f"output presentation failed ({type(error).__name__})", kind="server_error",
                                 code="output_failed"))  # fmt: skip
        finally:
            self.close_stream(stream, permit, context, status, outcome, output_tokens)

    def close_stream(self, stream: EventStream, permit: Permit, context: RequestContext, status: int, outcome: str,
                     output_tokens: int) -> None:
        """The end of a streamed response, however it ended: a stream the client dropped before its
        terminal event cancels the request; the admission permit returns; the request is recorded."""
        self.state.drain.untrack(stream)
        if not stream.done:
            if outcome == "dropped":
                self.state.counters.cancelled_by_client += 1
            self.state.runtime.cancel(stream.request_id)
        permit.release()
        self.record(context, status, outcome, output_tokens)


class _StreamBody(Protocol):
    """What a streamed response of one kind writes (SSE lines), for `Responder._stream`."""

    def opening(self) -> list[str]:
        """Before any event."""

    def token(self, event: TokenEvent, pieces: list[Piece]) -> list[str]:
        """As a token arrives, before its pieces join `pieces` (this write's text so far, which it may
        write and clear)."""

    def text(self, pieces: list[Piece]) -> list[str]:
        """The text of one write's events."""

    def finish(self, finished: Finished, usage: Usage) -> tuple[str, list[str]]:
        """The finish reason and the closing chunks, after the last text (the stream's end follows)."""


@dataclass(slots=True)
class _ChatStream:
    """A chat completion: its role chunk first, parsed deltas (content, reasoning, tool calls), a token
    chunk beside each token where the request observes tokens, the finish reason counting tool calls."""

    presenter: ChatPresenter
    pipeline: Any
    timing: Timing | None

    def opening(self) -> list[str]:
        return [sse(self.presenter.first_chunk())]

    def token(self, event: TokenEvent, pieces: list[Piece]) -> list[str]:
        if not self.presenter.observe_tokens:
            return []
        out = self.text(pieces)  # the text before this token, in order with the token's chunk
        pieces.clear()
        out.append(sse(self.presenter.token_chunk(event.token_id, event.timestamp_ns)))
        return out

    def text(self, pieces: list[Piece]) -> list[str]:
        return [sse(self.presenter.delta_chunk(d)) for d in self.pipeline.feed(pieces)]

    def finish(self, finished: Finished, usage: Usage) -> tuple[str, list[str]]:
        out = [sse(self.presenter.delta_chunk(d)) for d in self.pipeline.finish()]
        outcome = _finish_reason(finished, self.pipeline.tool_calls)
        out.extend(sse(chunk) for chunk in self.presenter.final_chunks(outcome, usage, self.timing))
        return outcome, out


@dataclass(slots=True)
class _TextStream:
    """A text completion: each write's text as one chunk."""

    presenter: CompletionPresenter

    def opening(self) -> list[str]:
        return []

    def token(self, event: TokenEvent, pieces: list[Piece]) -> list[str]:
        return []

    def text(self, pieces: list[Piece]) -> list[str]:
        text = "".join(p.text for p in pieces)
        return [sse(self.presenter.text_chunk(text))] if text else []

    def finish(self, finished: Finished, usage: Usage) -> tuple[str, list[str]]:
        outcome = _finish_reason(finished, 0)
        return outcome, [sse(chunk) for chunk in self.presenter.final_chunks(outcome, usage)]


def _sse_error(event: Failed | Rejected | ShuttingDown) -> tuple[str, int]:
    """The logged outcome and the HTTP status (200: the headers were already sent)."""
    outcome = "rejected" if isinstance(event, Rejected) else "shutdown" if isinstance(event, ShuttingDown) else "failed"
    return outcome, 200


def _sse_error_body(event: Failed | Rejected | ShuttingDown) -> dict[str, Any]:
    if isinstance(event, Rejected):
        return error_body(event.reason, kind="server_error", code="admission_rejected")
    if isinstance(event, ShuttingDown):
        return error_body(event.message, kind="server_error", code="shutting_down")
    return error_body(event.message, kind="server_error", code="execution_failed")
