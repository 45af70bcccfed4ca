"""Parser selection (host side): the frontend contract's enums pick reusable parsers, built from its
syntax data. No model names: the enum and the data are all a parser sees.

Owns: `tag_layout` (the tool syntax as a `TagLayout` of the shared tag engine, for its parser and for
the structured-output grammar), `reasoning_parser_for` and `tool_parser_for` (the two stages of the
OutputPipeline for every pairing except recipient-header frames, whose one parser,
`RecipientFrameParser`, consumes both). Every tag tool syntax is parsed by `TaggedToolParser` and
every think-tag reasoning syntax by `ThinkReasoningParser`; only their layouts differ. Each returns
None for an enum this build does not implement; the OutputPipeline reports that.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence, Set
from typing import Any

from helios.frontend.reasoning import NoReasoningParser, ThinkLayout, ThinkReasoningParser, think_layout
from helios.frontend.syntaxes.dsml import dsml_layout
from helios.frontend.syntaxes.glm import glm_layout
from helios.frontend.syntaxes.qwen_coder import qwen_coder_layout
from helios.frontend.syntaxes.recipient import atem_layout
from helios.frontend.syntaxes.tagged import TaggedToolParser, TagLayout
from helios.frontend.syntaxes.xtml import xtml_layout, xtml_think_layout
from helios.frontend.tool_calls import NoToolParser, parameter_schemas
from helios.proto import contract_pb2

C = contract_pb2

_TAG_LAYOUTS: dict[int, Callable[[C.ToolSyntax], TagLayout]] = {
    C.TOOL_PARSER_QWEN_CODER: qwen_coder_layout, C.TOOL_PARSER_GLM: glm_layout, C.TOOL_PARSER_DSML: dsml_layout,
    C.TOOL_PARSER_XTML: xtml_layout, C.TOOL_PARSER_ATEM: atem_layout,
}  # fmt: skip

_THINK_LAYOUTS: dict[int, Callable[[C.FrontendContract], ThinkLayout]] = {
    C.REASONING_PARSER_THINK: think_layout,
    C.REASONING_PARSER_XTML_THINK: xtml_think_layout,
}


def tag_layout(frontend: C.FrontendContract) -> TagLayout | None:
    """The tool syntax's tags as a `TagLayout`, or None for a tool parser that reads no tag syntax."""
    layout = _TAG_LAYOUTS.get(frontend.tool_parser)
    return layout(frontend.tool_syntax) if layout is not None else None


def reasoning_parser_for(
    frontend: C.FrontendContract, *, token_only: Set[str] = frozenset(), reasoning_open: bool = False
) -> Any:
    if frontend.reasoning_parser == C.REASONING_PARSER_NONE:
        return NoReasoningParser()
    layout = _THINK_LAYOUTS.get(frontend.reasoning_parser)
    if layout is None:
        return None
    return ThinkReasoningParser(layout(frontend), token_only=token_only, initially_open=reasoning_open)


def tool_parser_for(
    frontend: C.FrontendContract,
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    parse_tools: bool = True,
    token_only: Set[str] = frozenset(),
) -> Any:
    if not parse_tools or frontend.tool_parser == C.TOOL_PARSER_NONE:
        return NoToolParser()
    if frontend.tool_parser == C.TOOL_PARSER_ATEM:
        return None  # ATEM blocks are read inside recipient frames, by `RecipientFrameParser`
    layout = tag_layout(frontend)
    if layout is None:
        return None
    # NOTE: with tools given, a call may name only one of them (as in recipient frames): a block
    # naming any other function is content. Without tools (`helios parse`), any name is a call.
    registered = set(parameter_schemas(tools))
    accept = registered.__contains__ if registered else None
    return TaggedToolParser(layout, tools=tools, token_only=token_only, accept_name=accept)
