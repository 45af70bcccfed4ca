"""DSML tool syntax (host side): TOOL_PARSER_DSML.

Owns: `PUBLIC_SYNTAX` and `dsml_layout` (a `ToolSyntax` read as a `TagLayout` of the shared tag engine).

    <｜DSML｜function_calls>                                       opener
    <｜DSML｜invoke name="NAME">                                   invoke_open NAME invoke_name_close
    <｜DSML｜parameter name="KEY" string="true">VALUE</｜DSML｜parameter>
                  parameter_open KEY parameter_name_close parameter_flag_open FLAG
                  parameter_flag_close VALUE parameter_close
    </｜DSML｜invoke>                                              invoke_close
    </｜DSML｜function_calls>                                      closer

One block may hold several invocations (parallel calls). The flag types the value, not the schema:
`string="true"` (the `string_flag`) marks a bare string, `string="false"` a JSON value; a flagged JSON
value that does not parse is kept as a string. "｜" is U+FF5C, as in the public template.
"""

from __future__ import annotations

from helios.frontend.syntaxes.tagged import TagLayout, invocation_layout
from helios.proto import contract_pb2

_BAR = "\uff5c"
PUBLIC_SYNTAX = contract_pb2.ToolSyntax(
    opener=f"<{_BAR}DSML{_BAR}function_calls>",
    closer=f"</{_BAR}DSML{_BAR}function_calls>",
    invoke_open=f'<{_BAR}DSML{_BAR}invoke name="',
    invoke_name_close='">',
    invoke_close=f"</{_BAR}DSML{_BAR}invoke>",
    parameter_open=f'<{_BAR}DSML{_BAR}parameter name="',
    parameter_name_close='"',
    parameter_flag_open=' string="',
    parameter_flag_close='">',
    string_flag="true",
    json_flag="false",
    parameter_close=f"</{_BAR}DSML{_BAR}parameter>",
    separator="\n",
)


def dsml_layout(syntax: contract_pb2.ToolSyntax) -> TagLayout:
    return invocation_layout(
        syntax,
        "TOOL_PARSER_DSML",
        flag_open=syntax.parameter_flag_open,
        flag_close=syntax.parameter_flag_close,
        string_flag=syntax.string_flag,
        json_flag=syntax.json_flag,
    )
