"""Presentation (host side): OpenAI JSON responses and SSE chunks, plus the specification's
observation fields.

Owns: `ChatPresenter` and `CompletionPresenter` (one per response), `Usage`, `sse` framing and
`error_body`. Shapes follow OpenAI's chat.completion / chat.completion.chunk / text_completion
objects. Observation (return_token_ids, return_token_timestamps):

- JSON: `prompt_token_ids` at the top level, raw generated ids in `choices[0].token_ids`, aligned
  `choices[0].token_timestamps_ns` when timed, top-level `reused_prompt_tokens`, and for timed
  responses a top-level `performance` object {ingress_ns, enqueue_ns, reused_prompt_tokens};
- SSE: prompt ids in the first chunk; one metadata-only chunk per generated id (delta {} and
  choices[0].token_ids [id], plus token_timestamps_ns [t] when timed); text, reasoning and tool
  deltas carry no ids; usage on the terminal choice chunk of an observed stream, or, with
  stream_options.include_usage, a final usage-only chunk (choices []) before [DONE], every earlier
  chunk carrying usage null.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from helios.frontend.pipeline import Delta, ParsedOutput
from helios.frontend.scores import ScoredPrompt, TokenText


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int  # every sampled token, the one crossing a stop and EOS included
    reused_prompt_tokens: int = 0

    def as_json(self) -> dict[str, Any]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": self.reused_prompt_tokens},
        }


@dataclass(frozen=True, slots=True)
class Timing:
    ingress_ns: int
    enqueue_ns: int


def sse(payload: dict[str, Any] | str) -> str:
    data = (
        payload
        if isinstance(payload, str)
        else json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    )
    return f"data: {data}\n\n"


SSE_DONE = sse("[DONE]")


def error_body(
    message: str, *, kind: str, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def _delta_json(delta: Delta) -> dict[str, Any]:
    if delta.reasoning:
        return {"reasoning_content": delta.reasoning}
    if delta.content:
        return {"content": delta.content}
    calls = []
    for call in delta.tool_calls:
        item: dict[str, Any] = {"index": call.index}
        function: dict[str, Any] = {"arguments": call.arguments}
        if call.id is not None:
            item["id"] = call.id
            item["type"] = "function"
        if call.name is not None:
            function["name"] = call.name
        item["function"] = function
        calls.append(item)
    return {"tool_calls": calls}


class ChatPresenter:
    """Builds one chat response, streamed or whole."""

    def __init__(
        self,
        *,
        completion_id: str,
        model: str,
        created: int,
        prompt_token_ids: tuple[int, ...],
        observe_tokens: bool,
        observe_timestamps: bool,
        include_usage: bool = False,
        token_text: TokenText | None = None,
    ) -> None:
        self.completion_id = completion_id
        self.model = model
        self.created = created
        self.prompt_token_ids = prompt_token_ids
        self.observe_tokens = observe_tokens
        self.observe_timestamps = observe_timestamps
        self.include_usage = include_usage
        self.token_text = token_text  # with it, a whole response carries the prompt's scores (prompt_logprobs)

    # -- streaming -------------------------------------------------------------------------------

    def _chunk(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        chunk: dict[str, Any] = {
            "id": self.completion_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }
        if self.include_usage:
            chunk["usage"] = None
        return chunk

    def _choice(self, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}

    def first_chunk(self) -> dict[str, Any]:
        chunk = self._chunk([self._choice({"role": "assistant", "content": ""})])
        if self.observe_tokens:
            chunk["prompt_token_ids"] = list(self.prompt_token_ids)
        return chunk

    def delta_chunk(self, delta: Delta) -> dict[str, Any]:
        return self._chunk([self._choice(_delta_json(delta))])

    def token_chunk(self, token_id: int, timestamp_ns: int | None) -> dict[str, Any]:
        choice = self._choice({})
        choice["token_ids"] = [token_id]
        if self.observe_timestamps:
            choice["token_timestamps_ns"] = [timestamp_ns]
        return self._chunk([choice])

    def final_chunks(self, finish_reason: str, usage: Usage, timing: Timing | None) -> list[dict[str, Any]]:
        terminal = self._chunk([self._choice({}, finish_reason)])
        if not self.include_usage:
            if self.observe_tokens:
                terminal["usage"] = usage.as_json()
                self._observation(terminal, usage, timing)
            return [terminal]
        usage_chunk = self._chunk([])
        usage_chunk["usage"] = usage.as_json()
        if self.observe_tokens:
            self._observation(usage_chunk, usage, timing)
        return [terminal, usage_chunk]

    def _observation(self, body: dict[str, Any], usage: Usage, timing: Timing | None) -> None:
        body["reused_prompt_tokens"] = usage.reused_prompt_tokens
        if self.observe_timestamps and timing is not None:
            body["performance"] = {
                "ingress_ns": timing.ingress_ns,
                "enqueue_ns": timing.enqueue_ns,
                "reused_prompt_tokens": usage.reused_prompt_tokens,
            }

    # -- whole -----------------------------------------------------------------------------------

    def response(
        self,
        parsed: ParsedOutput,
        finish_reason: str,
        usage: Usage,
        *,
        token_ids: list[int],
        timestamps_ns: list[int | None],
        timing: Timing | None,
        scores: ScoredPrompt | None = None,
    ) -> dict[str, Any]:
        # OpenAI's shape: content is null only beside tool calls, else a string (maybe empty)
        content = parsed.content if parsed.content is not None or parsed.tool_calls else ""
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if parsed.reasoning is not None:
            message["reasoning_content"] = parsed.reasoning
        message["tool_calls"] = (
            [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in parsed.tool_calls
            ]
            if parsed.tool_calls
            else None
        )
        choice: dict[str, Any] = {
            "index": 0,
            "message": message,
            "logprobs": None,
            "finish_reason": finish_reason,
        }
        body: dict[str, Any] = {
            "id": self.completion_id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [choice],
            "usage": usage.as_json(),
        }
        if self.observe_tokens:
            body["prompt_token_ids"] = list(self.prompt_token_ids)
            choice["token_ids"] = token_ids
            if self.observe_timestamps:
                choice["token_timestamps_ns"] = timestamps_ns
            self._observation(body, usage, timing)
        if scores is not None and self.token_text is not None:  # vLLM's extension, at the top level
            body["prompt_logprobs"] = scores.prompt_logprobs(self.token_text)
        return body


class CompletionPresenter:
    """Builds one /v1/completions response, streamed or whole. A whole response may echo the prompt
    (`echo`: its text, before the completion's; `scores_only`: max_tokens 0, the sampled token left
    out of text and usage) and carry the prompt's scores: the legacy `choices[0].logprobs` object
    (`score_format` "logprobs", with echo) or vLLM's `choices[0].prompt_logprobs` ("prompt_logprobs")."""

    def __init__(self, *, completion_id: str, model: str, created: int, include_usage: bool = False,
                 echo: str | None = None, scores_only: bool = False, score_format: str | None = None,
                 token_text: TokenText | None = None) -> None:
        self.completion_id = completion_id
        self.model = model
        self.created = created
        self.include_usage = include_usage
        self.echo = echo
        self.scores_only = scores_only
        self.score_format = score_format
        self.token_text = token_text

    def _body(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        body: dict[str, Any] = {
            "id": self.completion_id,
            "object": "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }
        if self.include_usage:
            body["usage"] = None
        return body

    def text_chunk(self, text: str, finish_reason: str | None = None) -> dict[str, Any]:
        return self._body([{"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}])

    def final_chunks(self, finish_reason: str, usage: Usage) -> list[dict[str, Any]]:
        chunks = [self.text_chunk("", finish_reason)]
        if self.include_usage:
            usage_chunk = self._body([])
            usage_chunk["usage"] = usage.as_json()
            chunks.append(usage_chunk)
        return chunks

    def response(self, text: str, finish_reason: str, usage: Usage, *,
                 scores: ScoredPrompt | None = None) -> dict[str, Any]:
        if self.scores_only:
            text, finish_reason = "", "length"
            usage = Usage(usage.prompt_tokens, 0, usage.reused_prompt_tokens)
        choice: dict[str, Any] = {"index": 0, "text": (self.echo or "") + text, "logprobs": None,
                                  "finish_reason": finish_reason}
        if scores is not None and self.token_text is not None:
            if self.score_format == "logprobs":
                choice["logprobs"] = scores.completion_logprobs(self.token_text)
            else:
                choice["prompt_logprobs"] = scores.prompt_logprobs(self.token_text)
        body = self._body([choice])
        body["usage"] = usage.as_json()
        return body
