"""Grammar-constrained requests under speculation (test helper): a tiny random qwen3 core whose chat
template declares the Qwen Coder tool syntax (so `tool_choice` "required" has a grammar) and think
reasoning, with a small random draft and SPECULATIVE programs of width 4, and the three chat requests
the tests serve greedily with and without history drafting:

- `json`: a json_schema answer, the prompt holding documents of that schema (the copied proposals the
  grammar then mostly forces, so most are accepted);
- `tool`: tool_choice "required", the template's tool preamble holding a call to copy from;
- `reasoning`: think reasoning before a json_schema answer; the prompt holds "c</think>" six times
  and a negative frequency penalty favours those two ids, so the model reasons "c" and a copied
  proposal carries the close delimiter: the close lands inside a proposed run, the rows before it
  under the reasoning's masks, those after it under the answer's. (Measured on this core; the test
  asserts it happened, so a change of the fixtures cannot let the case pass vacuously.)
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from helios.frontend.bootstrap import Bootstrap
from helios.frontend.openai_request import parse_chat_request
from helios.frontend.preparation import Preparer
from helios.ignition.prepare import PreparationOptions, prepare_checkpoint

SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer", "minimum": 0,
                                                                            "maximum": 99}},
          "required": ["ok", "n"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
PREAMBLE = ("{% if tools %}<|im_start|>system\nCall a tool as <tool_call>\n<function=get_weather>\n<parameter=city>\n"
            "Paris\n</parameter>\n</function>\n</tool_call><|im_end|>\n{% endif %}")
NO_THINKING = {"enable_thinking": False}
ANSWER = {"type": "json_schema", "json_schema": {"name": "r", "schema": SCHEMA}}
BODIES = {
    "json": {"messages": [{"role": "user", "content": 'Give {"ok":true,"n":7} {"ok":true,"n":7}'}],
             "response_format": ANSWER, "chat_template_kwargs": NO_THINKING, "max_tokens": 40},
    "tool": {"messages": [{"role": "user", "content": "weather in Paris?"}], "tools": TOOLS,
             "tool_choice": "required", "chat_template_kwargs": NO_THINKING, "max_tokens": 40},
    "reasoning": {"messages": [{"role": "user", "content": "c</think>" * 6}], "response_format": ANSWER,
                  "frequency_penalty": -1.0, "max_tokens": 40},
}
OPTIONS = dict(dtype="fp32", page_tokens=4, batch_capacities=(1, 2, 4), prefill_capacities=(16, 64, 256),
               context_tokens=256, speculative_widths=(4,))


def tool_checkpoint(checkpoint: Path, directory: Path) -> Path:
    """A copy of a tiny qwen3 checkpoint whose chat template also declares the Qwen Coder tool syntax."""
    if not directory.exists():
        shutil.copytree(checkpoint, directory)
        template = directory / "chat_template.jinja"
        template.write_text(PREAMBLE + template.read_text())
        config = json.loads((directory / "tokenizer_config.json").read_text())
        if "chat_template" in config:
            config["chat_template"] = PREAMBLE + config["chat_template"]
            (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return directory


def constrained_core(checkpoint: Path, draft: Path, **overrides):
    return prepare_checkpoint(checkpoint, PreparationOptions(draft=draft, **{**OPTIONS, **overrides}))


def preparer(core) -> Preparer:
    contract = core.contract
    vocabulary = contract.model.vocabulary
    return Preparer(Bootstrap.from_core(core), served_id=contract.served_id, context_tokens=contract.context_tokens,
                    sampled_tokens=vocabulary.sampled_tokens, mask_words=vocabulary.mask_words)


def prepared(preparer: Preparer, name: str, request_id: str | None = None):
    """The `PreparedChat` of request `name`, greedy, its token ids observed (a fresh grammar state)."""
    body = {**BODIES[name], "temperature": 0, "return_token_ids": True}
    return preparer.prepare_chat(parse_chat_request(body), request_id or name)


def document(preparer: Preparer, tokens: list[int]) -> str:
    return preparer.bootstrap.tokenizer.decode(tokens, skip_special_tokens=False)
