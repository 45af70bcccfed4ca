"""Reading a Hugging Face checkpoint directory (preparation side, host; NumPy only).

Owns everything Helios learns from a checkpoint directory, once, at preparation time:

- `config.json` in both forms: the v4 form (top-level `rope_theta`, optional `rope_scaling`,
  `torch_dtype`) and the v5 form (`rope_parameters: {rope_theta, rope_type, ...}`, `dtype`);
  `RopeParameters` is the normalized view a recipe reads.
- safetensors weights, single-file or sharded (`helios.ignition.safetensors`).
- `tokenizer.json` (kept as bytes: it becomes the core's TOKENIZER resource).
- the chat template from `chat_template.jinja` or `tokenizer_config.json` (`chat_template` as a
  string or as a list of named templates; the one named "default" wins).
- special tokens and EOS ids (config.json, generation_config.json and the tokenizer's eos token).
- generation_config.json sampling recommendations, which a recipe declares as serving defaults.

Serving never reads a checkpoint: everything here ends up as typed contract data or resources.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from helios.ignition.errors import (
    CheckpointError,
    MalformedCheckpointFile,
    MissingCheckpointFile,
    UnsupportedCheckpoint,
)
from helios.ignition.safetensors import (
    TensorInfo,
    TensorStore,
    bf16_bits_to_float32,
    float32_to_bf16_bits,
    read_json,
    read_tensors,
)

__all__ = [
    "Checkpoint", "CheckpointError", "GenerationRecommendations", "MalformedCheckpointFile", "MissingCheckpointFile",
    "RopeParameters", "TensorInfo", "TensorStore", "UnsupportedCheckpoint", "bf16_bits_to_float32",
    "float32_to_bf16_bits", "read_checkpoint",
]


@dataclass(frozen=True, slots=True)
class RopeParameters:
    """Rotary embedding parameters, the same whichever config form they came from."""

    rope_type: str  # "default", "linear", "llama3", "yarn", ...
    theta: float
    scaling: tuple[tuple[str, float], ...] = ()  # sorted (name, value): factor, low_freq_factor, ...

    def __post_init__(self) -> None:
        if not self.rope_type:
            raise MalformedCheckpointFile("config.json: rope type is empty")
        if not (self.theta > 0.0):
            raise MalformedCheckpointFile(f"config.json: rope_theta must be > 0, got {self.theta}")

    def get(self, name: str, default: float | None = None) -> float | None:
        for key, value in self.scaling:
            if key == name:
                return value
        return default


def rope_parameters(config: Mapping[str, Any]) -> RopeParameters:
    """As transformers reads them: a non-empty v4 `rope_scaling` replaces `rope_parameters`; the theta is
    the rope dict's `rope_theta`, else the top-level `rope_theta`, else 10000."""
    params = config.get("rope_scaling") or config.get("rope_parameters")
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise MalformedCheckpointFile("config.json: rope_parameters (or rope_scaling) must be an object")
    if params and all(isinstance(v, dict) for v in params.values()):  # one dict per layer type
        distinct = {json.dumps(v, sort_keys=True) for v in params.values()}
        if len(distinct) != 1:
            raise UnsupportedCheckpoint("config.json: rope_parameters differ per layer type")
        params = next(iter(params.values()))
    merged = dict(params)
    theta = merged.pop("rope_theta") if "rope_theta" in merged else config.get("rope_theta", 10000.0)
    rope_type = merged.pop("rope_type", merged.pop("type", "default"))
    if theta is None:
        raise MalformedCheckpointFile("config.json: rope_theta is missing")
    scaling: list[tuple[str, float]] = []
    for key, value in sorted(merged.items()):
        if value is None:
            continue
        if not isinstance(value, int | float):  # booleans (yarn's truncate) are kept as 0.0 / 1.0
            raise UnsupportedCheckpoint(f"config.json: rope parameter {key} = {value!r} is not a number")
        scaling.append((key, float(value)))
    return RopeParameters(str(rope_type), float(theta), tuple(scaling))


@dataclass(frozen=True, slots=True)
class GenerationRecommendations:
    """Sampling recommendations from generation_config.json (absent fields stay None)."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None

    def __post_init__(self) -> None:
        if self.temperature is not None and self.temperature < 0:
            raise MalformedCheckpointFile(f"generation_config.json: temperature {self.temperature} < 0")
        if self.top_p is not None and not (0 < self.top_p <= 1):
            raise MalformedCheckpointFile(f"generation_config.json: top_p {self.top_p} not in (0, 1]")
        if self.top_k is not None and self.top_k < 0:
            raise MalformedCheckpointFile(f"generation_config.json: top_k {self.top_k} < 0")
        if self.min_p is not None and not (0 <= self.min_p <= 1):
            raise MalformedCheckpointFile(f"generation_config.json: min_p {self.min_p} not in [0, 1]")
        if self.repetition_penalty is not None and self.repetition_penalty <= 0:
            raise MalformedCheckpointFile(
                f"generation_config.json: repetition_penalty {self.repetition_penalty} <= 0")


def _generation_recommendations(generation: Mapping[str, Any] | None) -> GenerationRecommendations:
    if not generation:
        return GenerationRecommendations()

    def number(key: str, kind: type) -> Any:
        value = generation.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise MalformedCheckpointFile(f"generation_config.json: {key} = {value!r} is not a number")
        return kind(value)

    if generation.get("do_sample") is False:
        # The checkpoint recommends greedy decoding; its other sampling fields do not apply.
        return GenerationRecommendations(temperature=0.0)
    return GenerationRecommendations(
        temperature=number("temperature", float),
        top_p=number("top_p", float),
        top_k=number("top_k", int),
        min_p=number("min_p", float),
        repetition_penalty=number("repetition_penalty", float),
    )


def _ids(value: Any, where: str) -> list[int]:
    if value is None:
        return []
    values = value if isinstance(value, list) else [value]
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
        raise MalformedCheckpointFile(f"{where} must be a token id or a list of token ids, got {value!r}")
    return list(values)


def _token_content(value: Any) -> str | None:
    if isinstance(value, dict):  # {"content": "...", "lstrip": ...} form
        value = value.get("content")
    return value if isinstance(value, str) else None


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Everything read from one checkpoint directory."""

    directory: Path
    config: Mapping[str, Any]  # config.json as written
    rope: RopeParameters
    stored_dtype: str  # "float32", "bfloat16", "float16" (config `dtype` or `torch_dtype`)
    tensors: TensorStore
    tokenizer_json: bytes
    tokenizer_vocabulary: Mapping[str, int]  # every token text -> id (model vocab and added tokens)
    chat_template: str | None
    bos_token_id: int | None
    eos_token_ids: tuple[int, ...]  # sorted, deduplicated
    generation: GenerationRecommendations = field(default_factory=GenerationRecommendations)

    def __post_init__(self) -> None:
        if not self.eos_token_ids:
            raise UnsupportedCheckpoint(
                "config.json: eos_token_id is missing (and neither generation_config.json nor "
                "tokenizer_config.json names an EOS token)")

    def token_id(self, text: str) -> int | None:
        return self.tokenizer_vocabulary.get(text)

    def digest(self) -> str:
        """sha256 over every checkpoint file that preparation reads, names included (hex)."""
        h = hashlib.sha256()
        names = sorted({info.file.name for info in (self.tensors.info(n) for n in self.tensors)}
                       | {n for n in _METADATA_FILES if (self.directory / n).is_file()})
        for name in names:
            h.update(name.encode() + b"\0")
            with (self.directory / name).open("rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    h.update(block)
        return h.hexdigest()


_METADATA_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                   "chat_template.jinja", "model.safetensors.index.json")


def _tokenizer_vocabulary(tokenizer_json: bytes) -> dict[str, int]:
    try:
        data = json.loads(tokenizer_json)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise MalformedCheckpointFile(f"tokenizer.json is not valid JSON: {error}") from None
    vocabulary: dict[str, int] = {}
    model_vocab = (data.get("model") or {}).get("vocab")
    if isinstance(model_vocab, dict):
        vocabulary.update({str(k): int(v) for k, v in model_vocab.items()})
    elif isinstance(model_vocab, list):  # Unigram: [[piece, score], ...]
        vocabulary.update({str(entry[0]): i for i, entry in enumerate(model_vocab)})
    for token in data.get("added_tokens") or []:
        vocabulary[str(token["content"])] = int(token["id"])
    return vocabulary


def _chat_template(directory: Path, tokenizer_config: Mapping[str, Any]) -> str | None:
    jinja = directory / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    template = tokenizer_config.get("chat_template")
    if isinstance(template, list):
        named = {str(t.get("name")): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    if template is not None and not isinstance(template, str):
        raise MalformedCheckpointFile("tokenizer_config.json: chat_template must be a string or named list")
    return template


def read_checkpoint(directory: str | Path) -> Checkpoint:
    """Read a Hugging Face checkpoint directory; raises CheckpointError or UnsupportedCheckpoint."""
    directory = Path(directory)
    if not directory.is_dir():
        raise MissingCheckpointFile(f"checkpoint directory {directory.name!r} does not exist")
    config = read_json(directory / "config.json", required=True)
    assert config is not None
    generation = read_json(directory / "generation_config.json", required=False)
    tokenizer_config = read_json(directory / "tokenizer_config.json", required=False) or {}
    tokenizer_path = directory / "tokenizer.json"
    if not tokenizer_path.is_file():
        raise MissingCheckpointFile("tokenizer.json is missing from the checkpoint directory")
    tokenizer_json = tokenizer_path.read_bytes()
    vocabulary = _tokenizer_vocabulary(tokenizer_json)

    eos: set[int] = set(_ids(config.get("eos_token_id"), "config.json: eos_token_id"))
    if generation is not None:
        eos.update(_ids(generation.get("eos_token_id"), "generation_config.json: eos_token_id"))
    eos_text = _token_content(tokenizer_config.get("eos_token"))
    if eos_text is not None:
        if eos_text not in vocabulary:
            raise MalformedCheckpointFile(f"tokenizer_config.json: eos_token {eos_text!r} is not in tokenizer.json")
        eos.add(vocabulary[eos_text])
    bos = config.get("bos_token_id")
    if isinstance(bos, list):
        bos = bos[0] if bos else None
    bos_text = _token_content(tokenizer_config.get("bos_token"))
    if bos is None and bos_text is not None:
        bos = vocabulary.get(bos_text)

    stored_dtype = config.get("dtype") or config.get("torch_dtype") or "float32"  # v5 may write dtype: null
    return Checkpoint(
        directory=directory,
        config=config,
        rope=rope_parameters(config),
        stored_dtype=str(stored_dtype),
        tensors=read_tensors(directory),
        tokenizer_json=tokenizer_json,
        tokenizer_vocabulary=vocabulary,
        chat_template=_chat_template(directory, tokenizer_config),
        bos_token_id=int(bos) if isinstance(bos, int) else None,
        eos_token_ids=tuple(sorted(eos)),
        generation=_generation_recommendations(generation),
    )
