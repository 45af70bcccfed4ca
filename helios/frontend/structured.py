"""Structured output through llguidance (host side): `response_format` json_object / json_schema and
`tool_choice` required or named.

Owns: `StructuredOutput` (what a request asks for) and `structured_output_from` (its OpenAI request
fields, validated), `build_grammar` (one Lark grammar combining the frontend's reasoning and tool
envelope with the constrained answer), `GrammarCompiler` (the llguidance tokenizer of one served
model) and `GrammarState` (one request's matcher: the next grammar mask, advanced with each
validated token), and `StructuredAnswerGate` (the answer stays an opaque document: tool calls are
read only where the answer begins with the tool opener).

The grammar, per frontend (docs/syntaxes.md writes each out):

    start: reasoning? rest                     think tags: reasoning stays free (any token but the
                                               close delimiter, the terminal marker and EOS)
    rest: answer | calls                       response_format, with the request's tools allowed
    rest: calls                                tool_choice "required"; a named choice: one call
    answer: %json {schema}                     json_schema; json_object is {"type": "object"}
    calls: call (sep call)*                    each call in the tool syntax's tags, the name one of
                                               the registered tools, parameters in schema order
                                               (required ones present), string values free text,
                                               other values %json of the parameter's schema

Recipient-header frames keep their frames: reasoning (`self`) and tool (`functions`) frames closed by
`<|eom|>`, then the constrained answer in a `user` frame. A delimiter the tokenizer encodes as one
token is written as that token (`<[id]>`), so its plain spelling inside the answer stays answer
text. Masks are computed on the host with `llguidance.numpy` (`llguidance.torch` compiles at first
use, and host code imports no torch).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from helios.errors import HeliosError
from helios.frontend.detokenize import Piece
from helios.frontend.errors import InvalidFieldType, InvalidFieldValue
from helios.frontend.syntaxes.recipient import BETWEEN, BODY, HEADER, FrameState, frame_recipient
from helios.frontend.syntaxes.selection import tag_layout
from helios.frontend.syntaxes.tagged import TagLayout
from helios.frontend.tool_calls import ContentText, parameter_schemas
from helios.proto import contract_pb2

C = contract_pb2

JSON_OBJECT, JSON_SCHEMA, TOOL_REQUIRED, TOOL_NAMED = "json_object", "json_schema", "tool_required", "tool_named"


class GrammarUnavailable(HeliosError):
    """Structured output cannot be built for this frontend or prompt state (the message says why)."""


class GrammarViolation(HeliosError):
    """A sampled token the grammar mask did not allow: the mask was not applied (an execution fault)."""


@dataclass(frozen=True, slots=True)
class StructuredOutput:
    """What a request constrains: a JSON answer, or a tool call."""

    kind: str  # JSON_OBJECT, JSON_SCHEMA, TOOL_REQUIRED or TOOL_NAMED
    schema: Mapping[str, Any] | None = None  # JSON_SCHEMA: the answer's schema
    tool_name: str | None = None  # TOOL_NAMED: the function to call
    tools: tuple[Mapping[str, Any], ...] = ()  # the request's tools (OpenAI shape)
    allow_tools: bool = False  # a JSON answer may instead call the request's tools (tool_choice auto)

    def __post_init__(self) -> None:
        if self.kind not in (JSON_OBJECT, JSON_SCHEMA, TOOL_REQUIRED, TOOL_NAMED):
            raise ValueError(f"unknown structured output kind {self.kind!r}")
        if (self.kind == JSON_SCHEMA) != (self.schema is not None):
            raise ValueError("a json_schema answer, and only it, carries a schema")
        if (self.kind == TOOL_NAMED) != (self.tool_name is not None):
            raise ValueError("a named tool choice, and only it, carries a tool name")
        if self.kind in (TOOL_REQUIRED, TOOL_NAMED) and not self.tools:
            raise ValueError("a tool choice needs the request's tools")

    @property
    def forces_call(self) -> bool:
        return self.kind in (TOOL_REQUIRED, TOOL_NAMED)


def structured_output_from(
    response_format: Any, tool_choice: Any, tools: Sequence[Mapping[str, Any]]
) -> StructuredOutput | None:
    """The structured output of a chat request's fields, or None. Raises a `RequestFieldError`
    naming the field (HTTP 400). A forced tool call wins over a response format."""
    names = sorted(parameter_schemas(tools))
    if tool_choice == "required":
        if not tools:
            raise InvalidFieldValue("tool_choice", '"required" needs at least one tool in tools')
        return StructuredOutput(TOOL_REQUIRED, tools=tuple(tools))
    if isinstance(tool_choice, Mapping):
        function = tool_choice.get("function")
        name = function.get("name") if isinstance(function, Mapping) else None
        if tool_choice.get("type") != "function" or not isinstance(name, str):
            raise InvalidFieldValue("tool_choice", 'a named choice is {"type": "function", "function": {"name": ...}}')
        if name not in names:
            raise InvalidFieldValue("tool_choice.function.name", f"{name!r} is not one of the request's tools")
        return StructuredOutput(TOOL_NAMED, tool_name=name, tools=tuple(tools))
    if response_format is None:
        return None
    if not isinstance(response_format, Mapping) or not isinstance(response_format.get("type"), str):
        raise InvalidFieldType("response_format", "must be an object with a type")
    kind = response_format["type"]
    allow_tools = bool(tools) and tool_choice in (None, "auto")
    if kind == "text":
        return None
    if kind == "json_object":
        return StructuredOutput(JSON_OBJECT, tools=tuple(tools), allow_tools=allow_tools)
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, Mapping) else None
        if not isinstance(schema, Mapping):
            raise InvalidFieldValue("response_format.json_schema.schema", "must be a JSON schema object")
        return StructuredOutput(JSON_SCHEMA, schema=dict(schema), tools=tuple(tools), allow_tools=allow_tools)
    raise InvalidFieldValue("response_format.type", f'must be "text", "json_object" or "json_schema", got {kind!r}')


# -- the grammar -------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Lark:
    """Lark text under construction: rules, and how a delimiter is written."""

    token_id: Callable[[str], int | None]  # a delimiter's id when the tokenizer encodes it as one token
    eos_ids: tuple[int, ...]
    rules: list[str] = field(default_factory=list)
    count: int = 0

    def lit(self, text: str) -> str:
        token = self.token_id(text)
        return f"<[{token}]>" if token is not None else json.dumps(text)

    def rule(self, body: str, prefix: str = "r", *, stop: str | None = None) -> str:
        self.count += 1
        name = f"{prefix}_{self.count}"
        attribute = f"[stop={json.dumps(stop)}]" if stop is not None else ""
        self.rules.append(f"{name}{attribute}: {body}")
        return name

    def free_until(self, *delimiters: str) -> tuple[str, bool]:
        """Free text ending at the first delimiter: (rule, whether the rule consumes the first
        delimiter itself). One-token delimiters: any token but them and EOS; text delimiters: any
        text, stopped by the first one."""
        ids = [self.token_id(d) for d in delimiters]
        if all(i is not None for i in ids):
            excluded = ",".join(str(i) for i in sorted({*ids, *self.eos_ids}))  # type: ignore[misc]
            return self.rule(f"<[^{excluded}]>*", "free"), False
        return self.rule("/(?s:.*)/", "free", stop=delimiters[0]), True


def _json(schema: Mapping[str, Any]) -> str:
    document = dict(schema)
    document.setdefault("x-guidance", {"whitespace_flexible": False})
    return "%json " + json.dumps(document, ensure_ascii=False)


def _answer(lark: _Lark, structured: StructuredOutput) -> str:
    schema = structured.schema if structured.kind == JSON_SCHEMA else {"type": "object"}
    return lark.rule(_json(schema or {}), "answer")


def _call(lark: _Lark, layout: TagLayout, name: str, properties: Mapping[str, Any], required: set[str]) -> str:
    """One call of `name`, after its block's opener."""
    sep = f"{lark.lit(layout.separator)}?" if layout.separator else ""
    wrap = lark.lit("\n") if layout.wrapping_newlines else ""
    parts = [sep]
    if layout.invoke_open:
        parts += [lark.lit(layout.invoke_open), json.dumps(name), lark.lit(layout.invoke_name_close), sep]
    else:
        parts += [json.dumps(name), lark.lit(layout.invoke_name_close) if layout.invoke_name_close else ""]
    for key, schema in properties.items():
        string = isinstance(schema, Mapping) and schema.get("type") == "string"
        head = [lark.lit(layout.parameter_open), json.dumps(key), lark.lit(layout.parameter_name_close)]
        if layout.flag_open:
            flag = layout.string_flag if string else layout.json_flag
            head += [lark.lit(layout.flag_open), json.dumps(flag), lark.lit(layout.flag_close)]
        if layout.value_open:
            head += [sep, lark.lit(layout.value_open)]
        if string:
            if wrap:  # a wrapped string value ends with the newline before the close tag
                body, consumed = lark.free_until("\n" + layout.value_close)
            else:
                body, consumed = lark.free_until(layout.value_close)
            value = [wrap, body] + ([] if consumed else [lark.lit(layout.value_close)])
        else:
            json_schema = schema if isinstance(schema, Mapping) and schema else {}
            value = [wrap, lark.rule(_json(json_schema), "value"), wrap, lark.lit(layout.value_close)]
        parameter = lark.rule(" ".join(p for p in [*head, *value, sep] if p), "parameter")
        parts.append(parameter if key in required else f"{parameter}?")
    if layout.invoke_close:
        parts += [lark.lit(layout.invoke_close), sep]
    parts.append(lark.lit(layout.closer))
    return lark.rule(" ".join(p for p in parts if p), "call")


def _calls(lark: _Lark, layout: TagLayout, structured: StructuredOutput, *, many: bool) -> tuple[str, str]:
    """(the calls, the calls after an opener already generated: the terminal marker's case)."""
    calls = []
    for tool in structured.tools:
        function = tool.get("function", {})
        name = function.get("name")
        if not isinstance(name, str) or (structured.tool_name is not None and name != structured.tool_name):
            continue
        parameters = function.get("parameters") or {}
        properties = parameters.get("properties") or {} if isinstance(parameters, Mapping) else {}
        required = set(parameters.get("required") or ()) if isinstance(parameters, Mapping) else set()
        calls.append(_call(lark, layout, name, properties, required))
    if not calls:
        raise GrammarUnavailable("no registered tool can be called")
    after_opener = lark.rule(" | ".join(calls), "call_after_opener")
    one = lark.rule(f"{lark.lit(layout.opener)} {after_opener}", "one_call")
    if not many:
        return one, after_opener
    between = lark.lit(layout.separator) + "?" if layout.separator else ""
    return lark.rule(f"{one} ({between} {one})*", "calls"), lark.rule(f"{after_opener} ({between} {one})*", "calls")


def build_grammar(
    frontend: C.FrontendContract,
    structured: StructuredOutput,
    *,
    token_id: Callable[[str], int | None],
    eos_ids: Sequence[int],
    reasoning_open: bool = False,
    reasoning_closed: bool = False,
    frame: FrameState | None = None,
) -> str:
    """The Lark grammar of one constrained response (see the module docstring). `reasoning_open`:
    the prompt opened reasoning; `reasoning_closed`: the prompt already closed it (no reasoning)."""
    lark = _Lark(token_id, tuple(eos_ids))
    if frontend.reasoning_parser == C.REASONING_PARSER_RECIPIENT_HEADER:
        start = _recipient_start(lark, frontend, structured, frame or FrameState())
        return "\n".join([f"start: {start}", *lark.rules]) + "\n"
    layout = tag_layout(frontend)
    tools_allowed = structured.forces_call or structured.allow_tools
    if tools_allowed and layout is None:
        raise GrammarUnavailable("the frontend declares no tool syntax to call tools in")
    calls, after_opener = (
        _calls(lark, layout, structured, many=structured.kind != TOOL_NAMED) if tools_allowed else (None, None)  # type: ignore[arg-type]
    )
    if structured.forces_call:
        rest = calls
    else:
        answer = _answer(lark, structured)
        rest = f"{answer} | {calls}" if calls else answer
    rest_rule = lark.rule(str(rest), "rest")
    reasoning = frontend.reasoning_syntax
    thinks = frontend.reasoning_parser in (C.REASONING_PARSER_THINK, C.REASONING_PARSER_XTML_THINK)
    if thinks and reasoning.close and not reasoning_closed:
        lead = lark.rule('"\\n"? "\\n"?', "gap")  # the wrapping newlines after the close delimiter
        opener = frontend.tool_syntax.opener
        ends = [reasoning.close] + ([opener] if opener and lark.token_id(opener) is not None else [])
        body, consumed = lark.free_until(*ends)
        close = "" if consumed else lark.lit(reasoning.close)
        thought = f"{body} {close} {lead} {rest_rule}"
        if calls is not None and not consumed and lark.token_id(opener) is not None:
            # the terminal marker (the tool opener, one token) ends reasoning implicitly
            thought += f" | {body} {calls}"
        elif calls is not None and consumed and lark.token_id(opener) is None:
            # text delimiters: reasoning stopped by the opener text instead of the close delimiter
            thought += f" | {lark.rule('/(?s:.*)/', 'free', stop=opener)} {after_opener}"
        if reasoning_open:
            start = thought
        else:
            start = f"{lark.lit(reasoning.open)} ({thought}) | {rest_rule}"
    else:
        start = rest_rule
    return "\n".join([f"start: {start}", *lark.rules]) + "\n"


def prompt_closed_reasoning(prompt: str, frontend: C.FrontendContract) -> bool:
    """Whether the prompt's open assistant envelope already holds a closed reasoning block (e.g. a
    template that disables thinking writes an empty one): the answer follows directly. Same scope
    as the initial reasoning state: the text after the last assistant open and message end."""
    syntax, envelope = frontend.reasoning_syntax, frontend.prompt_syntax.assistant_open
    if not envelope or not syntax.close or (start := prompt.rfind(envelope)) < 0:
        return False
    tail = prompt[start + len(envelope) :]
    end = frontend.prompt_syntax.message_end
    if end and (last := tail.rfind(end)) >= 0:
        tail = tail[last + len(end) :]
    closed = tail.rfind(syntax.close)
    return closed >= 0 and closed > tail.rfind(syntax.open) if syntax.open else closed >= 0


def _recipient_start(lark: _Lark, frontend: C.FrontendContract, structured: StructuredOutput, frame: FrameState) -> str:
    p, r = frontend.prompt_syntax, frontend.reasoning_syntax
    role = p.assistant_open[len(p.header_start) :] if p.assistant_open.startswith(p.header_start) else ""
    if frame.state == HEADER and frame.header.strip() != role.strip():
        raise GrammarUnavailable(f"the prompt leaves a header {frame.header!r} open that is not the assistant's")
    layout = tag_layout(frontend)
    reasoning_body, consumed = lark.free_until(p.internal_end, p.header_start)
    eom = "" if consumed else lark.lit(p.internal_end)

    def header(recipient: str, opened: bool) -> str:
        suffix = json.dumps(r.recipient_open + recipient)
        return suffix if opened else f"{lark.lit(p.header_start)} {json.dumps(role)} {suffix}"

    def frames(opened: bool) -> tuple[str, str, str]:
        message = lark.lit(p.header_message)
        thought = f"{header(r.reasoning_recipient, opened)} {message} {reasoning_body} {eom}"
        call = ""
        if (structured.forces_call or structured.allow_tools) and layout is not None:
            one, _ = _calls(lark, layout, structured, many=False)
            call = f"{header(r.tool_recipient, opened)} {message} {one} {lark.lit(p.internal_end)}"
        answer = ""
        if not structured.forces_call:
            user = r.content_recipients[-1] if r.content_recipients else "user"
            answer = f"{header(user, opened)} {message} {_answer(lark, structured)}"
        return thought, call, answer

    thought, call, answer = frames(opened=False)
    later = [x for x in (thought, call) if x]
    loop = lark.rule(" | ".join(later), "frame")
    # generation ends after the answer frame, or after a call frame (the call awaits its result)
    ends = [x for x in (answer, call) if x]
    tail = lark.rule(f"{loop}* ({' | '.join(ends)})", "tail")
    if frame.state == BETWEEN:
        return tail
    if frame.state == BODY:  # the prompt opened a body: it continues, then the frames as usual
        recipient = frame_recipient(frame.header, frontend)
        named = r.tool_recipient + r.tool_recipient_separator
        if recipient in (r.reasoning_recipient, *r.content_recipients[:-1]):
            return f"{reasoning_body} {eom} {tail}"
        if recipient == (r.content_recipients[-1] if r.content_recipients else "user"):
            if structured.forces_call:
                raise GrammarUnavailable("the prompt opened the answer frame, but the request forces a tool call")
            return _answer(lark, structured)
        if recipient and (recipient == r.tool_recipient or recipient.startswith(named)) and layout is not None:
            if not (structured.forces_call or structured.allow_tools):
                raise GrammarUnavailable("the prompt opened a tool frame, but the request allows no tool call")
            if recipient.startswith(named):  # a named recipient: the invocation must be that name
                name = recipient[len(named) :]
                if structured.tool_name not in (None, name):
                    raise GrammarUnavailable(f"the prompt opened a frame for {name!r}, the request forces another tool")
                structured = replace(structured, kind=TOOL_NAMED, schema=None, tool_name=name)
            one, _ = _calls(lark, layout, structured, many=False)
            return f"{one} {lark.lit(p.internal_end)} ({tail})?"
        raise GrammarUnavailable(f"the prompt opened a frame for {recipient!r}, which no grammar continues")
    first_thought, first_call, first_answer = frames(opened=True)
    options = [f"{first_thought} {tail}"]
    if first_call:
        options.append(f"{first_call} ({tail})?")
    if first_answer:
        options.append(first_answer)
    return " | ".join(options)


def added_token_ids(tokenizer: Any) -> dict[str, int]:
    """Text -> id of every added (special or control) token of a `tokenizers.Tokenizer`: a grammar
    writes a delimiter that is one of them as that token, the way the model produces it."""
    return {token.content: token_id for token_id, token in tokenizer.get_added_tokens_decoder().items()}


# -- matching ------------------------------------------------------------------------------------------


class GrammarCompiler:
    """The llguidance tokenizer of one served model; builds one `GrammarState` per request."""

    def __init__(self, tokenizer_json: str, *, eos_ids: Sequence[int], vocab_size: int, mask_words: int) -> None:
        import llguidance

        if not eos_ids:
            raise GrammarUnavailable("the core declares no EOS id: a grammar could never end")
        self.mask_words = mask_words  # int32 words of the core's grammar-mask rows
        self.eos_ids = tuple(eos_ids)
        # NOTE: the model's sampled range may exceed the tokenizer's ids; n_vocab covers it, and
        # ids without bytes are allowed only where the grammar allows any token.
        from tokenizers import Tokenizer

        tokenizer_ids = Tokenizer.from_str(tokenizer_json).get_vocab_size(with_added_tokens=True)
        self.vocab_size = max(vocab_size, tokenizer_ids)  # mask rows are cut to `mask_words`
        self._tokenizer = llguidance.LLTokenizer(tokenizer_json, n_vocab=self.vocab_size, eos_token=list(eos_ids))

    def state(self, grammar: str) -> GrammarState:
        import llguidance

        compiled = llguidance.LLMatcher.grammar_from_lark(grammar)
        error = llguidance.LLMatcher.validate_grammar(compiled, self._tokenizer)
        if error:
            raise GrammarUnavailable(f"the structured-output grammar does not compile: {error.strip()}")
        matcher = llguidance.LLMatcher(self._tokenizer, compiled, log_level=0)
        if matcher.is_error():
            raise GrammarUnavailable(f"the structured-output grammar does not start: {matcher.get_error()}")
        return GrammarState(matcher, self.vocab_size, self.mask_words)


class GrammarState:
    """One request's matcher: `mask()` before each sampling round, `advance(token)` after each
    validated token. Not shared between threads: the model worker owns it while the request runs."""

    __slots__ = ("_mask", "_matcher", "_words", "consumed")

    def __init__(self, matcher: Any, vocab_size: int, mask_words: int) -> None:
        import llguidance.numpy

        self._matcher = matcher
        self._words = mask_words
        self._mask = llguidance.numpy.allocate_token_bitmask(1, vocab_size)
        self.consumed = 0  # tokens advanced

    def mask(self) -> tuple[int, ...]:
        """The allowed ids of the next token as `mask_words` int32 words (bit t % 32 of word t // 32)."""
        import llguidance.numpy

        llguidance.numpy.fill_next_token_bitmask(self._matcher, self._mask, 0)
        words = [int(w) for w in self._mask[0]]
        if len(words) < self._words:
            words += [0] * (self._words - len(words))
        return tuple(words[: self._words])

    def fork(self) -> GrammarState:
        """A copy of this state (`LLMatcher.deep_copy`): advancing it leaves this one unchanged. A
        copy rather than `rollback`, which miscounts an EOS consumed after the grammar stopped."""
        fork = GrammarState(self._matcher.deep_copy(), self._mask.shape[1] * 32, self._words)
        fork.consumed = self.consumed
        return fork

    def advance(self, token: int) -> None:
        if not self._matcher.consume_token(token):
            raise GrammarViolation(
                f"token {token} after {self.consumed} constrained tokens is outside the grammar mask: "
                f"{self._matcher.get_error()}"
            )
        self.consumed += 1

    @property
    def stopped(self) -> bool:
        """The grammar is complete: only EOS can follow."""
        return bool(self._matcher.is_stopped())

    @property
    def accepting(self) -> bool:
        return bool(self._matcher.is_accepting())


# -- the parsed answer -----------------------------------------------------------------------------------


class StructuredAnswerGate:
    """A tool parser wrapper for structured answers: the answer is read as tool calls only when its
    first non-whitespace text is the tool opener (the grammar's `calls`); any other answer is an
    opaque document whose literal tags stay content."""

    def __init__(self, tools: Any, opener: str) -> None:
        self._tools = tools
        self._opener = opener
        self._held: list[Piece] = []
        self._mode = "undecided"  # then "tools" or "content"

    @property
    def calls(self) -> int:
        return self._tools.calls

    def feed(self, piece: Piece) -> list[Any]:
        if self._mode == "tools":
            return self._tools.feed(piece)
        if self._mode == "content":
            return [ContentText(piece.text)] if piece.text else []
        self._held.append(piece)
        text = "".join(p.text for p in self._held).lstrip()
        if not text or (self._opener.startswith(text) and len(text) < len(self._opener)):
            return []
        self._mode = "tools" if self._opener and text.startswith(self._opener) else "content"
        held, self._held = self._held, []
        out: list[Any] = []
        for piece in held:
            out += self.feed(piece)
        return out

    def finish(self) -> list[Any]:
        if self._mode == "undecided":
            self._mode = "content"
            held, self._held = self._held, []
            out: list[Any] = []
            for piece in held:
                out += self.feed(piece)
            return out
        return self._tools.finish() if self._mode == "tools" else []
