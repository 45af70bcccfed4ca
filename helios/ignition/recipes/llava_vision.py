"""The LLaVA vision recipe (preparation side, host): a CLIP vision tower and LLaVA's projector
written as one captured program over the operator set, at the tower's patch capacity.

Owns reading the vision part of a LLaVA config (`config.json`'s `vision_config` and the projector
fields) into `VisionTower`, refusing what it cannot serve with one line naming the field, preparing
the tower's stored tensors into program resources (`vision_resources`), and writing the encoder
(`vision_program`). One image runs per launch over R = patches + 1 rows (row 0 the class token):

    matmul (the patch embedding: the convolution of stride = kernel = patch as a product over the
    patchified pixels) -> add (position embeddings, the class embedding folded into row 0)
    -> layer_norm (pre) -> per layer up to the selected feature layer: layer_norm, q/k/v matmul
       (+bias), bidirectional_attention over the image's rows, out matmul (+bias), add, layer_norm,
       fc1 matmul, activation (quick_gelu), fc2 matmul, add
    -> projector: linear_1, activation (gelu), linear_2
    -> scatter of each patch row's feature into its feature-store row (IMAGE_FEATURE_INDICES)

Transformers' `get_image_features` takes the hidden states after `vision_feature_layer` layers
(negative: counted from the end, -1 the last layer's output; the post layer norm is never applied)
and, with the `default` select strategy, drops the class row; `full` keeps it. The feature rows say
which rows reach the store (-1: none), so the strategy is the packer's index data, not an operator.

The class token's patch row is all zeros: the convolution has no bias, so its embedding is exactly
0 and `0 + (position[0] + class)` equals transformers' `class + position[0]`.

`helios prepare` reads a `llava` checkpoint with `llava.py` and writes this encoder into every
PREFILL program of the core (docs/vision.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from helios.ignition.preparation.contract import Declarations
from helios.ignition.reader import UnsupportedCheckpoint
from helios.program import ProgramBuilder
from helios.program.vision import PLAIN_ACTIVATIONS
from helios.proto import contract_pb2 as C
from helios.proto import manifest_pb2 as M
from helios.proto import program_pb2

VISION_PROGRAM = "vision_encoder"
FEATURE_STORE = "image_features"
SELECT_STRATEGIES = ("default", "full")
_TOWER = "model.vision_tower."
_PROJECTOR = "model.multi_modal_projector."


@dataclass(frozen=True, slots=True)
class VisionTower:
    """What the vision program depends on, read once from config.json."""

    hidden: int
    intermediate: int
    heads: int
    layers: int  # encoder layers the program runs (the selected feature layer)
    image_size: int
    patch_size: int
    channels: int
    eps: float
    activation: str  # the tower's MLP activation
    projector_activation: str
    projector_bias: bool
    text_hidden: int
    keep_class: bool  # vision_feature_select_strategy == "full"
    image_token_id: int

    @property
    def grid(self) -> int:
        return self.image_size // self.patch_size

    @property
    def patches(self) -> int:
        return self.grid * self.grid

    @property
    def rows(self) -> int:
        """R: the class row and one row per patch."""
        return self.patches + 1

    @property
    def patch_width(self) -> int:
        return self.channels * self.patch_size * self.patch_size

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def features(self) -> int:
        """Features one image gives (its sentinel span's length)."""
        return self.rows if self.keep_class else self.patches


def _refuse(field: str, value: object, why: str) -> UnsupportedCheckpoint:
    return UnsupportedCheckpoint(f"config.json: {field} = {value!r}: {why}")


def read_vision_tower(config: Mapping[str, Any]) -> VisionTower:
    """The tower of a LLaVA config.json (transformers' defaults for absent keys), or UnsupportedCheckpoint
    naming the field."""
    vision = config.get("vision_config") or {}
    text = config.get("text_config") or {}
    if vision.get("model_type", "clip_vision_model") != "clip_vision_model":
        raise _refuse("vision_config.model_type", vision.get("model_type"), "only the CLIP vision tower is served")
    activation = vision.get("hidden_act", "quick_gelu")
    if activation not in PLAIN_ACTIVATIONS:
        raise _refuse("vision_config.hidden_act", activation, f"not one of {list(PLAIN_ACTIVATIONS)}")
    projector_activation = config.get("projector_hidden_act", "gelu")
    if projector_activation not in PLAIN_ACTIVATIONS:
        raise _refuse("projector_hidden_act", projector_activation, f"not one of {list(PLAIN_ACTIVATIONS)}")
    strategy = config.get("vision_feature_select_strategy", "default")
    if strategy not in SELECT_STRATEGIES:
        raise _refuse("vision_feature_select_strategy", strategy, f"not one of {list(SELECT_STRATEGIES)}")
    total = int(vision.get("num_hidden_layers", 12))
    layer = config.get("vision_feature_layer", -2)
    if not isinstance(layer, int) or isinstance(layer, bool):
        raise _refuse("vision_feature_layer", layer, "only one feature layer is served (not a list)")
    layers = layer if layer >= 0 else total + 1 + layer
    if not 0 <= layers <= total:
        raise _refuse("vision_feature_layer", layer, f"outside the tower's {total} layers")
    hidden, heads = int(vision.get("hidden_size", 768)), int(vision.get("num_attention_heads", 12))
    if hidden % heads:
        raise _refuse("vision_config.num_attention_heads", heads, f"does not divide hidden_size {hidden}")
    image_size, patch_size = int(vision.get("image_size", 224)), int(vision.get("patch_size", 32))
    if image_size % patch_size:
        raise _refuse("vision_config.patch_size", patch_size, f"does not divide image_size {image_size}")
    return VisionTower(
        hidden=hidden, intermediate=int(vision.get("intermediate_size", 3072)), heads=heads, layers=layers,
        image_size=image_size, patch_size=patch_size, channels=int(vision.get("num_channels", 3)),
        eps=float(vision.get("layer_norm_eps", 1e-5)), activation=activation,
        projector_activation=projector_activation, projector_bias=bool(config.get("multimodal_projector_bias", True)),
        text_hidden=int(text.get("hidden_size", 4096)), keep_class=strategy == "full",
        image_token_id=int(config.get("image_token_id", config.get("image_token_index", 32000))),
    )


def _layer(i: int) -> str:
    return f"{_TOWER}encoder.layers.{i}."


def vision_resource_names(tower: VisionTower) -> tuple[str, ...]:
    """The vision program's resources, in a fixed order: the two prepared embeddings, then every stored
    tensor the encoder and projector read (by their canonical stored names)."""
    names = ["vision.patch_embedding", "vision.position_embedding",
             _TOWER + "pre_layrnorm.weight", _TOWER + "pre_layrnorm.bias"]
    for i in range(tower.layers):
        for part in ("layer_norm1", "layer_norm2", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                     "self_attn.out_proj", "mlp.fc1", "mlp.fc2"):
            names += [_layer(i) + part + ".weight", _layer(i) + part + ".bias"]
    for part in ("linear_1", "linear_2"):
        names.append(_PROJECTOR + part + ".weight")
        if tower.projector_bias:
            names.append(_PROJECTOR + part + ".bias")
    return tuple(names)


_EMBEDDINGS = _TOWER + "embeddings."
# prepared resource -> (the stored tensors it is computed from, the computation's name in the catalog)
PREPARED_SOURCES = {
    "vision.patch_embedding": ((_EMBEDDINGS + "patch_embedding.weight",), "reshape([H, C*p*p])"),
    "vision.position_embedding": ((_EMBEDDINGS + "position_embedding.weight", _EMBEDDINGS + "class_embedding"),
                                  "add(class_embedding, row 0)"),
}


def vision_resource(tower: VisionTower, name: str, get: Callable[[str], np.ndarray]) -> np.ndarray:
    """One resource of the vision program from the stored tensors `get` reads (float32 by canonical
    name): the convolution's [H, C, p, p] filter as the [H, C*p*p] product weight (row-major, the
    patchify order), the class embedding folded into position row 0; every other tensor as stored."""
    if name == "vision.patch_embedding":
        return get(_EMBEDDINGS + "patch_embedding.weight").reshape(tower.hidden, tower.patch_width)
    if name == "vision.position_embedding":
        table = np.array(get(_EMBEDDINGS + "position_embedding.weight"), np.float32, copy=True)
        table[0] += get(_EMBEDDINGS + "class_embedding")
        return table
    return get(name)


def vision_resources(tower: VisionTower, tensors: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every resource of the vision program (`vision_resource`) from float32 arrays by stored name."""
    def get(name: str) -> np.ndarray:
        if name not in tensors:
            raise UnsupportedCheckpoint(f"checkpoint: tensor {name!r} is missing")
        return np.asarray(tensors[name], np.float32)

    return {name: vision_resource(tower, name, get) for name in vision_resource_names(tower)}


@dataclass(frozen=True, slots=True)
class EncodedImage:
    store: str  # the STATE feature store the encoder wrote
    bindings: tuple[C.ValueBinding, ...]  # the encoder's image inputs: layout tensors and feature rows


def _store(decl: Declarations | None, b: ProgramBuilder, rows: int, hidden: int, dtype: str) -> str:
    if decl is not None:
        decl.buffer(FEATURE_STORE, M.BUFFER_ROLE_STATE, M.DTYPE_BF16 if dtype == "bf16" else M.DTYPE_F32,
                    (rows, hidden))
    if b.declared(FEATURE_STORE):  # the encoder and the text rows of one program share it
        return FEATURE_STORE
    return b.state(FEATURE_STORE, FEATURE_STORE, dtype, (rows, hidden))


def encode_image(b: ProgramBuilder, tower: VisionTower, *, feature_slots: int, dtype: str = "f32",
                 decl: Declarations | None = None) -> EncodedImage:
    """Emit the encoder and projector of one image into program `b` (module docstring): its features
    land in the STATE feature store [feature_slots * features, text hidden]. With `decl`, the
    manifest buffers are declared there and the inputs bound: the layout's `patches` and
    `patch_group` (IMAGE_TENSOR) and the feature rows (IMAGE_FEATURE_INDICES)."""
    rows, hidden = tower.rows, tower.hidden

    def w(name: str, *shape: int) -> str:
        if b.declared(name):
            return name
        return b.weight(name, resource=name, dtype=dtype, shape=list(shape))

    def linear(x: str, name: str, out: int, inp: int, bias: bool = True) -> str:
        return b.matmul(x, w(name + ".weight", out, inp), w(name + ".bias", out) if bias else None)

    def norm(x: str, name: str) -> str:
        return b.layer_norm(x, w(name + ".weight", hidden), w(name + ".bias", hidden), eps=tower.eps)

    inputs = {"image_patches": (dtype, (rows, tower.patch_width)), "patch_group": ("i32", (rows,)),
              "image_feature_rows": ("i32", (rows,))}
    bindings = []
    if decl is not None:
        for name, (kind, shape) in inputs.items():
            decl.buffer(name, M.BUFFER_ROLE_TRANSPORT,
                        {"i32": M.DTYPE_I32, "bf16": M.DTYPE_BF16}.get(kind, M.DTYPE_F32), shape)
        bindings = [
            C.ValueBinding(destination="image_patches", source=C.VALUE_SOURCE_IMAGE_TENSOR,
                           indexing=C.INDEXING_SCALAR, image_output="patches"),
            C.ValueBinding(destination="patch_group", source=C.VALUE_SOURCE_IMAGE_TENSOR,
                           indexing=C.INDEXING_SCALAR, image_output="patch_group", padding=-1),  # no image: no group
            C.ValueBinding(destination="image_feature_rows", source=C.VALUE_SOURCE_IMAGE_FEATURE_INDICES,
                           indexing=C.INDEXING_SCALAR, padding=-1),
        ]
    patches, group, feature_rows = (b.transport(name, name, kind, shape) for name, (kind, shape) in inputs.items())
    store = _store(decl, b, feature_slots * tower.features, tower.text_hidden, dtype)
    x = b.matmul(patches, w("vision.patch_embedding", hidden, tower.patch_width))
    x = b.add(x, w("vision.position_embedding", rows, hidden))
    x = norm(x, _TOWER + "pre_layrnorm")
    for i in range(tower.layers):
        prefix = _layer(i)
        h = norm(x, prefix + "layer_norm1")
        q = linear(h, prefix + "self_attn.q_proj", hidden, hidden)
        k = linear(h, prefix + "self_attn.k_proj", hidden, hidden)
        v = linear(h, prefix + "self_attn.v_proj", hidden, hidden)
        attended = b.bidirectional_attention(q, k, v, group, scale=tower.head_dim ** -0.5, head_dim=tower.head_dim)
        x = b.add(x, linear(attended, prefix + "self_attn.out_proj", hidden, hidden))
        h = norm(x, prefix + "layer_norm2")
        h = b.activation(linear(h, prefix + "mlp.fc1", tower.intermediate, hidden), activation=tower.activation)
        x = b.add(x, linear(h, prefix + "mlp.fc2", hidden, tower.intermediate))
    text = tower.text_hidden
    h = linear(x, _PROJECTOR + "linear_1", text, hidden, tower.projector_bias)
    h = b.activation(h, activation=tower.projector_activation)
    h = linear(h, _PROJECTOR + "linear_2", text, text, tower.projector_bias)
    b.scatter(h, feature_rows, into=store)
    return EncodedImage(store, tuple(bindings))


def vision_program(tower: VisionTower, *, feature_slots: int, dtype: str = "f32") -> program_pb2.Program:
    """The encoder and projector of one image alone, as its own program (`encode_image`)."""
    b = ProgramBuilder(VISION_PROGRAM)
    encode_image(b, tower, feature_slots=feature_slots, dtype=dtype)
    return b.build()


@dataclass(frozen=True, slots=True)
class ImageContext:
    """The text program's image inputs: each packed row's feature-store row and the store."""

    indices: str  # [P] i32 TRANSPORT: IMAGE_CONTEXT_INDICES, -1 for a text row
    store: str  # [rows, hidden] STATE: the request slots' image features (the vision program's output)
    bindings: tuple[C.ValueBinding, ...]

    def inject(self, b: ProgramBuilder, embedded: str, *, name: str) -> str:
        """The rows' input: the token embedding plus the row's image feature (a zero row for text
        rows, index -1). The sentinel ids' embedding rows are zero (`zero_sentinel_rows`), so an image
        row's input is exactly its feature and a text row's exactly its embedding."""
        return b.add(embedded, b.gather(self.store, self.indices, name=f"{name}.image"), name=name)


def image_context_inputs(decl: Declarations, b: ProgramBuilder, packed_tokens: int, *, store_rows: int,
                         hidden: int, dtype: str) -> ImageContext:
    """Declare the packed rows' IMAGE_CONTEXT_INDICES and the feature store in program `b`."""
    buffer = decl.buffer(f"image_context_p{packed_tokens}", M.BUFFER_ROLE_TRANSPORT, M.DTYPE_I32, (packed_tokens,))
    binding = C.ValueBinding(destination=buffer, source=C.VALUE_SOURCE_IMAGE_CONTEXT_INDICES,
                             indexing=C.INDEXING_PACKED_TOKEN, padding=-1)
    return ImageContext(b.transport("image_context", buffer, "i32", (packed_tokens,)),
                        _store(decl, b, store_rows, hidden, dtype), (binding,))


def zero_sentinel_rows(table: np.ndarray, sentinels: tuple[int, ...]) -> np.ndarray:
    """The text embedding table with the image sentinels' rows zeroed: transformers overwrites those
    rows' embeddings with the image features, so nothing ever reads them."""
    out = np.array(table, np.float32, copy=True)
    out[list(sentinels)] = 0.0
    return out
