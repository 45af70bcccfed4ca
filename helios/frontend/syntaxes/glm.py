"""GLM argument tags (host side): TOOL_PARSER_GLM.

Owns: `PUBLIC_SYNTAX` (the public form), `NEWLINE_FREE_SYNTAX` (the later newline-free variant)
and `glm_layout` (a `ToolSyntax` read as a `TagLayout` of the shared tag engine).

    <tool_call>NAME                              opener, the name, invoke_name_close ("\\n")
    <arg_key>KEY</arg_key>                       parameter_open KEY parameter_name_close
    <arg_value>VALUE</arg_value>                 value_open VALUE value_close
    </tool_call>                                 closer; one call a block, parallel calls in
                                                 consecutive blocks

String parameters are written bare, every other type as JSON; the tool's schema says which. The
newline-free variant writes the same tags with no separator and no newline after the name (its
`invoke_name_close` and `separator` are empty): the name then ends at the first `<arg_key>` or at the
closer, which the parser accepts in both forms.
"""

from __future__ import annotations

from helios.frontend.syntaxes.tagged import TagLayout, read_layout
from helios.proto import contract_pb2

PUBLIC_SYNTAX = contract_pb2.ToolSyntax(
    opener="<tool_call>",
    closer="</tool_call>",
    invoke_name_close="\n",
    parameter_open="<arg_key>",
    parameter_name_close="</arg_key>",
    value_open="<arg_value>",
    value_close="</arg_value>",
    separator="\n",
)

NEWLINE_FREE_SYNTAX = contract_pb2.ToolSyntax(
    opener="<tool_call>",
    closer="</tool_call>",
    parameter_open="<arg_key>",
    parameter_name_close="</arg_key>",
    value_open="<arg_value>",
    value_close="</arg_value>",
)


def glm_layout(syntax: contract_pb2.ToolSyntax) -> TagLayout:
    return read_layout(syntax, "TOOL_PARSER_GLM", value_open=syntax.value_open, value_close=syntax.value_close)
