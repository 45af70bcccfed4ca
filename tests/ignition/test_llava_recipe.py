"""Preparing a LLaVA checkpoint: the contract's vision fields, and LLaVA's stored spellings (the
llava-hf `language_model.model.*` / `vision_tower.vision_model.*` layout, transformers 5's own) read
into the same resources; what a vision core does not combine with is refused in one line."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from helios.ignition.prepare import InvalidPreparationOptions, PreparationOptions, prepare_checkpoint
from helios.ignition.reader import UnsupportedCheckpoint
from helios.proto import contract_pb2 as C
from helios.proto import core_pb2
from tests.conftest import LLAVA_CAPACITIES

OPTIONS = PreparationOptions(**LLAVA_CAPACITIES)


def _legacy_copy(directory, target):
    """The checkpoint with its tensors under the llava-hf names (`language_model.model.*`,
    `language_model.lm_head.*`, `vision_tower.vision_model.*`, `multi_modal_projector.*`)."""
    from safetensors.numpy import load_file, save_file

    shutil.copytree(directory, target)
    tensors = load_file(str(directory / "model.safetensors"))
    renamed = {}
    for name, value in tensors.items():
        if name.startswith("vision_tower."):
            name = "vision_tower.vision_model." + name[len("vision_tower."):]
        renamed[name] = value
    assert any(k.startswith("language_model.model.") for k in renamed)
    save_file(renamed, str(target / "model.safetensors"))
    (target / "preprocessor_config.json").write_text(json.dumps({"image_mean": [0.5, 0.5, 0.5],
                                                                 "image_std": [0.25, 0.25, 0.25]}))
    return target


def test_a_llava_core_declares_its_images_and_reads_every_stored_spelling(llava_core, tmp_path):
    directory, core = llava_core
    model = core.contract.model
    image_token = model.input_vocabulary.image_sentinels[0]
    assert model.vocabulary.sampled_tokens == image_token == model.input_vocabulary.input_tokens - 1
    assert (model.vision.feature_slots, model.vision.features_per_window, list(model.vision.patch_capacities)) == (
        1, 16, [16])
    frontend = model.frontend
    assert (frontend.image_preparation, frontend.image_layout) == (C.IMAGE_PREPARATION_CLIP,
                                                                   C.IMAGE_LAYOUT_FEATURE_SPAN)
    assert list(frontend.image_token_layout.feature_ids) == [image_token]
    assert (frontend.image_settings.image_size, frontend.image_settings.patch_size) == (28, 7)
    encoders = {g.name for g in model.graphs if any(b.source == C.VALUE_SOURCE_IMAGE_TENSOR for b in g.value_bindings)}
    assert encoders == {g.name for g in model.graphs if g.operation == C.OPERATION_PREFILL}
    readers = {g.name for g in model.graphs
               if any(b.source == C.VALUE_SOURCE_IMAGE_CONTEXT_INDICES for b in g.value_bindings)}
    assert readers == {g.name for g in model.graphs if g.operation in (
        C.OPERATION_PREFILL, C.OPERATION_SCORED_PREFILL, C.OPERATION_DECODE, C.OPERATION_MIXED)}
    table = np.frombuffer(core.read("weight/model.embed_tokens.weight"), "<f4").reshape(image_token + 1, -1)
    assert not table[image_token].any() and table[:image_token].any()  # the sentinel's row is zeroed

    legacy = prepare_checkpoint(_legacy_copy(directory, tmp_path / "legacy"), OPTIONS)
    weights = {r.id for r in core.resources if r.kind == core_pb2.RESOURCE_KIND_WEIGHT}
    assert weights == {r.id for r in legacy.resources if r.kind == core_pb2.RESOURCE_KIND_WEIGHT}
    assert "vision.patch_embedding" in weights
    for resource in sorted(weights):
        assert legacy.read(resource) == core.read(resource), resource
    settings = legacy.contract.model.frontend.image_settings
    assert list(settings.mean) == [0.5] * 3 and list(settings.std) == [0.25] * 3  # preprocessor_config.json


@pytest.mark.parametrize(("options", "error", "message"), [
    (dict(tensor_parallel=2), InvalidPreparationOptions, "--tp 2: image inputs on tensor-parallel ranks"),
    (dict(image_feature_slots=0), InvalidPreparationOptions, "--image-feature-slots must be >= 1"),
])
def test_what_a_vision_core_does_not_combine_with_is_refused(llava_core, options, error, message):
    directory, _ = llava_core
    with pytest.raises(error, match=message):
        prepare_checkpoint(directory, PreparationOptions(**{**LLAVA_CAPACITIES, **options}))


def test_an_image_token_inside_the_eos_range_is_refused(llava_core, tmp_path):
    directory, _ = llava_core
    target = shutil.copytree(directory, tmp_path / "late-eos")
    config = json.loads((target / "config.json").read_text())
    config["image_token_id"] = 3  # below the EOS id: the sampled range could not end below it
    (target / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnsupportedCheckpoint, match="image_token_id = 3 must lie past every EOS id"):
        prepare_checkpoint(target, OPTIONS)
