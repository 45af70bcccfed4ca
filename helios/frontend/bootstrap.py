"""Bootstrap (host side): the frontend assets of one core, loaded and validated.

Owns: `Bootstrap`, which holds the tokenizer (the `tokenizers` JSON), the chat template (sandboxed
jinja2), the typed `FrontendContract` and the core's `ServingDefaults`; renders chats, encodes and
decodes text, reports the EOS ids, the single-token delimiters of the declared syntaxes, and the
prompt's initial reasoning state. It reads no checkpoint config and no model card: the only runtime
frontend assets are tokenizer data and the chat template, everything else is typed metadata.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tokenizers import Tokenizer

from helios.errors import HeliosError
from helios.frontend.template import ChatTemplate
from helios.proto import contract_pb2, core_pb2

if TYPE_CHECKING:  # names for annotations only: importing the frontend does not load helios.core
    from helios.core.source import CoreSource, ResourceEntry

_SUPPORTED_TOOL_PARSERS = (
    contract_pb2.TOOL_PARSER_NONE, contract_pb2.TOOL_PARSER_QWEN_CODER, contract_pb2.TOOL_PARSER_GLM,
    contract_pb2.TOOL_PARSER_DSML, contract_pb2.TOOL_PARSER_XTML, contract_pb2.TOOL_PARSER_ATEM,
)  # fmt: skip
_SUPPORTED_REASONING_PARSERS = (
    contract_pb2.REASONING_PARSER_NONE, contract_pb2.REASONING_PARSER_THINK,
    contract_pb2.REASONING_PARSER_XTML_THINK, contract_pb2.REASONING_PARSER_RECIPIENT_HEADER,
)  # fmt: skip
_THINK_PARSERS = (contract_pb2.REASONING_PARSER_THINK, contract_pb2.REASONING_PARSER_XTML_THINK)


class InvalidTokenizer(HeliosError):
    """The core's tokenizer data does not load."""


class MissingFrontendResource(HeliosError):
    """The core carries no tokenizer or no chat template resource (or more than one)."""


class UnsupportedFrontend(HeliosError):
    """The frontend contract selects a parser this build does not implement (or none at all)."""


class InvalidFrontendContract(HeliosError):
    """The frontend contract's syntax data is inconsistent with its parser selection or tokenizer."""


@dataclass(frozen=True, slots=True)
class Bootstrap:
    """The tokenizer, chat template and typed frontend settings of one core."""

    tokenizer_json: str  # the `tokenizers` JSON document
    chat_template: str  # jinja2 source
    frontend: contract_pb2.FrontendContract
    defaults: contract_pb2.ServingDefaults = field(default_factory=contract_pb2.ServingDefaults)
    tokenizer: Tokenizer = field(init=False, repr=False, compare=False)
    template: ChatTemplate = field(init=False, repr=False, compare=False)
    bos_token: str = field(init=False, repr=False, compare=False)  # template variable; "" if none

    def __post_init__(self) -> None:
        try:
            tokenizer = Tokenizer.from_str(self.tokenizer_json)
        except Exception as error:  # tokenizers raises a bare Exception for malformed JSON
            raise InvalidTokenizer(f"tokenizer resource does not load: {error}") from None
        object.__setattr__(self, "tokenizer", tokenizer)
        object.__setattr__(self, "template", ChatTemplate(self.chat_template))
        object.__setattr__(self, "bos_token", _leading_special_token(self.tokenizer_json))
        _validate_frontend(self.frontend, tokenizer)

    # -- loading ---------------------------------------------------------------------------------

    @classmethod
    def from_core(cls, core: CoreSource) -> Bootstrap:
        """Load from an opened core (`helios.core.open_core`): validate its prepared contract, then
        take the contract's frontend settings and defaults and its one tokenizer and one chat
        template resource."""
        from helios.contract import PreparedContract

        contract = core.contract
        PreparedContract.decode(contract, core.manifest)  # inconsistent contracts fail startup here
        tokenizer_json = _read_single(core, core_pb2.RESOURCE_KIND_TOKENIZER, "tokenizer")
        chat_template = _read_single(core, core_pb2.RESOURCE_KIND_CHAT_TEMPLATE, "chat template")
        return cls(
            tokenizer_json=tokenizer_json,
            chat_template=chat_template,
            frontend=contract.model.frontend,
            defaults=contract.defaults,
        )

    # -- text ------------------------------------------------------------------------------------

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        return tuple(self.frontend.eos_token_ids)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def render_chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        **template_kwargs: Any,
    ) -> str:
        """Render messages (OpenAI shape) with the chat template, as transformers would."""
        variables: dict[str, Any] = dict(template_kwargs)
        variables.update(
            messages=[dict(m) for m in messages],
            tools=[dict(t) for t in tools] if tools else None,
            add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token,
            eos_token=self._eos_text(),
        )
        return self.template.render(**variables)

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`. No special tokens are added: a template that needs BOS renders it
        (the `bos_token` variable), as transformers' apply_chat_template does."""
        return list(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def decode(self, token_ids: Sequence[int]) -> str:
        """The text of `token_ids`, special tokens included (whole-sequence decode)."""
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=False)

    def single_token_id(self, text: str) -> int | None:
        """The id of `text` when the tokenizer encodes it as exactly one token, else None."""
        if not text:
            return None
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        if len(ids) == 1 and self.tokenizer.decode(ids, skip_special_tokens=False) == text:
            return ids[0]
        return None

    def delimiter_markers(self) -> dict[int, str]:
        """Token id -> text of each declared delimiter the tokenizer encodes as one token: such a
        delimiter counts only when generated as that token. Reasoning open, close and terminal
        marker, and the tool syntax's opener (the terminal marker's other role); XTML think also follows
        the tool closer; recipient-header frames add their header controls."""
        candidates: list[str] = []
        if self.frontend.reasoning_parser in _THINK_PARSERS:
            syntax = self.frontend.reasoning_syntax
            candidates += [syntax.open, syntax.close, syntax.terminal_marker]
        if self.frontend.reasoning_parser == contract_pb2.REASONING_PARSER_XTML_THINK:
            candidates.append(self.frontend.tool_syntax.closer)
        if self.frontend.reasoning_parser == contract_pb2.REASONING_PARSER_RECIPIENT_HEADER:
            prompt = self.frontend.prompt_syntax
            candidates += [prompt.header_start, prompt.header_message, prompt.internal_end]
        if self.frontend.tool_parser != contract_pb2.TOOL_PARSER_NONE:
            candidates.append(self.frontend.tool_syntax.opener)
        markers: dict[int, str] = {}
        for text in candidates:
            token_id = self.single_token_id(text)
            if token_id is not None:
                markers[token_id] = text
        return markers

    # -- reasoning state -------------------------------------------------------------------------

    def prompt_opens_reasoning(self, prompt: str) -> bool:
        """Whether generation starts inside reasoning: the rendered prompt ends in an open assistant
        envelope whose open part opens reasoning and has not closed it. See `initial_reasoning_open`."""
        return initial_reasoning_open(prompt, self.frontend)

    def _eos_text(self) -> str:
        ids = self.eos_token_ids
        if not ids:
            return ""
        return self.tokenizer.id_to_token(ids[0]) or ""


def initial_reasoning_open(prompt: str, frontend: contract_pb2.FrontendContract) -> bool:
    """The prompt's initial reasoning state, from the frontend's syntax data.

    Only an open assistant envelope counts: the text after the last `assistant_open`. Completed user,
    tool and assistant messages end with `message_end`, so only the text after the last message end
    inside that envelope can open reasoning; this also covers a template that resumes the assistant
    turn after an embedded tool response. In that text reasoning is open when the last reasoning
    open delimiter comes after the last close delimiter and after the last terminal marker.

        ...<|im_start|>assistant\\n<think>\\n        -> open
        ...<|im_start|>assistant\\n<think>..</think> -> closed
        ...<|im_start|>assistant\\nhi<|im_end|>\\n   -> closed (completed message)
    """
    if frontend.reasoning_parser not in _THINK_PARSERS:
        return False
    syntax = frontend.reasoning_syntax
    envelope = frontend.prompt_syntax.assistant_open
    if not envelope or not syntax.open:
        return False
    start = prompt.rfind(envelope)
    if start < 0:
        return False
    tail = prompt[start + len(envelope) :]
    end_marker = frontend.prompt_syntax.message_end
    if end_marker:
        last_end = tail.rfind(end_marker)
        if last_end >= 0:
            tail = tail[last_end + len(end_marker) :]
    opened = tail.rfind(syntax.open)
    if opened < 0:
        return False
    closed = max(
        tail.rfind(syntax.close) if syntax.close else -1,
        tail.rfind(syntax.terminal_marker) if syntax.terminal_marker else -1,
    )
    return opened > closed


def _read_single(core: CoreSource, kind: int, what: str) -> str:
    ids = [r.id for r in _core_resources(core) if r.kind == kind]
    if len(ids) != 1:
        raise MissingFrontendResource(f"the core must carry exactly one {what} resource, found {len(ids)}")
    data = core.read(ids[0])
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError as error:
        raise MissingFrontendResource(f"{what} resource {ids[0]!r} is not UTF-8: {error}") from None


def _core_resources(core: CoreSource) -> list[ResourceEntry]:
    """The ExecutableResource entries of an opened core."""
    resources = getattr(core, "resources", None)
    if resources is None:
        raise MissingFrontendResource("the opened core lists no resources")
    return list(resources.values()) if isinstance(resources, Mapping) else list(resources)


def _leading_special_token(tokenizer_json: str) -> str:
    """The special token the tokenizer's post-processor puts before a single sequence (BOS), or "".

    Templates render `bos_token` themselves; encoding then adds nothing."""
    try:
        document = json.loads(tokenizer_json)
    except json.JSONDecodeError:
        return ""

    def search(processor: Any) -> str:
        if not isinstance(processor, dict):
            return ""
        if processor.get("type") == "Sequence":
            for inner in processor.get("processors", []):
                found = search(inner)
                if found:
                    return found
            return ""
        if processor.get("type") == "TemplateProcessing":
            single = processor.get("single") or []
            if single and isinstance(single[0], dict) and "SpecialToken" in single[0]:
                return str(single[0]["SpecialToken"].get("id", ""))
        if processor.get("type") in ("BertProcessing", "RobertaProcessing"):
            cls = processor.get("cls")
            if isinstance(cls, list) and cls:
                return str(cls[0])
        return ""

    return search(document.get("post_processor"))


_TAG_PARSERS = (
    contract_pb2.TOOL_PARSER_GLM, contract_pb2.TOOL_PARSER_DSML, contract_pb2.TOOL_PARSER_XTML,
    contract_pb2.TOOL_PARSER_ATEM,
)  # fmt: skip


def _validate_frontend(frontend: contract_pb2.FrontendContract, tokenizer: Tokenizer) -> None:
    tool_name = (
        contract_pb2.ToolParser.Name(frontend.tool_parser)
        if frontend.tool_parser in contract_pb2.ToolParser.values()
        else str(frontend.tool_parser)
    )
    reasoning_name = (
        contract_pb2.ReasoningParser.Name(frontend.reasoning_parser)
        if frontend.reasoning_parser in contract_pb2.ReasoningParser.values()
        else str(frontend.reasoning_parser)
    )
    if frontend.tool_parser not in _SUPPORTED_TOOL_PARSERS:
        raise UnsupportedFrontend(f"frontend.tool_parser {tool_name} is not implemented by this build")
    if frontend.reasoning_parser not in _SUPPORTED_REASONING_PARSERS:
        raise UnsupportedFrontend(
            f"frontend.reasoning_parser {reasoning_name} is not implemented by this build"
        )
    if not frontend.eos_token_ids:
        raise InvalidFrontendContract("frontend.eos_token_ids is empty: generation could never end at EOS")
    vocab = tokenizer.get_vocab_size(with_added_tokens=True)
    for token_id in frontend.eos_token_ids:
        if token_id >= vocab:
            raise InvalidFrontendContract(
                f"frontend.eos_token_ids holds {token_id}, outside the tokenizer's {vocab} ids"
            )
    for template_token in frontend.template_tokens:
        if tokenizer.token_to_id(template_token.text) != template_token.id:
            raise InvalidFrontendContract(
                f"frontend.template_tokens: {template_token.text!r} is id {template_token.id} in the contract "
                f"but {tokenizer.token_to_id(template_token.text)} in the tokenizer"
            )
    tool = frontend.tool_syntax
    if frontend.tool_parser == contract_pb2.TOOL_PARSER_QWEN_CODER:
        required = (
            "opener", "closer", "invoke_open", "invoke_name_close", "invoke_close",
            "parameter_open", "parameter_name_close", "parameter_close",
        )  # fmt: skip
        missing = [name for name in required if not getattr(tool, name)]
        if missing:
            raise InvalidFrontendContract(
                f"frontend.tool_syntax lacks {', '.join(missing)} for TOOL_PARSER_QWEN_CODER"
            )
    if frontend.tool_parser in _TAG_PARSERS:
        from helios.frontend.syntaxes.selection import tag_layout
        from helios.frontend.syntaxes.tagged import IncompleteToolSyntax

        try:
            tag_layout(frontend)
        except IncompleteToolSyntax as error:
            raise InvalidFrontendContract(f"frontend.tool_syntax: {error}") from None
    if frontend.reasoning_parser == contract_pb2.REASONING_PARSER_RECIPIENT_HEADER:
        prompt = frontend.prompt_syntax
        fields = ("header_start", "header_message", "internal_end")
        missing = [name for name in fields if not getattr(prompt, name)]
        missing += [name for name in ("recipient_open", "reasoning_recipient", "tool_recipient")
                    if not getattr(frontend.reasoning_syntax, name)]  # fmt: skip
        if missing:
            raise InvalidFrontendContract(
                f"frontend syntax lacks {', '.join(missing)} for REASONING_PARSER_RECIPIENT_HEADER"
            )
    reasoning = frontend.reasoning_syntax
    if frontend.reasoning_parser in _THINK_PARSERS:
        if not reasoning.open or not reasoning.close:
            raise InvalidFrontendContract(
                f"frontend.reasoning_syntax needs open and close for {reasoning_name}"
            )
        if reasoning.terminal_marker and reasoning.terminal_marker != tool.opener:
            raise InvalidFrontendContract(
                f"frontend.reasoning_syntax.terminal_marker {reasoning.terminal_marker!r} must equal the tool "
                f"syntax opener {tool.opener!r}"
            )
