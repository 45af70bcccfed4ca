"""Conformance tests: a tiny fp32 core (Mistral-shaped: two layers, a sliding window the workloads
cross) served by both runtimes. On a machine without CUDA the production kernels run in the Triton
interpreter, which must be switched on before any kernel module is imported."""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# Small capacities keep the interpreter fast: one 8-token prefill variant, batches of 1 and 2.
CAPACITIES = dict(dtype="fp32", page_tokens=4, batch_capacities=(1, 2), prefill_capacities=(8,), context_tokens=32)


@pytest.fixture(scope="session")
def conform_core(tiny_checkpoint):
    from helios.ignition.prepare import PreparationOptions, prepare_checkpoint

    return prepare_checkpoint(tiny_checkpoint("mistral"), PreparationOptions(**CAPACITIES))


def _signed(tiny_checkpoint, tmp_path_factory, name: str, *extra: str):
    """(core file, public key file): the tiny mistral checkpoint prepared by `helios prepare` with the
    suite's capacities and `extra` options, and signed."""
    from helios.cli import main

    directory = tmp_path_factory.mktemp(f"conform-{name}")
    key = directory / "publisher.key"
    assert main(["keys", "new", "--out", str(key)]) == 0
    core = directory / f"{name}.hcore"
    options = ["--dtype", CAPACITIES["dtype"], "--page-tokens", str(CAPACITIES["page_tokens"]),
               "--batch-capacities", "1,2", "--prefill-capacities", "8", "--context-tokens",
               str(CAPACITIES["context_tokens"]), *extra]
    assert main(["prepare", str(tiny_checkpoint("mistral")), "--out", str(core), "--publisher", "acme/tests",
                 "--key", str(key), *options]) == 0
    return core, f"{key}.pub"


@pytest.fixture(scope="session")
def signed_core(tiny_checkpoint, tmp_path_factory):
    """(core file, public key file): the same tiny checkpoint prepared and signed by `helios prepare`."""
    return _signed(tiny_checkpoint, tmp_path_factory, "tiny")


@pytest.fixture(scope="session")
def signed_tp_core(tiny_checkpoint, tmp_path_factory):
    """(core file, public key file): the same tiny checkpoint prepared with --tp 2 and signed."""
    return _signed(tiny_checkpoint, tmp_path_factory, "tiny-tp2", "--tp", "2")


# A second geometry for the generated workloads: 16-token pages, no sliding window, a tool syntax
# (a short ChatML template writing assistant calls in the Qwen Coder syntax) and two EOS ids (the
# core lists them in ascending order: 256, then 258, the turn end).
TOOL_TEMPLATE = (
    "{%- for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content or '' }}"
    "{%- for tc in message.tool_calls or [] %}<tool_call>\n<function={{ tc.function.name }}>\n</function>\n"
    "</tool_call>{% endfor %}<|im_end|>\n{% endfor %}{%- if add_generation_prompt %}<|im_start|>assistant\n"
    "{% endif %}"
)
TOOL_CAPACITIES = dict(dtype="fp32", page_tokens=16, batch_capacities=(1, 2), prefill_capacities=(16,),
                       context_tokens=64)


@pytest.fixture(scope="session")
def tool_core(tmp_path_factory):
    from helios.ignition.prepare import PreparationOptions, prepare_checkpoint
    from tests.fixtures.checkpoints import make_checkpoint

    directory = tmp_path_factory.mktemp("conform-tools") / "tiny-tools"
    make_checkpoint("qwen3", directory, generation={"eos_token_id": [258, 256]})  # <|im_end|>, <|endoftext|>
    (directory / "chat_template.jinja").write_text(TOOL_TEMPLATE, encoding="utf-8")
    return prepare_checkpoint(directory, PreparationOptions(**TOOL_CAPACITIES))
