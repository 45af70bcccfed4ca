"""Qwen Coder function tags (host side): TOOL_PARSER_QWEN_CODER, a layout of the shared tag engine.

Owns: `PUBLIC_SYNTAX` (the public form) and `qwen_coder_layout` (a `ToolSyntax` read as a
`TagLayout`).

    <tool_call>                 opener   (a marker piece when the tokenizer encodes it as one token)
    <function=NAME>             invoke_open NAME invoke_name_close
    <parameter=KEY>             parameter_open KEY parameter_name_close
    VALUE                       wrapped in one newline on each side when wrapping_newlines
    </parameter>                parameter_close
    </function>                 invoke_close
    </tool_call>                closer

A block may hold several functions (parallel calls). Values are typed by the tool's schema (strings
as written, other types JSON or bare scalars). What sets the syntax apart is data,
`implied_value_close`: a missing `</parameter>` is implied by the next `<parameter=`, `</function>`
or `</tool_call>`; a missing `</function>` is implied by `</tool_call>`, as in every tag layout.
"""

from __future__ import annotations

from helios.frontend.syntaxes.tagged import TagLayout, invocation_layout
from helios.proto import contract_pb2

PUBLIC_SYNTAX = contract_pb2.ToolSyntax(
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
)


def qwen_coder_layout(syntax: contract_pb2.ToolSyntax) -> TagLayout:
    return invocation_layout(syntax, "TOOL_PARSER_QWEN_CODER", implied_value_close=True)
