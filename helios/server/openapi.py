"""/openapi.json (host side): the OpenAPI 3.1 description of the API this server really serves.

Owns: `openapi_document`. The request schemas are the fields `helios.frontend.openai_request`
reads, with the types and ranges it checks (docs/serving.md lists them); rules that tie fields
together (string stops with token stops or structured output, timestamps without token ids, a
prompt that fills the context) are stated in descriptions and answered with a 400 naming the field.
Unknown fields are ignored, so the request objects allow additional properties. Clients and the
schema fuzzer of the tests read it.
"""

from __future__ import annotations

from typing import Any

_NULL = {"type": "null"}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, _NULL]}


def _number(low: float, high: float, *, exclusive_low: bool = False, description: str = "") -> dict[str, Any]:
    bound = {"exclusiveMinimum": low} if exclusive_low else {"minimum": low}
    return _nullable({"type": "number", **bound, "maximum": high, **({"description": description} if description else {})})


def _flag(description: str) -> dict[str, Any]:
    return {"anyOf": [{"type": "boolean"}, _NULL], "description": description}


def _sampling() -> dict[str, Any]:
    return {
        "temperature": _number(0, 2),
        "top_p": _number(0, 1, exclusive_low=True),
        "top_k": _nullable({"type": "integer", "minimum": -1, "description": "-1 and 0 disable top-k"}),
        "min_p": _number(0, 1),
        "repetition_penalty": _number(0, 10, exclusive_low=True),
        "presence_penalty": _number(-2, 2),
        "frequency_penalty": _number(-2, 2),
        "seed": _nullable({"type": "integer", "minimum": -(2**63), "maximum": 2**64 - 1}),
        "n": _nullable({"type": "integer", "enum": [1]}),
        "ignore_eos": _flag("keep generating past the core's EOS ids"),
        "speculation": _flag("false: decode this request plainly, without learned speculation (default: the "
                             "server's choice)"),
    }


def _stops(vocab: int) -> dict[str, Any]:
    return {
        "stop": {
            "description": "null, one non-empty string or up to four, totalling at most 4096 UTF-8 bytes; "
                           "not combinable with token stops or structured output",
            "anyOf": [_NULL, {"type": "string", "minLength": 1},
                      {"type": "array", "maxItems": 4, "items": {"type": "string", "minLength": 1}}],
        },  # fmt: skip
        "stop_token_ids": _nullable({"type": "array", "items": _token(vocab)}),
        "stop_token_sequences": _nullable({
            "type": "array", "maxItems": 16,
            "items": {"type": "array", "minItems": 1, "maxItems": 64, "items": _token(vocab)},
        }),  # fmt: skip
    }


def _token(vocab: int) -> dict[str, Any]:
    return {"type": "integer", "minimum": 0, "maximum": vocab - 1}


def _model(names: list[str]) -> dict[str, Any]:
    return {"enum": names, "description": "the served id or an alias; absent: the served one"}


def _stream() -> dict[str, Any]:
    return {
        "stream": _flag("answer as server-sent events"),
        "stream_options": _nullable({
            "type": "object", "description": "only with stream: true",
            "properties": {"include_usage": _flag("a final usage-only chunk before [DONE]")},
        }),  # fmt: skip
    }


def _max_tokens(context_tokens: int, *, minimum: int = 1) -> dict[str, Any]:
    """`minimum` 0 on completions: max_tokens 0 with echo returns the prompt alone."""
    return _nullable({
        "type": "integer", "minimum": minimum, "maximum": max(context_tokens - 1, 1),
        "description": f"output limit; prompt tokens plus max_tokens must fit the served context of {context_tokens} "
                       "tokens, else 503 naming max_tokens (permanent: no Retry-After)",
    })  # fmt: skip


_TEXT_PART = {"type": "object", "required": ["type", "text"],
              "properties": {"type": {"const": "text"}, "text": {"type": "string"}}}  # fmt: skip
_PROPERTY_SCHEMA = {
    "anyOf": [{"type": "boolean"}, {
        "type": "object",
        "properties": {"type": {"anyOf": [{"type": "string"}, {"type": "array", "minItems": 1, "items": {"type": "string"}}]},
                       "description": {"type": "string"}},
    }],
}  # fmt: skip
_FUNCTION = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "description": {"type": "string"},
        "parameters": {
            "type": "object",
            "description": "a JSON schema of an object; its properties and required names are checked before use",
            "properties": {
                "type": {"const": "object"},
                "properties": {"type": "object", "additionalProperties": _PROPERTY_SCHEMA},
                "required": {"type": "array", "items": {"type": "string"}},
            },
        },
    },
}
_TOOL = {"type": "object", "required": ["type", "function"],
         "properties": {"type": {"const": "function"}, "function": _FUNCTION}}  # fmt: skip
_TOOL_CALL = {
    "type": "object",
    "required": ["function"],
    "properties": {
        "id": {"type": "string"},
        "type": {"const": "function"},
        "function": {
            "type": "object", "required": ["name"],
            "properties": {"name": {"type": "string", "minLength": 1},
                           "arguments": {"anyOf": [{"type": "string", "description": "the JSON text of an object"},
                                                   {"type": "object"}]}},
        },
    },
}  # fmt: skip
_CONTENT = {"anyOf": [{"type": "string"}, {"type": "array", "items": _TEXT_PART}]}
_IMAGE_PART = {"type": "object", "required": ["type", "image_url"],
               "description": "a vision core's image (docs/vision.md): a base64 data: URL of a PNG, JPEG or WebP "
                              "image (remote URLs only where the server allows them); a 400 naming the part on a "
                              "text-only core",
               "properties": {"type": {"const": "image_url"},
                              "image_url": {"type": "object", "required": ["url"],
                                            "properties": {"url": {"type": "string"},
                                                           "detail": {"type": "string"}}}}}  # fmt: skip
_USER_CONTENT = {"anyOf": [{"type": "string"}, {"type": "array", "items": {"anyOf": [_TEXT_PART, _IMAGE_PART]}}]}
_MESSAGE = {
    "description": "system, developer, user and tool messages need content; an assistant message may carry "
                   "tool_calls instead",
    "oneOf": [
        {"type": "object", "required": ["role", "content"],
         "properties": {"role": {"enum": ["system", "developer", "tool"]}, "content": _CONTENT,
                        "name": {"type": "string"}, "tool_call_id": {"type": "string"}}},
        {"type": "object", "required": ["role", "content"],
         "properties": {"role": {"const": "user"}, "content": _USER_CONTENT, "name": {"type": "string"}}},
        {"type": "object", "required": ["role"],
         "properties": {"role": {"const": "assistant"}, "content": {"anyOf": [_CONTENT, _NULL]},
                        "name": {"type": "string"}, "reasoning_content": {"type": "string"},
                        "tool_calls": {"type": "array", "items": _TOOL_CALL}}},
    ],
}  # fmt: skip


def chat_request_schema(context_tokens: int, names: list[str], vocab: int) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["messages"],
        "properties": {
            "model": _model(names),
            "messages": {"type": "array", "minItems": 1, "items": _MESSAGE},
            "tools": _nullable({"type": "array", "items": _TOOL}),
            "tool_choice": {
                "anyOf": [_NULL, {"enum": ["none", "auto", "required"]},
                          {"type": "object", "required": ["type", "function"],
                           "properties": {"type": {"const": "function"},
                                          "function": {"type": "object", "required": ["name"],
                                                       "properties": {"name": {"type": "string"}}}}}],
                "description": "required and a named function force a call of the request's tools",
            },  # fmt: skip
            "response_format": _nullable({
                "type": "object", "required": ["type"],
                "properties": {"type": {"enum": ["text", "json_object", "json_schema"]},
                               "json_schema": {"type": "object", "properties": {"schema": {"type": "object"}}}},
            }),  # fmt: skip
            "max_tokens": _max_tokens(context_tokens),
            "max_completion_tokens": _max_tokens(context_tokens),
            **_sampling(),
            **_stops(vocab),
            **_stream(),
            "return_token_ids": _flag("prompt_token_ids and choices[0].token_ids in the response"),
            "return_token_timestamps": _flag("token_timestamps_ns; requires return_token_ids"),
            "chat_template_kwargs": _nullable({"type": "object", "description": "extra template variables"}),
            "logprobs": {"enum": [False, None], "description": "log probabilities of generated tokens are not supported"},
            "prompt_logprobs": _prompt_logprobs(),
        },
    }


def _prompt_logprobs() -> dict[str, Any]:
    return _nullable({"type": "integer", "minimum": 0,
                      "description": "vLLM's extension: each prompt token's log-probability and this many "
                                     "alternatives (at most the core's scored-prefill width; whole responses only)"})


def completion_request_schema(context_tokens: int, names: list[str], vocab: int) -> dict[str, Any]:
    ids = {"type": "array", "minItems": 1, "items": _token(vocab)}
    return {
        "type": "object",
        "required": ["prompt"],
        "properties": {
            "model": _model(names),
            "prompt": {"anyOf": [{"type": "string", "minLength": 1}, ids,
                                 {"type": "array", "minItems": 1, "maxItems": 1,
                                  "items": {"anyOf": [{"type": "string", "minLength": 1}, ids]}}],
                       "description": "one prompt: text, or token ids inside the input vocabulary"},  # fmt: skip
            "max_tokens": _max_tokens(context_tokens, minimum=0),
            **_sampling(),
            **_stops(vocab),
            **_stream(),
            "echo": _flag("the prompt's text before the completion's (whole responses only); with max_tokens 0 the "
                          "prompt alone"),
            "logprobs": _nullable({"type": "integer", "minimum": 0,
                                   "description": "with echo and max_tokens 0: each prompt token's log-probability "
                                                  "and this many alternatives in choices[0].logprobs"}),
            "prompt_logprobs": _prompt_logprobs(),
            "best_of": _nullable({"type": "integer", "enum": [1]}),
        },
    }


_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {"error": {
        "type": "object", "required": ["message", "type", "param", "code"],
        "properties": {"message": {"type": "string"}, "type": {"type": "string"},
                       "param": {"type": ["string", "null"], "description": "the field, header or `body`"},
                       "code": {"type": ["string", "null"]},
                       "limit": {"type": "integer"}, "value": {"type": "integer"}},
    }},
}  # fmt: skip


def _errors(*statuses: int) -> dict[str, Any]:
    meaning = {
        400: "an invalid field (param names it)", 401: "no valid API key", 403: "a Host header not allowed",
        413: "the body exceeds --max-request-bytes", 415: "Content-Type is not application/json",
        429: "HTTP admission is full (Retry-After)",
        503: "scheduler admission rejection: permanent with param, limit and value (no Retry-After), "
             "or temporary while the server stops (Retry-After)",
        500: "model execution, device or output failure",
    }  # fmt: skip
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    return {str(s): {"description": meaning[s], "content": error} for s in statuses}


def openapi_document(*, served_id: str, aliases: tuple[str, ...] = (), context_tokens: int, vocab_size: int,
                     version: str) -> dict[str, Any]:  # fmt: skip
    names = [served_id, *aliases]
    posted = (400, 401, 403, 413, 415, 429, 500, 503)

    def post(summary: str, schema: str) -> dict[str, Any]:
        return {"post": {
            "summary": summary,
            "requestBody": {"required": True,
                            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}}},
            "responses": {"200": {"description": "the completion, or its server-sent events with stream: true",
                                  "content": {"application/json": {"schema": {"type": "object"}},
                                              "text/event-stream": {"schema": {"type": "string"}}}},
                          **_errors(*posted)},
        }}  # fmt: skip

    def get(summary: str, media: str = "application/json", *extra: int) -> dict[str, Any]:
        return {"get": {"summary": summary, "responses": {
            "200": {"description": summary, "content": {media: {"schema": {"type": "object" if media.endswith("json") else "string"}}}},
            **_errors(*extra)}}}  # fmt: skip

    return {
        "openapi": "3.1.0",
        "info": {"title": "Helios", "version": version,
                 "description": f"OpenAI-compatible API serving {served_id!r} (context {context_tokens} tokens)"},
        "components": {
            "schemas": {"ChatCompletionRequest": chat_request_schema(context_tokens, names, vocab_size),
                        "CompletionRequest": completion_request_schema(context_tokens, names, vocab_size),
                        "Error": _ERROR},
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },  # fmt: skip
        "paths": {
            "/v1/chat/completions": post("chat completion", "ChatCompletionRequest"),
            "/v1/completions": post("text completion of one prompt", "CompletionRequest"),
            "/v1/models": get("the served id, then its aliases", "application/json", 401, 403),
            "/health": get("200 while the model worker runs, else 503", "application/json", 403, 503),
            "/metrics": get("Prometheus text", "text/plain", 401, 403),
            "/openapi.json": get("this document", "application/json", 401, 403),
        },
    }
