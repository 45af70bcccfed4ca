"""`helios parse` accepts every syntax in its public form, prints reasoning, content and calls, and
refuses the pairings the specification forbids in one line."""

from __future__ import annotations

import io
import json

import pytest

from helios.cli import main

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}]  # fmt: skip
B = "\uff5c"
OUTPUTS = {
    ("qwen-coder", "think"): "<think>\nplan\n</think>\n\nok<tool_call>\n<function=get_weather>\n<parameter=city>\n"
                             "Paris\n</parameter>\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>",
    ("glm", "think"): "<think>plan</think>ok<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris"
                      "</arg_value>\n<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>",
    ("dsml", "think"): (f"<think>plan</think>ok<{B}DSML{B}function_calls>\n<{B}DSML{B}invoke name=\"get_weather\">\n"
                        f"<{B}DSML{B}parameter name=\"city\" string=\"true\">Paris</{B}DSML{B}parameter>\n"
                        f"<{B}DSML{B}parameter name=\"days\" string=\"false\">2</{B}DSML{B}parameter>\n"
                        f"</{B}DSML{B}invoke>\n</{B}DSML{B}function_calls>"),
    ("xtml", "xtml"): ('<xtml:think>plan</xtml:think>ok<xtml:tool_calls>\n<xtml:invoke name="get_weather">\n'
                       '<xtml:parameter name="city">Paris</xtml:parameter>\n<xtml:parameter name="days">2'
                       "</xtml:parameter>\n</xtml:invoke>\n</xtml:tool_calls>"),
    ("atem", "recipient"): ("<|start|>assistant to=self<|message|>plan<|eom|><|start|>assistant to=commentary"
                            "<|message|>ok<|eom|><|start|>assistant to=functions.get_weather<|message|>"
                            '<atem:function_calls>\n<atem:invoke name="get_weather">\n<atem:parameter name="city">'
                            'Paris</atem:parameter>\n<atem:parameter name="days">2</atem:parameter>\n</atem:invoke>\n'
                            "</atem:function_calls><|eom|>"),
}  # fmt: skip


@pytest.mark.parametrize("tools, reasoning", list(OUTPUTS))
def test_parse_every_syntax(tools, reasoning, tmp_path, monkeypatch, capsys) -> None:
    (tmp_path / "tools.json").write_text(json.dumps(TOOLS))
    monkeypatch.setattr("sys.stdin", io.StringIO(OUTPUTS[(tools, reasoning)]))
    code = main(["parse", "--tool-syntax", tools, "--reasoning-syntax", reasoning, "--tools", str(tmp_path / "tools.json")])
    assert code == 0
    assert json.loads(capsys.readouterr().out) == {
        "reasoning": "plan", "content": "ok", "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}],
    }  # fmt: skip


def test_parse_continues_the_prompts_open_header(tmp_path, monkeypatch, capsys) -> None:
    (tmp_path / "prompt.txt").write_text("<|start|>user<|message|>hi<|end|><|start|>assistant")
    monkeypatch.setattr("sys.stdin", io.StringIO(" to=self<|message|>hm<|eom|><|start|>assistant to=user<|message|>Hi!"))
    assert main(["parse", "--tool-syntax", "atem", "--reasoning-syntax", "recipient",
                 "--prompt", str(tmp_path / "prompt.txt")]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out) == {"reasoning": "hm", "content": "Hi!", "tool_calls": None}


@pytest.mark.parametrize("tools, reasoning", [("glm", "xtml"), ("qwen-coder", "recipient"), ("atem", "think")])
def test_forbidden_pairings_fail_in_one_line(tools, reasoning, monkeypatch, capsys) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("x"))
    assert main(["parse", "--tool-syntax", tools, "--reasoning-syntax", reasoning]) != 0
    error = capsys.readouterr().err
    assert error.count("\n") == 1
    assert "only used together" in error or "requires the xtml tool syntax" in error


def test_help_names_every_syntax(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["parse", "--help"])
    text = capsys.readouterr().out
    for name in ("qwen-coder", "glm", "dsml", "xtml", "atem", "think", "recipient", "docs/syntaxes.md"):
        assert name in text
