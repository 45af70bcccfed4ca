"""`helios parse`: model output on stdin, one JSON object out."""

from __future__ import annotations

import io
import json

import pytest

from helios.cli import main
from tests.frontend import tinyfront

OUTPUT = (
    "<think>\nplan\n</think>\n\nCalling.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
    "</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"
)


def run(argv, text, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    code = main(["parse", *argv])
    captured = capsys.readouterr()
    return code, captured


def test_parse_with_tools_file(tmp_path, monkeypatch, capsys) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([tinyfront.WEATHER_TOOL]))
    code, out = run(["--tool-syntax", "qwen-coder", "--reasoning-syntax", "think", "--tools", str(tools)],
                    OUTPUT, monkeypatch, capsys)  # fmt: skip
    assert code == 0
    assert json.loads(out.out) == {
        "reasoning": "plan",
        "content": "Calling.\n",
        "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}],
    }


def test_parse_without_schemas_and_prompt_open_reasoning(monkeypatch, capsys) -> None:
    code, out = run(["--tool-syntax", "qwen-coder", "--reasoning-syntax", "think", "--prompt-open-reasoning"],
                    "still thinking\n</think>\n\nanswer", monkeypatch, capsys)  # fmt: skip
    assert code == 0
    assert json.loads(out.out) == {"reasoning": "still thinking", "content": "answer", "tool_calls": None}
    code, out = run(
        ["--tool-syntax", "qwen-coder", "--reasoning-syntax", "none"], OUTPUT, monkeypatch, capsys
    )
    result = json.loads(out.out)
    assert result["reasoning"] is None and result["content"].startswith("<think>")
    assert result["tool_calls"] == [{"name": "get_weather", "arguments": {"city": "Paris", "days": "3"}}]


def test_bad_tools_file_is_one_line(tmp_path, monkeypatch, capsys) -> None:
    bad = tmp_path / "tools.json"
    bad.write_text("{")
    code, out = run(["--tool-syntax", "qwen-coder", "--reasoning-syntax", "think", "--tools", str(bad)], "",
                    monkeypatch, capsys)  # fmt: skip
    assert code == 2 and out.err.count("\n") == 1 and "--tools" in out.err


def test_help_teaches(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["parse", "--help"])
    text = capsys.readouterr().out
    assert "--prompt-open-reasoning" in text and "example" in text
