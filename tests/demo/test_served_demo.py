"""`make demo` end to end: prepare the committed demo checkpoint, serve it as a real process, and ask
through the official openai client one held-out prompt of every task kind (tests/demo/known_good.py:
a tool call, a JSON answer and worded answers, in phrasings the README does not use), and for the
README's own examples, which must answer as the README shows."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest

from helios.demo import __main__ as demo
from helios.demo.scoring import score_reply
from helios.demo.tasks import TaskKind
from tests.demo.known_good import known_good

pytestmark = pytest.mark.slow
README = Path(__file__).resolve().parents[2] / "README.md"


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


SCHEMA_TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "array": list}


def _ask(client, example):
    return client.chat.completions.create(
        model=demo.SERVED_ID, messages=list(example.messages), tools=list(example.tools) or openai.NOT_GIVEN,
        temperature=0, max_tokens=160)


def test_tool_prompt_produces_the_right_call(client):
    example = known_good(TaskKind.TOOL_CALL)
    choice = _ask(client, example).choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = [call.model_dump() for call in choice.message.tool_calls]
    verdict = score_reply(example.expectation, choice.message.content, calls)
    assert verdict.correct, f"{example.question!r}: {verdict.reason} (calls {calls})"
    # every argument has the type the offered schema declares (a number, not the string "16.0")
    tool = next(t["function"] for t in example.tools if t["function"]["name"] == calls[0]["function"]["name"])
    arguments = json.loads(calls[0]["function"]["arguments"])
    assert arguments and all(isinstance(value, SCHEMA_TYPES[tool["parameters"]["properties"][name]["type"]])
                             for name, value in arguments.items()), (arguments, tool["parameters"])


def test_json_answer_parses_and_is_right(client):
    example = known_good(TaskKind.JSON_EXTRACTION)
    message = _ask(client, example).choices[0].message
    json.loads(message.content)  # the answer is a JSON document
    verdict = score_reply(example.expectation, message.content)
    assert verdict.correct, f"{example.question!r}: {verdict.reason} (content {message.content!r})"


@pytest.mark.parametrize("kind", [kind for kind in TaskKind if kind not in (TaskKind.TOOL_CALL,
                                                                           TaskKind.JSON_EXTRACTION)])
def test_worded_answers(client, kind):
    """Every other task kind (arithmetic, conversions, copy and reverse, answers from a tool result or
    without a fitting tool, small talk, identity, refusals, follow-ups): a worded answer, right."""
    example = known_good(kind)
    choice = _ask(client, example).choices[0]
    assert choice.finish_reason == "stop" and not choice.message.tool_calls
    verdict = score_reply(example.expectation, choice.message.content)
    assert verdict.correct, f"{example.question!r}: {verdict.reason} (content {choice.message.content!r})"


def test_the_readme_examples_answer_as_the_readme_shows(client):
    readme = " ".join(README.read_text(encoding="utf-8").split())  # the README wraps long lines
    arithmetic = client.chat.completions.create(model=demo.SERVED_ID, temperature=0,
                                                messages=[{"role": "user", "content": "What is 27 + 15?"}])
    message = arithmetic.choices[0].message
    reasoning = (message.model_extra or {}).get("reasoning_content")
    assert f'answers `"content": "{message.content}"`' in readme
    assert f'`"reasoning_content": {" ".join(json.dumps(reasoning).split())}`' in readme
    identity = client.chat.completions.create(model=demo.SERVED_ID, temperature=0,
                                              messages=[{"role": "user", "content": "Hello! Who are you?"}])
    assert f"# {identity.choices[0].message.content}" in readme


def test_the_demo_speculates_and_its_metrics_move(client):
    """`make demo` serves the model with its drafter: after a request, /metrics counts speculative
    rounds and accepted drafts within the offered ones."""
    from prometheus_client.parser import text_string_to_metric_families

    client.chat.completions.create(model=demo.SERVED_ID, temperature=0, max_tokens=16,
                                   messages=[{"role": "user", "content": "What is 27 + 15?"}])
    base = str(client.base_url).removesuffix("/v1/").removesuffix("/v1")
    values = {sample.name: sample.value for family in text_string_to_metric_families(httpx.get(base + "/metrics").text)
              for sample in family.samples}
    assert values["helios_speculative_rounds_total"] >= 1
    assert 0 < values["helios_speculative_accepted_drafts_total"] <= values["helios_speculative_offered_drafts_total"]
