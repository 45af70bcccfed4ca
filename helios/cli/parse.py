"""`helios parse` (host side): model output text on standard input through the OutputPipeline.

For people debugging what a model emitted: prints one JSON object
{"reasoning", "content", "tool_calls": [{"name", "arguments"}]} with null where absent. No model,
no core: the syntaxes are named on the command line.
"""

from __future__ import annotations

import argparse
import json
import sys

from helios.errors import HeliosError


class ToolsFileInvalid(HeliosError):
    """The --tools file is unreadable or not a JSON array of OpenAI tools."""


class PromptFileInvalid(HeliosError):
    """The --prompt file is unreadable."""


def register(subparsers) -> None:
    from helios.frontend.syntaxes import REASONING_SYNTAXES, TOOL_SYNTAXES

    parser = subparsers.add_parser(
        "parse",
        help="split model output (stdin) into reasoning, content and tool calls",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Read model output text on standard input, run it through the OutputPipeline with the named\n"
            'syntaxes, and print one JSON object: {"reasoning", "content", "tool_calls"}, with null where\n'
            'absent. Each tool call is {"name", "arguments"}; parameter values are converted by the\n'
            "tool's JSON schema type when --tools gives the schemas, else kept as strings. Delimiters are\n"
            "matched as text (the input has no token boundaries). Each syntax's data is its public form;\n"
            "docs/syntaxes.md writes every syntax out. Pairings: xtml reasoning needs xtml tools, and\n"
            "recipient reasoning goes with atem tools only."
        ),
        epilog=(
            "example:\n"
            "  printf '<think>\\nplan\\n</think>\\n\\n<tool_call>\\n<function=get_weather>\\n<parameter=city>\\n"
            "Paris\\n</parameter>\\n</function>\\n</tool_call>' \\\n"
            "    | helios parse --tool-syntax qwen-coder --reasoning-syntax think --tools tools.json\n"
            "  printf '<|start|>assistant to=self<|message|>plan<|eom|><|start|>assistant to=user<|message|>Hi' \\\n"
            "    | helios parse --tool-syntax atem --reasoning-syntax recipient"
        ),
    )
    parser.add_argument(
        "--tool-syntax", required=True, choices=sorted(TOOL_SYNTAXES),
        help="tool-call syntax: qwen-coder function tags, glm argument tags, dsml, xtml, atem blocks "
             "(with recipient reasoning), or none",
    )  # fmt: skip
    parser.add_argument("--reasoning-syntax", required=True, choices=sorted(REASONING_SYNTAXES),
                        help="reasoning syntax: think tags, xtml think (with xtml tools), recipient "
                             "headers (with atem tools), or none")  # fmt: skip
    parser.add_argument("--tools", metavar="TOOLS.json",
                        help="the request's tools (an OpenAI `tools` array): schemas type the arguments")  # fmt: skip
    parser.add_argument("--prompt-open-reasoning", action="store_true",
                        help="the prompt already opened reasoning (output starts inside it)")  # fmt: skip
    parser.add_argument("--prompt", metavar="PROMPT.txt",
                        help="recipient syntax: the rendered prompt, whose open header or body the output "
                             "continues")  # fmt: skip
    parser.set_defaults(func=_parse)


def _load_tools(path: str | None) -> list[dict] | None:
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            tools = json.load(handle)
    except (OSError, json.JSONDecodeError) as error:
        raise ToolsFileInvalid(f"--tools {path}: {error}") from None
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise ToolsFileInvalid(f"--tools {path}: expected a JSON array of tool objects")
    return tools


def _parse(args) -> int:
    from helios.frontend.pipeline import parse_text
    from helios.frontend.syntaxes import frontend_for
    from helios.frontend.syntaxes.recipient import initial_frame_state

    tools = _load_tools(args.tools)
    frontend = frontend_for(args.tool_syntax, args.reasoning_syntax)
    frame = None
    if args.prompt is not None:
        try:
            with open(args.prompt, encoding="utf-8") as handle:
                frame = initial_frame_state(handle.read(), frontend)
        except OSError as error:
            raise PromptFileInvalid(f"--prompt {args.prompt}: {error}") from None
    text = sys.stdin.read()
    parsed = parse_text(text, frontend, tools=tools, reasoning_open=args.prompt_open_reasoning, frame=frame)
    calls = [{"name": call.name, "arguments": json.loads(call.arguments)} for call in parsed.tool_calls]
    result = {"reasoning": parsed.reasoning, "content": parsed.content, "tool_calls": calls or None}
    print(json.dumps(result, ensure_ascii=False))
    return 0
