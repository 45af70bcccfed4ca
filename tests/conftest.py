"""Shared test fixtures (test helper). Add fixtures here additively; keep heavy imports inside them."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """`tiny_checkpoint(family, config_form="v5")` -> a directory holding a tiny random fp32 checkpoint
    (llama, qwen2, qwen3 or mistral; see tests/fixtures/checkpoints.py), built once per session."""
    from tests.fixtures.checkpoints import make_checkpoint

    built: dict[tuple[str, str], Path] = {}

    def make(family: str, config_form: str = "v5") -> Path:
        key = (family, config_form)
        if key not in built:
            directory = tmp_path_factory.mktemp(f"ckpt-{family}-{config_form}") / f"tiny-{family}"
            built[key] = make_checkpoint(family, directory, config_form=config_form)
        return built[key]

    return make


@pytest.fixture(scope="session")
def tiny_draft(tmp_path_factory):
    """`tiny_draft(family, kind)` -> a draft checkpoint for `tiny_checkpoint(family)`: kind "same" (the
    target itself), "small" (a smaller random model, same tokenizer) or "perturbed" (the target with
    noisy weights); see tests/fixtures/checkpoints.py `make_draft`."""
    from tests.fixtures.checkpoints import make_draft

    built: dict[tuple[str, str], Path] = {}

    def make(family: str, kind: str) -> Path:
        if (family, kind) not in built:
            directory = tmp_path_factory.mktemp(f"draft-{family}-{kind}") / f"draft-{family}-{kind}"
            built[(family, kind)] = make_draft(family, directory, kind)
        return built[(family, kind)]

    return make


@pytest.fixture(scope="session")
def hf_model(tiny_checkpoint):
    """`hf_model(family)` -> the transformers model of `tiny_checkpoint(family)`, fp32, eager attention."""
    from tests.fixtures.hf_oracle import load_hf_model

    models: dict[str, object] = {}

    def load(family: str):
        if family not in models:
            models[family] = load_hf_model(tiny_checkpoint(family))
        return models[family]

    return load


# The tiny LLaVA core of the vision tests: 16-token prefill chunks (an image's 16-sentinel span then
# splits across two chunks of a chat prompt), batches of 1 and 2, 4-token pages.
LLAVA_CAPACITIES = dict(dtype="fp32", page_tokens=4, batch_capacities=(1, 2), prefill_capacities=(16,),
                        context_tokens=96)


@pytest.fixture(scope="session")
def llava_core(tmp_path_factory):
    """(checkpoint directory, PreparedCore): the tiny random LLaVA (tests/fixtures/checkpoints.py
    `make_llava_checkpoint`) prepared with `LLAVA_CAPACITIES`, built once per session."""
    from helios.ignition.prepare import PreparationOptions, prepare_checkpoint
    from tests.fixtures.checkpoints import make_llava_checkpoint

    directory = make_llava_checkpoint(tmp_path_factory.mktemp("ckpt-llava") / "tiny-llava")
    return directory, prepare_checkpoint(directory, PreparationOptions(**LLAVA_CAPACITIES))


# The Engram test recipe's capacities (docs/engram.md): pages of 4 tokens, one 8-token prefill variant,
# batches of 1 and 2, so the interpreter lowers few graphs.
ENGRAM_CAPACITIES = dict(dtype="fp32", page_tokens=4, batch_capacities=(1, 2), prefill_capacities=(8,),
                         context_tokens=32)


@pytest.fixture(scope="session")
def engram_core(tiny_checkpoint):
    """The tiny llama checkpoint with the Engram test recipe's table (2- and 3-grams, added at layer 1),
    prepared fp32; `engram_core.plain` is the same checkpoint prepared without it."""
    from helios.ignition.preparation.engram import EngramOptions
    from helios.ignition.prepare import PreparationOptions, prepare_checkpoint

    core = prepare_checkpoint(tiny_checkpoint("llama"),
                              PreparationOptions(**ENGRAM_CAPACITIES, engram=EngramOptions(layer=1)))
    plain = prepare_checkpoint(tiny_checkpoint("llama"), PreparationOptions(**ENGRAM_CAPACITIES))
    return core, plain
