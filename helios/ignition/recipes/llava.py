"""The LLaVA recipe (preparation side, host): a CLIP vision tower and projector over a Llama-family
text model, read from one checkpoint directory.

Owns reading a `llava` checkpoint into its two halves: the text model as a Llama-family checkpoint
view (`LlavaCheckpoint.text`: its `text_config`, its tensors under the text recipe's names), which
the Llama-family recipe prepares as it prepares any text checkpoint, and the vision tower
(`llava_vision.VisionTower`) with its tensors under the names `llava_vision` reads. LLaVA
checkpoints store their tensors under several spellings, all read here:

    language_model.model.* / model.language_model.*          -> model.*
    language_model.lm_head.weight / lm_head.weight           -> lm_head.weight
    vision_tower.vision_model.* / vision_tower.* / model.vision_tower.*   -> model.vision_tower.*
    multi_modal_projector.* / model.multi_modal_projector.*  -> model.multi_modal_projector.*

The image token is the one image sentinel: a nonsampled input id, so the sampled range ends below it
(`sampled_tokens`); its embedding row is zeroed (`llava_vision.zero_sentinel_rows`) because the
features replace it. The image preparation's mean and std come from `preprocessor_config.json`
when the checkpoint has one (CLIP's otherwise).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from types import MappingProxyType

from helios.frontend.image_preparation import CLIP_MEAN, CLIP_STD
from helios.ignition.reader import Checkpoint, UnsupportedCheckpoint, rope_parameters
from helios.ignition.recipes.llava_vision import VisionTower, read_vision_tower
from helios.ignition.safetensors import TensorInfo, TensorStore, read_json

RECIPE = "llava"
_RENAMES = (  # (stored prefix, canonical prefix), the longest stored prefixes first
    ("language_model.model.", "model."),
    ("model.language_model.", "model."),
    ("language_model.lm_head.", "lm_head."),
    ("vision_tower.vision_model.", "model.vision_tower."),
    ("model.vision_tower.", "model.vision_tower."),
    ("vision_tower.", "model.vision_tower."),
    ("model.multi_modal_projector.", "model.multi_modal_projector."),
    ("multi_modal_projector.", "model.multi_modal_projector."),
    ("lm_head.", "lm_head."),
)
_VISION_PREFIXES = ("model.vision_tower.", "model.multi_modal_projector.")


@dataclass(frozen=True, slots=True)
class ImageNormalisation:
    mean: tuple[float, ...]
    std: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class LlavaCheckpoint:
    """A LLaVA checkpoint read into its halves (module docstring)."""

    text: Checkpoint  # the text model: a Llama-family checkpoint view
    tower: VisionTower
    vision: TensorStore  # the tower's and projector's stored tensors, by canonical name
    normalisation: ImageNormalisation
    image_token_id: int


def _canonical(name: str) -> str | None:
    for stored, canonical in _RENAMES:
        if name.startswith(stored):
            return canonical + name[len(stored):]
    return None


def _infos(store: TensorStore) -> dict[str, TensorInfo]:
    out: dict[str, TensorInfo] = {}
    for name in store:
        canonical = _canonical(name)
        if canonical is None:
            raise UnsupportedCheckpoint(f"checkpoint: tensor {name!r} belongs to no part of a LLaVA model")
        if canonical in out:
            raise UnsupportedCheckpoint(f"checkpoint: tensors {out[canonical].name!r} and {name!r} are both "
                                        f"{canonical!r}")
        out[canonical] = store.info(name)
    return out


def _normalisation(checkpoint: Checkpoint) -> ImageNormalisation:
    processor = read_json(checkpoint.directory / "preprocessor_config.json", required=False) or {}
    mean, std = processor.get("image_mean", CLIP_MEAN), processor.get("image_std", CLIP_STD)
    for key, value in (("image_mean", mean), ("image_std", std)):
        if not isinstance(value, list | tuple) or len(value) != 3 or not all(isinstance(v, int | float) for v in value):
            raise UnsupportedCheckpoint(f"preprocessor_config.json: {key} = {value!r} must list 3 numbers")
    return ImageNormalisation(tuple(float(v) for v in mean), tuple(float(v) for v in std))


def read_llava(checkpoint: Checkpoint) -> LlavaCheckpoint:
    """The halves of a `llava` checkpoint, or UnsupportedCheckpoint naming the field it cannot serve."""
    config = checkpoint.config
    text_config = config.get("text_config")
    if not isinstance(text_config, dict):
        raise UnsupportedCheckpoint("config.json: text_config must be an object (the language model's config)")
    text_config = dict(text_config)
    text_config.setdefault("model_type", "llama")
    for key in ("tie_word_embeddings",):  # LLaVA's own value wins over its text config's
        if key in config:
            text_config[key] = config[key]
    tower = read_vision_tower(config)
    vocab = text_config.get("vocab_size")
    image = tower.image_token_id
    if not isinstance(vocab, int) or not 0 <= image < vocab:
        raise UnsupportedCheckpoint(f"config.json: image_token_id = {image} must lie inside text_config.vocab_size "
                                    f"= {vocab!r}")
    if any(eos >= image for eos in checkpoint.eos_token_ids):
        raise UnsupportedCheckpoint(f"config.json: image_token_id = {image} must lie past every EOS id "
                                    f"{list(checkpoint.eos_token_ids)} (the sampled range ends below it)")
    infos = _infos(checkpoint.tensors)
    text = TensorStore({k: v for k, v in infos.items() if not k.startswith(_VISION_PREFIXES)})
    vision = TensorStore({k: v for k, v in infos.items() if k.startswith(_VISION_PREFIXES)})
    view = dataclasses.replace(checkpoint, config=MappingProxyType(text_config), rope=rope_parameters(text_config),
                               tensors=text)
    return LlavaCheckpoint(view, tower, vision, _normalisation(checkpoint), image)


def plain_vision_template(placeholder: str) -> str:
    """The chat template of a checkpoint without one: each message's text, each image part its
    placeholder (content arrays carry `{"type": "image"}` parts, as transformers' processors pass them)."""
    return ("{% for message in messages %}{% if message['content'] is string %}{{ message['content'] }}"
            "{% else %}{% for part in message['content'] %}{% if part['type'] == 'image' %}" + placeholder
            + "{% else %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}{% endfor %}")
