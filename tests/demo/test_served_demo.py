"""`make demo` end to end: prepare the committed demo checkpoint, serve it as a real process, and ask
through the official openai client for one answer with reasoning, one tool call and one JSON answer."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import httpx
import openai
import pytest

from helios.demo import __main__ as demo
from helios.demo.scoring import score_reply
from helios.demo.tasks import TaskKind, held_out_examples

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("demo")
    demo.prepare_demo(workdir)
    port = _free_port()
    log = workdir / "server.log"
    with open(log, "w") as sink:
        process = subprocess.Popen([sys.executable, "-m", "helios.demo", "--workdir", str(workdir), "--port", str(port)],
                                   stdout=sink, stderr=subprocess.STDOUT, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 90
    while True:
        try:
            if httpx.get(base + "/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if process.poll() is not None or time.time() > deadline:
            process.kill()
            raise AssertionError("the demo server did not start:\n" + log.read_text())
        time.sleep(0.2)
    yield openai.OpenAI(base_url=base + "/v1", api_key="unused", timeout=120)
    process.terminate()
    process.wait(timeout=30)


def _first(kind: TaskKind):
    return next(e for e in held_out_examples(1, 40) if e.kind == kind)


def _ask(client, example):
    return client.chat.completions.create(
        model=demo.SERVED_ID, messages=list(example.messages), tools=list(example.tools) or openai.NOT_GIVEN,
        temperature=0, max_tokens=160)


def test_arithmetic_answer_comes_with_reasoning(client):
    example = _first(TaskKind.ADDITION)
    message = _ask(client, example).choices[0].message
    reasoning = (message.model_extra or {}).get("reasoning_content")
    assert reasoning, "the demo model reasons in think tags; reasoning_content must carry it"
    verdict = score_reply(example.expectation, message.content)
    assert verdict.correct, f"{example.question!r}: {verdict.reason} (content {message.content!r})"


def test_tool_prompt_produces_the_right_call(client):
    example = _first(TaskKind.TOOL_CALL)
    response = _ask(client, example)
    choice = response.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = [call.model_dump() for call in choice.message.tool_calls]
    verdict = score_reply(example.expectation, choice.message.content, calls)
    assert verdict.correct, f"{example.question!r}: {verdict.reason} (calls {calls})"


def test_json_answer_parses_and_is_right(client):
    example = _first(TaskKind.JSON_EXTRACTION)
    message = _ask(client, example).choices[0].message
    json.loads(message.content)  # the answer is a JSON document
    verdict = score_reply(example.expectation, message.content)
    assert verdict.correct, f"{example.question!r}: {verdict.reason} (content {message.content!r})"
