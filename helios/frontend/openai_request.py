"""OpenAI request bodies (host side): decoded JSON in, validated typed requests out.

Owns: `ChatRequest`, `CompletionRequest`, `SamplingOptions` and their parsers. Every rejection is a
`RequestFieldError` naming the field (the server answers 400 with an OpenAI-style error body).
Unknown top-level fields are ignored, as OpenAI-compatible servers do; known fields are checked
strictly: observation flags and `include_usage` accept only booleans or null (null means false),
and string stops cannot be combined with token stops or structured output.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from helios.frontend.errors import (
    IncompatibleOptions,
    InvalidFieldType,
    InvalidFieldValue,
    InvalidToolSchema,
    MissingField,
    RequestFieldError,
)
from helios.frontend.request_images import ImagePart
from helios.frontend.stops import StopSpec
from helios.frontend.structured import StructuredOutput, structured_output_from

ROLES = ("system", "developer", "user", "assistant", "tool")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    """A finite JSON number (NaN and the infinities, which Python's decoder accepts, are not)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _optional_bool(body: Mapping[str, Any], name: str, param: str | None = None) -> bool:
    value = body.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise InvalidFieldType(param or name, f"must be a boolean or null, got {json.dumps(value)}")
    return value


def _speculation(body: Mapping[str, Any]) -> bool:
    """Helios's extension `speculation` (OpenAI clients: `extra_body`): false opts the request out of
    learned speculation, so it decodes plainly; true or null (the default) lets the server choose."""
    value = body.get("speculation")
    if value is None:
        return True
    if not isinstance(value, bool):
        raise InvalidFieldType("speculation", f"must be a boolean or null, got {json.dumps(value)}")
    return value


def _optional_int(body: Mapping[str, Any], name: str, *, minimum: int | None = None) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if not _is_int(value):
        raise InvalidFieldType(name, f"must be an integer, got {json.dumps(value)}")
    if minimum is not None and value < minimum:
        raise InvalidFieldValue(name, f"must be >= {minimum}, got {value}")
    return value


def _optional_number(
    body: Mapping[str, Any], name: str, low: float, high: float, *, open_low: bool = False
) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if not _is_number(value):
        raise InvalidFieldType(name, f"must be a number, got {json.dumps(value)}")
    if (value <= low if open_low else value < low) or value > high:
        interval = f"{'(' if open_low else '['}{low:g}, {high:g}]"
        raise InvalidFieldValue(name, f"must lie in {interval}, got {value}")
    return float(value)


@dataclass(frozen=True, slots=True)
class SamplingOptions:
    """Sampling values the request gave (None: use the core default, then the runtime default)."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    seed: int | None = None


def _sampling(body: Mapping[str, Any]) -> SamplingOptions:
    top_k = _optional_int(body, "top_k", minimum=-1)
    seed = _optional_int(body, "seed")
    if seed is not None and not -(2**63) <= seed < 2**64:
        raise InvalidFieldValue("seed", "must fit in 64 bits")
    repetition = body.get("repetition_penalty")
    if repetition is not None and (not _is_number(repetition) or not 0 < repetition <= 10):
        raise InvalidFieldValue(
            "repetition_penalty", f"must be a number in (0, 10], got {json.dumps(repetition)}"
        )
    return SamplingOptions(
        temperature=_optional_number(body, "temperature", 0.0, 2.0),
        top_p=_optional_number(body, "top_p", 0.0, 1.0, open_low=True),
        top_k=None if top_k is None else max(top_k, 0),  # -1 and 0 both disable top-k
        min_p=_optional_number(body, "min_p", 0.0, 1.0),
        repetition_penalty=None if repetition is None else float(repetition),
        presence_penalty=_optional_number(body, "presence_penalty", -2.0, 2.0),
        frequency_penalty=_optional_number(body, "frequency_penalty", -2.0, 2.0),
        seed=seed,
    )


def _stops(body: Mapping[str, Any]) -> StopSpec:
    stop = body.get("stop")
    if stop is None:
        strings: tuple[str, ...] = ()
    elif isinstance(stop, str):
        strings = (stop,)
    elif isinstance(stop, list):
        for index, item in enumerate(stop):
            if not isinstance(item, str):
                raise InvalidFieldType(f"stop.{index}", f"must be a string, got {json.dumps(item)}")
        strings = tuple(stop)  # an empty array disables string stops
    else:
        raise InvalidFieldType("stop", "must be null, a string or an array of strings")
    token_ids = body.get("stop_token_ids")
    if token_ids is None:
        token_ids = []
    if not isinstance(token_ids, list) or not all(_is_int(t) for t in token_ids):
        raise InvalidFieldType("stop_token_ids", "must be an array of integer token ids")
    sequences = body.get("stop_token_sequences")
    if sequences is None:
        sequences = []
    if not isinstance(sequences, list):
        raise InvalidFieldType("stop_token_sequences", "must be an array of arrays of integer token ids")
    for index, sequence in enumerate(sequences):
        if not isinstance(sequence, list) or not all(_is_int(t) for t in sequence):
            raise InvalidFieldType(f"stop_token_sequences.{index}", "must be an array of integer token ids")
    return StopSpec(
        strings=strings, token_ids=tuple(token_ids), token_sequences=tuple(tuple(s) for s in sequences)
    )


def _max_tokens(body: Mapping[str, Any]) -> int | None:
    value = _optional_int(body, "max_completion_tokens", minimum=1)
    if value is None:
        value = _optional_int(body, "max_tokens", minimum=1)
    return value


def _stream_options(body: Mapping[str, Any], stream: bool) -> bool:
    options = body.get("stream_options")
    if options is None:
        return False
    if not isinstance(options, Mapping):
        raise InvalidFieldType("stream_options", "must be an object or null")
    if not stream:
        raise InvalidFieldValue("stream_options", "is only allowed when stream is true")
    return _optional_bool(options, "include_usage", "stream_options.include_usage")


def _model(body: Mapping[str, Any]) -> str | None:
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise InvalidFieldType("model", "must be a string")
    return model


def _n(body: Mapping[str, Any]) -> None:
    n = _optional_int(body, "n", minimum=1)
    if n not in (None, 1):
        raise InvalidFieldValue("n", "only n=1 is supported")


# -- chat ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChatRequest:
    model: str | None
    messages: tuple[dict[str, Any], ...]  # normalized for the chat template
    tools: tuple[dict[str, Any], ...] = ()
    parse_tools: bool = False  # tools given and tool_choice is not "none"
    stream: bool = False
    include_usage: bool = False
    max_tokens: int | None = None
    sampling: SamplingOptions = field(default_factory=SamplingOptions)
    stops: StopSpec = field(default_factory=StopSpec)
    return_token_ids: bool = False
    return_token_timestamps: bool = False
    ignore_eos: bool = False
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    structured: StructuredOutput | None = None  # response_format or a forced tool call: a grammar
    prompt_logprobs: int | None = None  # vLLM's extension: alternatives scored per prompt token; None: none
    speculation: bool = True  # Helios's extension: false decodes this request plainly (no learned speculation)
    # the user messages' image_url parts, in message order (their messages' content keeps an
    # {"type": "image"} part in each one's place, as transformers' processors pass them to templates)
    images: tuple[ImagePart, ...] = ()


def _image_url(part: Mapping[str, Any], param: str) -> str:
    image_url = part.get("image_url")
    url = image_url.get("url") if isinstance(image_url, Mapping) else image_url
    if not isinstance(url, str):
        raise InvalidFieldValue(f"{param}.image_url.url", "an image_url part needs {\"url\": \"data:image/...\"}")
    return url


def _content_text(content: Any, param: str, images: list[ImagePart] | None = None) -> str | list | None:
    """The message content for the template: a string, or with image parts (collected into
    `images`, which only a user message may carry) the parts, text and {"type": "image"}."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[dict[str, str]] = []
        with_images = False
        for index, part in enumerate(content):
            if isinstance(part, Mapping) and part.get("type") == "image_url":
                if images is None:
                    raise InvalidFieldValue(f"{param}.{index}", "only user messages carry image parts")
                images.append(ImagePart(f"{param}.{index}", _image_url(part, f"{param}.{index}")))
                parts.append({"type": "image"})
                with_images = True
                continue
            if (
                not isinstance(part, Mapping)
                or part.get("type") != "text"
                or not isinstance(part.get("text"), str)
            ):
                raise InvalidFieldValue(f"{param}.{index}", "only text and image_url content parts are supported")
            parts.append({"type": "text", "text": part["text"]})
        if with_images:
            return parts
        return "".join(p["text"] for p in parts)
    raise InvalidFieldType(param, "must be a string, an array of text and image_url parts, or null")


def _tool_calls(calls: Any, param: str) -> list[dict[str, Any]]:
    if not isinstance(calls, list):
        raise InvalidFieldType(param, "must be an array")
    normalized = []
    for index, call in enumerate(calls):
        where = f"{param}.{index}"
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            raise InvalidFieldValue(where, "must be {type: function, function: {name, arguments}}")
        arguments = function.get("arguments", "{}")
        if isinstance(arguments, str):
            # NOTE: clients send arguments as JSON text; templates iterate them as a mapping
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except (json.JSONDecodeError, RecursionError):
                raise InvalidFieldValue(f"{where}.function.arguments", "is not valid JSON") from None
        if not isinstance(arguments, Mapping):
            raise InvalidFieldType(f"{where}.function.arguments", "must be a JSON object (or its JSON text)")
        normalized.append(
            {
                "id": call.get("id"),
                "type": "function",
                "function": {"name": function["name"], "arguments": arguments},
            }
        )
    return normalized


def _messages(value: Any, images: list[ImagePart]) -> tuple[dict[str, Any], ...]:
    if value is None:
        raise MissingField("messages", "is required")
    if not isinstance(value, list) or not value:
        raise InvalidFieldValue("messages", "must be a non-empty array")
    messages = []
    for index, message in enumerate(value):
        param = f"messages.{index}"
        if not isinstance(message, Mapping):
            raise InvalidFieldType(param, "must be an object")
        role = message.get("role")
        if role not in ROLES:
            raise InvalidFieldValue(
                f"{param}.role", f"must be one of {', '.join(ROLES)}, got {json.dumps(role)}"
            )
        normalized: dict[str, Any] = {"role": "system" if role == "developer" else role}
        content = _content_text(message.get("content"), f"{param}.content", images if role == "user" else None)
        if content is None and role in ("system", "developer", "user", "tool"):
            raise MissingField(f"{param}.content", f"a {role} message needs content")
        normalized["content"] = content
        for key in ("name", "tool_call_id", "reasoning_content"):
            if message.get(key) is not None:
                if not isinstance(message[key], str):
                    raise InvalidFieldType(f"{param}.{key}", "must be a string")
                normalized[key] = message[key]
        if message.get("tool_calls") is not None:
            if role != "assistant":
                raise InvalidFieldValue(f"{param}.tool_calls", "only assistant messages carry tool calls")
            normalized["tool_calls"] = _tool_calls(message["tool_calls"], f"{param}.tool_calls")
        messages.append(normalized)
    return tuple(messages)


def _tools(value: Any) -> tuple[dict[str, Any], ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise InvalidFieldType("tools", "must be an array")
    tools = []
    for index, tool in enumerate(value):
        param = f"tools.{index}"
        if not isinstance(tool, Mapping) or tool.get("type") != "function":
            raise InvalidFieldValue(param, 'must be {"type": "function", "function": {...}}')
        function = tool.get("function")
        if (
            not isinstance(function, Mapping)
            or not isinstance(function.get("name"), str)
            or not function["name"]
        ):
            raise InvalidFieldValue(f"{param}.function.name", "must be a non-empty string")
        if function.get("description") is not None and not isinstance(function["description"], str):
            raise InvalidFieldType(f"{param}.function.description", "must be a string")
        _check_parameters(function.get("parameters"), f"{param}.function.parameters")
        tools.append(json.loads(json.dumps(tool)))
    return tuple(tools)


def _check_parameters(parameters: Any, param: str) -> None:
    """The parts of a function's parameter schema that tool parsing and the structured-output grammar
    read: an object schema whose `properties` map names to schemas and whose `required` lists names.
    (The rest of the schema is llguidance's to compile; a schema it cannot compile is a 400 too.)"""
    if parameters is None:
        return
    if not isinstance(parameters, Mapping):
        raise InvalidToolSchema(param, "must be a JSON schema object")
    if parameters.get("type") not in (None, "object"):
        raise InvalidToolSchema(f"{param}.type", f'must be "object", got {json.dumps(parameters["type"])}')
    properties = parameters.get("properties")
    if properties is not None:
        if not isinstance(properties, Mapping):
            raise InvalidToolSchema(f"{param}.properties", "must be an object mapping parameter names to schemas")
        for name, schema in properties.items():
            where = f"{param}.properties.{name}"
            if not isinstance(schema, Mapping | bool):
                raise InvalidToolSchema(where, "must be a JSON schema (an object or a boolean)")
            kind = schema.get("type") if isinstance(schema, Mapping) else None
            if kind is not None and not (
                isinstance(kind, str) or (isinstance(kind, list) and kind and all(isinstance(k, str) for k in kind))
            ):
                raise InvalidToolSchema(f"{where}.type", "must be a type name or an array of type names")
    required = parameters.get("required")
    if required is not None:
        if not isinstance(required, list):
            raise InvalidToolSchema(f"{param}.required", "must be an array of parameter names")
        for index, name in enumerate(required):
            if not isinstance(name, str):
                raise InvalidToolSchema(f"{param}.required.{index}", f"must be a parameter name, got {json.dumps(name)}")


def _tool_choice(body: Mapping[str, Any], tools: Sequence[Any]) -> bool:
    """Whether tool calls are parsed. "required" and a named function force a call through a grammar
    (`structured_output_from`)."""
    choice = body.get("tool_choice")
    if choice is None or choice == "auto":
        return bool(tools)
    if choice == "none":
        return False
    if choice == "required" or isinstance(choice, Mapping):
        return True
    raise InvalidFieldValue("tool_choice", 'must be "none", "auto", "required" or a named function')


def _structured_output(body: Mapping[str, Any]) -> bool:
    response_format = body.get("response_format")
    if response_format is None:
        return False
    if not isinstance(response_format, Mapping) or not isinstance(response_format.get("type"), str):
        raise InvalidFieldType("response_format", "must be an object with a type")
    return response_format["type"] != "text"


_GENERATED_LOGPROBS = ("log probabilities of generated tokens are not supported (prompt scores are: "
                       "prompt_logprobs, or echo with max_tokens 0 on /v1/completions)")


def _unsupported(body: Mapping[str, Any]) -> None:
    if body.get("logprobs") not in (None, False):
        raise InvalidFieldValue("logprobs", _GENERATED_LOGPROBS)
    if body.get("top_logprobs") is not None:
        raise InvalidFieldValue("top_logprobs", _GENERATED_LOGPROBS)


def _prompt_logprobs(body: Mapping[str, Any], stream: bool) -> int | None:
    """vLLM's `prompt_logprobs` extension: the alternatives scored per prompt token (0: each prompt
    token's own log-probability only), returned in whole responses."""
    value = _optional_int(body, "prompt_logprobs", minimum=0)
    if value is not None and stream:
        raise IncompatibleOptions("prompt_logprobs", "prompt scores are returned in whole responses; set stream "
                                  "to false")
    return value


def parse_chat_request(body: Any) -> ChatRequest:
    if not isinstance(body, Mapping):
        raise InvalidFieldType("body", "the request body must be a JSON object")
    stream = _optional_bool(body, "stream")
    stops = _stops(body)
    structured = _structured_output(body)
    tools = _tools(body.get("tools"))
    parse_tools = _tool_choice(body, tools)
    constrained = structured_output_from(body.get("response_format"), body.get("tool_choice"), tools)
    if (structured or constrained is not None) and stops.strings:
        raise IncompatibleOptions("stop", "string stops cannot be combined with structured output")
    _n(body)
    _unsupported(body)
    return_token_ids = _optional_bool(body, "return_token_ids")
    return_token_timestamps = _optional_bool(body, "return_token_timestamps")
    if return_token_timestamps and not return_token_ids:
        raise IncompatibleOptions("return_token_timestamps", "requires return_token_ids=true")
    kwargs = body.get("chat_template_kwargs")
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise InvalidFieldType("chat_template_kwargs", "must be an object")
    reserved = {"messages", "tools", "add_generation_prompt", "bos_token", "eos_token"} & set(kwargs or {})
    if reserved:
        raise InvalidFieldValue("chat_template_kwargs", f"cannot set {', '.join(sorted(reserved))}")
    images: list[ImagePart] = []
    messages = _messages(body.get("messages"), images)
    return ChatRequest(
        model=_model(body),
        messages=messages,
        tools=tools,
        parse_tools=parse_tools,
        stream=stream,
        include_usage=_stream_options(body, stream),
        max_tokens=_max_tokens(body),
        sampling=_sampling(body),
        stops=stops,
        return_token_ids=return_token_ids,
        return_token_timestamps=return_token_timestamps,
        ignore_eos=_optional_bool(body, "ignore_eos"),
        template_kwargs=dict(kwargs or {}),
        structured=constrained,
        prompt_logprobs=_prompt_logprobs(body, stream),
        speculation=_speculation(body),
        images=tuple(images),
    )


# -- completions -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CompletionRequest:
    model: str | None
    prompt: str | tuple[int, ...]  # text, or token ids
    stream: bool = False
    include_usage: bool = False
    max_tokens: int | None = None
    sampling: SamplingOptions = field(default_factory=SamplingOptions)
    stops: StopSpec = field(default_factory=StopSpec)
    ignore_eos: bool = False
    echo: bool = False  # the response's text (and its logprobs) starts with the prompt
    # prompt scores: the alternatives scored per prompt token (`logprobs` with echo, or vLLM's
    # `prompt_logprobs`); None: none
    prompt_logprobs: int | None = None
    echo_logprobs: bool = False  # the scores were asked as the legacy `logprobs` (returned in choices[0].logprobs)
    speculation: bool = True  # Helios's extension: false decodes this request plainly (no learned speculation)

    @property
    def scores_only(self) -> bool:
        """max_tokens 0 with echo: the prompt (and its scores) alone; the one token every prompt's
        last round samples is not returned."""
        return self.max_tokens == 0


DEFAULT_COMPLETION_TOKENS = 16  # OpenAI's default for /v1/completions


def parse_completion_request(body: Any) -> CompletionRequest:
    if not isinstance(body, Mapping):
        raise InvalidFieldType("body", "the request body must be a JSON object")
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]
    if isinstance(prompt, str):
        if not prompt:
            raise InvalidFieldValue("prompt", "must be non-empty")
        parsed: str | tuple[int, ...] = prompt
    elif isinstance(prompt, list) and prompt and all(_is_int(t) and t >= 0 for t in prompt):
        parsed = tuple(prompt)
    elif prompt is None:
        raise MissingField("prompt", "is required")
    else:
        raise InvalidFieldValue("prompt", "must be a string, or an array of token ids (one prompt)")
    echo = _optional_bool(body, "echo")
    if body.get("suffix") is not None:
        raise InvalidFieldValue("suffix", "suffix is not supported")
    if body.get("best_of") not in (None, 1):
        raise InvalidFieldValue("best_of", "only best_of=1 is supported")
    _n(body)
    stream = _optional_bool(body, "stream")
    max_tokens = _optional_int(body, "max_tokens", minimum=0 if echo else 1)
    scores = _completion_scores(body, echo, max_tokens, stream)
    if echo and stream:
        raise IncompatibleOptions("echo", "echo is returned in whole responses; set stream to false")
    return CompletionRequest(
        model=_model(body),
        prompt=parsed,
        stream=stream,
        include_usage=_stream_options(body, stream),
        max_tokens=DEFAULT_COMPLETION_TOKENS if max_tokens is None else max_tokens,
        sampling=_sampling(body),
        stops=_stops(body),
        ignore_eos=_optional_bool(body, "ignore_eos"),
        echo=echo,
        prompt_logprobs=scores,
        echo_logprobs=body.get("logprobs") is not None,
        speculation=_speculation(body),
    )


def _completion_scores(body: Mapping[str, Any], echo: bool, max_tokens: int | None, stream: bool) -> int | None:
    """The prompt scores a completion asks for: the legacy `logprobs: k` with `echo: true` and
    `max_tokens: 0` (the prompt's tokens, each with its log-probability and top k), or vLLM's
    `prompt_logprobs`. Log probabilities of generated tokens are not served."""
    logprobs = body.get("logprobs")
    if logprobs is not None:
        if not _is_int(logprobs):
            raise InvalidFieldType("logprobs", f"must be an integer or null, got {json.dumps(logprobs)}")
        if logprobs < 0:
            raise InvalidFieldValue("logprobs", f"must be >= 0, got {logprobs}")
        if not echo or max_tokens != 0:
            raise InvalidFieldValue("logprobs", "log probabilities of generated tokens are not supported; with "
                                    "echo: true and max_tokens: 0 they score the prompt")
    prompt = _prompt_logprobs(body, stream)
    if logprobs is not None and prompt is not None and prompt != logprobs:
        raise IncompatibleOptions("prompt_logprobs", f"differs from logprobs ({prompt} and {logprobs})")
    return logprobs if logprobs is not None else prompt


__all__ = [
    "ChatRequest",
    "CompletionRequest",
    "RequestFieldError",
    "parse_chat_request",
    "parse_completion_request",
]
