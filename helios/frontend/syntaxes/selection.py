"""Parser selection (host side): the frontend contract's enums pick reusable parsers, built from its
syntax data. No model names: the enum and the data are all a parser sees.

Owns: `reasoning_parser_for` and `tool_parser_for` (the two stages of the OutputPipeline for every
pairing except recipient-header frames, whose one parser, `RecipientFrameParser`, consumes both).
Each returns None for an enum this build does not implement; the OutputPipeline reports that.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from typing import Any

from helios.frontend.reasoning import NoReasoningParser, ThinkReasoningParser
from helios.frontend.syntaxes.dsml import DsmlToolParser
from helios.frontend.syntaxes.glm import GlmToolParser
from helios.frontend.syntaxes.xtml import XtmlThinkReasoningParser, XtmlToolParser
from helios.frontend.tool_calls import NoToolParser, QwenCoderToolParser
from helios.proto import contract_pb2

C = contract_pb2

_TOOL_PARSERS = {
    C.TOOL_PARSER_QWEN_CODER: QwenCoderToolParser,
    C.TOOL_PARSER_GLM: GlmToolParser,
    C.TOOL_PARSER_DSML: DsmlToolParser,
    C.TOOL_PARSER_XTML: XtmlToolParser,
}


def reasoning_parser_for(
    frontend: C.FrontendContract, *, token_only: Set[str] = frozenset(), reasoning_open: bool = False
) -> Any:
    kind = frontend.reasoning_parser
    if kind == C.REASONING_PARSER_NONE:
        return NoReasoningParser()
    if kind == C.REASONING_PARSER_THINK:
        return ThinkReasoningParser(frontend.reasoning_syntax, token_only=token_only, initially_open=reasoning_open)
    if kind == C.REASONING_PARSER_XTML_THINK:
        return XtmlThinkReasoningParser(
            frontend.reasoning_syntax, frontend.tool_syntax, token_only=token_only, initially_open=reasoning_open
        )
    return None


def tool_parser_for(
    frontend: C.FrontendContract,
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    parse_tools: bool = True,
    token_only: Set[str] = frozenset(),
) -> Any:
    if not parse_tools or frontend.tool_parser == C.TOOL_PARSER_NONE:
        return NoToolParser()
    parser = _TOOL_PARSERS.get(frontend.tool_parser)
    if parser is None:
        return None
    return parser(frontend.tool_syntax, tools=tools, token_only=token_only)
