"""XTML (host side): TOOL_PARSER_XTML and its think reasoning, REASONING_PARSER_XTML_THINK.

Owns: `PUBLIC_SYNTAX` and `PUBLIC_REASONING` (the forms written down in docs/syntaxes.md),
`xtml_layout` (the tool syntax as a `TagLayout` of the shared tag engine) and `xtml_think_layout`
(the reasoning as a `ThinkLayout` of the one think-tag parser, `helios.frontend.reasoning`).

XTML is an XML-tag tool syntax with its own interleaved think reasoning:

    <xtml:think>REASONING</xtml:think>           reasoning, at the start of the output or right
                                                 after a tool block (interleaved thinking)
    <xtml:tool_calls>                            opener (also the reasoning terminal marker)
    <xtml:invoke name="NAME">                    invoke_open NAME invoke_name_close
    <xtml:parameter name="KEY">VALUE</xtml:parameter>
    </xtml:invoke>                               several invocations a block: parallel calls
    </xtml:tool_calls>                           closer

Values are typed by the tool's schema (strings bare, other types JSON). The reasoning needs the tool
syntax, which is why the specification pairs the two: reasoning may reopen after each tool block, so
its layout carries the tool opener (the terminal marker) and closer, and the think parser follows
tool blocks through the answer; a think tag inside a block, e.g. in a string value, stays the block's
text.
"""

from __future__ import annotations

from helios.frontend.reasoning import ThinkLayout
from helios.frontend.syntaxes.tagged import IncompleteToolSyntax, TagLayout, invocation_layout
from helios.proto import contract_pb2

PUBLIC_SYNTAX = contract_pb2.ToolSyntax(
    opener="<xtml:tool_calls>",
    closer="</xtml:tool_calls>",
    invoke_open='<xtml:invoke name="',
    invoke_name_close='">',
    invoke_close="</xtml:invoke>",
    parameter_open='<xtml:parameter name="',
    parameter_name_close='">',
    parameter_close="</xtml:parameter>",
    separator="\n",
)

PUBLIC_REASONING = contract_pb2.ReasoningSyntax(
    open="<xtml:think>", close="</xtml:think>", terminal_marker="<xtml:tool_calls>"
)


def xtml_layout(syntax: contract_pb2.ToolSyntax) -> TagLayout:
    return invocation_layout(syntax, "TOOL_PARSER_XTML")


def xtml_think_layout(frontend: contract_pb2.FrontendContract) -> ThinkLayout:
    """REASONING_PARSER_XTML_THINK: the terminal marker is the tool opener (whatever the reasoning
    syntax's `terminal_marker` repeats), and reasoning may reopen after the tool closer."""
    syntax, tool_syntax = frontend.reasoning_syntax, frontend.tool_syntax
    missing = [n for n, v in (("open", syntax.open), ("close", syntax.close),
                              ("tool opener", tool_syntax.opener), ("tool closer", tool_syntax.closer)) if not v]  # fmt: skip
    if missing:
        raise IncompleteToolSyntax(f"REASONING_PARSER_XTML_THINK: the syntax lacks {', '.join(missing)}")
    return ThinkLayout(open=syntax.open, close=syntax.close, terminal_marker=tool_syntax.opener,
                       tool_closer=tool_syntax.closer, wrapping_newlines=syntax.wrapping_newlines)  # fmt: skip
