"""The LLaVA vision recipe: the CLIP tower and projector as one captured program give transformers'
image features within 1e-4 (fp32) in the reference interpreter and in the production lowering, for
an image prepared by the CLIP preparation; refusals name the config field."""

import io

import numpy as np
import pytest

from helios.frontend.image_preparation import ClipPreparation
from helios.ignition.reader import UnsupportedCheckpoint
from helios.ignition.recipes.llava_vision import read_vision_tower, vision_program, vision_resources
from helios.program.validate import validate_program
from helios.reference.interpreter import execute

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
PIL = pytest.importorskip("PIL.Image")


def _tiny_llava(strategy: str = "default", layer: int = -2):
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration

    vision = CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
                              image_size=28, patch_size=7, projection_dim=16)
    text = LlamaConfig(hidden_size=48, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                       num_key_value_heads=2, vocab_size=300)
    config = LlavaConfig(vision_config=vision, text_config=text, image_token_id=299,
                         vision_feature_select_strategy=strategy, vision_feature_layer=layer)
    torch.manual_seed(0)
    model = LlavaForConditionalGeneration(config).eval()
    with torch.no_grad():  # non-trivial norms and biases, so a misplaced one shows
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias") or "class_embedding" in name:
                p.add_(torch.randn_like(p) * 0.5)
    return model


def _png(seed: int) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, size=(33, 41, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    PIL.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def _hf_features(model, pixels: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        out = model.model.get_image_features(pixel_values=torch.from_numpy(pixels[None]),
                                             vision_feature_layer=model.config.vision_feature_layer,
                                             vision_feature_select_strategy=model.config.vision_feature_select_strategy)
    return out.pooler_output[0].numpy()


def _inputs(tower, prepared, slot: int, slots: int) -> dict:
    first = slot * tower.features
    skip = 0 if tower.keep_class else 1
    rows = np.full(tower.rows, -1, np.int32)
    rows[skip:] = np.arange(first, first + tower.rows - skip, dtype=np.int32)
    return {"image_patches": prepared.patches, "patch_group": np.zeros(tower.rows, np.int32),
            "image_feature_rows": rows,
            "image_features": np.zeros((slots * tower.features, tower.text_hidden), np.float32)}


def _relative(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


@pytest.mark.parametrize(("strategy", "layer"), [("default", -2), ("full", -1)])
def test_the_vision_program_gives_transformers_image_features_in_both_runtimes(strategy, layer):
    from helios.production.buffers import ScratchArena
    from helios.production.lowering import lower_program

    model = _tiny_llava(strategy, layer)
    tower = read_vision_tower(model.config.to_dict())
    assert tower.features == (17 if strategy == "full" else 16) and tower.layers == (3 if layer == -1 else 2)
    resources = vision_resources(tower, {k: v.float().numpy() for k, v in model.state_dict().items()})
    program = vision_program(tower, feature_slots=2)
    operators = validate_program(program)
    prepared = ClipPreparation(tower.image_size, tower.patch_size).prepare(_png(1), "image")
    expected = _hf_features(model, prepared.pixels)
    assert expected.shape == (tower.features, tower.text_hidden)

    values = _inputs(tower, prepared, slot=1, slots=2)
    env = execute(program, {**values, **resources}, operators)
    store = env["image_features"]
    assert not store[:tower.features].any()  # slot 0 untouched
    assert _relative(store[tower.features:], expected) < 1e-4

    from tests.production.helpers import DEVICE

    buffers = {k: torch.from_numpy(v.copy()).to(DEVICE) for k, v in values.items()}
    weights = {k: torch.from_numpy(v).to(DEVICE) for k, v in resources.items()}
    plan = lower_program(program, operators, weights=weights, buffers=buffers, arena=ScratchArena(DEVICE),
                         device=DEVICE)
    plan.run()
    produced = buffers["image_features"].cpu().numpy()
    assert not produced[:tower.features].any()
    # a GPU's fp32 products may use TF32 (10-bit mantissa)
    assert _relative(produced[tower.features:], expected) < (1e-4 if DEVICE.type == "cpu" else 2e-3)


def test_the_vision_recipe_refuses_what_it_cannot_serve_naming_the_field():
    config = _tiny_llava().config.to_dict()
    for change, field in ((("vision_feature_layer", [-2, -1]), "vision_feature_layer"),
                          (("vision_feature_select_strategy", "patches"), "vision_feature_select_strategy"),
                          (("projector_hidden_act", "relu"), "projector_hidden_act")):
        with pytest.raises(UnsupportedCheckpoint, match=f"config.json: {field} = "):
            read_vision_tower({**config, change[0]: change[1]})
    with pytest.raises(UnsupportedCheckpoint, match="vision_config.model_type"):
        read_vision_tower({**config, "vision_config": {**config["vision_config"], "model_type": "siglip_vision_model"}})
