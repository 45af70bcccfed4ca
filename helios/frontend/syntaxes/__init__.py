"""Named syntaxes (host side): every implemented tool and reasoning syntax under a short name, with
its public syntax data; the parser modules of the tag syntaxes live beside this one.

Owns: `TOOL_SYNTAXES`, `REASONING_SYNTAXES` and `frontend_for`, which builds a `FrontendContract`
from names. Serving never uses names (a core carries its typed syntax data); `helios parse` and tests
use them to run the OutputPipeline without a core. Modules: `tagged` (the shared tag engine) and the
layouts of its syntaxes, `qwen_coder`, `glm`, `dsml`, `xtml` (tools and XTML think); `recipient`
(recipient-header frames with ATEM blocks); `selection` (the contract's enums pick the parsers).
The grammar of each syntax is written down in docs/syntaxes.md.
"""

from __future__ import annotations

from helios.errors import HeliosError
from helios.frontend.syntaxes import dsml, glm, qwen_coder, recipient, xtml
from helios.proto import contract_pb2

C = contract_pb2


class UnknownSyntax(HeliosError):
    """A syntax name this build does not implement."""


class IncompatibleSyntaxes(HeliosError):
    """A reasoning syntax named with a tool syntax it cannot be paired with."""


TOOL_SYNTAXES: dict[str, tuple[int, C.ToolSyntax | None]] = {
    "none": (C.TOOL_PARSER_NONE, None),
    "qwen-coder": (C.TOOL_PARSER_QWEN_CODER, qwen_coder.PUBLIC_SYNTAX),
    "glm": (C.TOOL_PARSER_GLM, glm.PUBLIC_SYNTAX),
    "dsml": (C.TOOL_PARSER_DSML, dsml.PUBLIC_SYNTAX),
    "xtml": (C.TOOL_PARSER_XTML, xtml.PUBLIC_SYNTAX),
    "atem": (C.TOOL_PARSER_ATEM, recipient.PUBLIC_SYNTAX),
}

REASONING_SYNTAXES: dict[str, tuple[int, C.ReasoningSyntax | None]] = {
    "none": (C.REASONING_PARSER_NONE, None),
    "think": (
        C.REASONING_PARSER_THINK,
        C.ReasoningSyntax(open="<think>", close="</think>", wrapping_newlines=True),
    ),
    "xtml": (C.REASONING_PARSER_XTML_THINK, xtml.PUBLIC_REASONING),
    "recipient": (C.REASONING_PARSER_RECIPIENT_HEADER, recipient.PUBLIC_REASONING),
}


def frontend_for(tool_syntax: str, reasoning_syntax: str) -> C.FrontendContract:
    """A FrontendContract with the named syntaxes in their public forms; the reasoning terminal
    marker is the tool opener; recipient frames bring their prompt syntax (the header controls)."""
    if tool_syntax not in TOOL_SYNTAXES:
        raise UnknownSyntax(f"tool syntax {tool_syntax!r} is not implemented; known: {', '.join(TOOL_SYNTAXES)}")
    if reasoning_syntax not in REASONING_SYNTAXES:
        raise UnknownSyntax(
            f"reasoning syntax {reasoning_syntax!r} is not implemented; known: {', '.join(REASONING_SYNTAXES)}"
        )
    if reasoning_syntax == "xtml" and tool_syntax != "xtml":
        raise IncompatibleSyntaxes(f"XTML think reasoning requires the xtml tool syntax, not {tool_syntax!r}")
    if (reasoning_syntax == "recipient") != (tool_syntax == "atem"):
        raise IncompatibleSyntaxes(
            "recipient-header reasoning and the atem tool syntax are only used together "
            f"(got reasoning {reasoning_syntax!r} with tools {tool_syntax!r})"
        )
    tool_parser, tool_data = TOOL_SYNTAXES[tool_syntax]
    reasoning_parser, reasoning_data = REASONING_SYNTAXES[reasoning_syntax]
    frontend = C.FrontendContract(tool_parser=tool_parser, reasoning_parser=reasoning_parser)
    if tool_data is not None:
        frontend.tool_syntax.CopyFrom(tool_data)
    if reasoning_data is not None:
        frontend.reasoning_syntax.CopyFrom(reasoning_data)
        if tool_data is not None and reasoning_data.open:
            frontend.reasoning_syntax.terminal_marker = tool_data.opener
    if reasoning_parser == C.REASONING_PARSER_RECIPIENT_HEADER:
        frontend.prompt_syntax.CopyFrom(recipient.PUBLIC_PROMPT)
    return frontend
