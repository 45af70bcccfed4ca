"""Named syntaxes (host side): the syntax data of each implemented parser under a short name.

Owns: `TOOL_SYNTAXES`, `REASONING_SYNTAXES` and `frontend_for`, which builds a `FrontendContract`
from names. Serving never uses names (a core carries its typed syntax data); `helios parse` and
tests use them to run the OutputPipeline without a core.
"""

from __future__ import annotations

from helios.errors import HeliosError
from helios.proto import contract_pb2

C = contract_pb2


class UnknownSyntax(HeliosError):
    """A syntax name this build does not implement."""


TOOL_SYNTAXES: dict[str, tuple[int, C.ToolSyntax | None]] = {
    "none": (C.TOOL_PARSER_NONE, None),
    "qwen-coder": (
        C.TOOL_PARSER_QWEN_CODER,
        C.ToolSyntax(
            opener="<tool_call>",
            closer="</tool_call>",
            invoke_open="<function=",
            invoke_name_close=">",
            invoke_close="</function>",
            parameter_open="<parameter=",
            parameter_name_close=">",
            parameter_close="</parameter>",
            separator="\n",
            wrapping_newlines=True,
        ),
    ),
}

REASONING_SYNTAXES: dict[str, tuple[int, C.ReasoningSyntax | None]] = {
    "none": (C.REASONING_PARSER_NONE, None),
    "think": (
        C.REASONING_PARSER_THINK,
        C.ReasoningSyntax(open="<think>", close="</think>", wrapping_newlines=True),
    ),
}


def frontend_for(tool_syntax: str, reasoning_syntax: str) -> C.FrontendContract:
    """A FrontendContract with the named syntaxes; the reasoning terminal marker is the tool opener."""
    if tool_syntax not in TOOL_SYNTAXES:
        raise UnknownSyntax(
            f"tool syntax {tool_syntax!r} is not implemented; known: {', '.join(TOOL_SYNTAXES)}"
        )
    if reasoning_syntax not in REASONING_SYNTAXES:
        raise UnknownSyntax(
            f"reasoning syntax {reasoning_syntax!r} is not implemented; known: {', '.join(REASONING_SYNTAXES)}"
        )
    tool_parser, tool_data = TOOL_SYNTAXES[tool_syntax]
    reasoning_parser, reasoning_data = REASONING_SYNTAXES[reasoning_syntax]
    frontend = C.FrontendContract(tool_parser=tool_parser, reasoning_parser=reasoning_parser)
    if tool_data is not None:
        frontend.tool_syntax.CopyFrom(tool_data)
    if reasoning_data is not None:
        frontend.reasoning_syntax.CopyFrom(reasoning_data)
        if tool_data is not None:
            frontend.reasoning_syntax.terminal_marker = tool_data.opener
    return frontend
