"""The Llama-family recipe (preparation side, host): Llama 3.x, Qwen2/2.5, Qwen3 dense, Mistral.

Owns reading such a checkpoint's config into `LlamaFamilyConfig` (rejecting what it cannot serve
with one line naming the config field) and writing the decoder as programs over the operator set:
one program per (operation, capacity), all the same operator sequence over packed tokens:

    [gather + where: device-owned pending tokens] -> embedding
    -> per layer: rms_norm, q/k/v matmul (+bias), [head_rms_norm q, k], rotary q, k, paged_cache_write
       k, v, paged_attention [sliding window], o matmul, add, rms_norm, gate/up matmul,
       gated_activation, down matmul, add
    [SCORED_PREFILL: rms_norm, logits of every row, prompt_scores into the record's score buffers]
    -> last_row_gather per lane, rms_norm, logits, sample [-> where, where into the pending-token state]
    -> completion record

The family differences are data: q/k/v bias (Qwen2), per-head q/k norm and explicit head_dim (Qwen3),
a sliding window per layer (Mistral, Qwen layer types), llama3 rope scaling (the rotary operator's
`frequency_band`), tied embeddings.

Tensor-parallel ranks (docs/ranks.md): `check_tensor_parallel` refuses a split the config does not
allow, `weight_part` says which part of each stored tensor a rank holds, and a `Decoder` with a
`shard` writes that rank's program: its heads and features, `all_reduce` after the row-parallel
products and the vocabulary-parallel embedding, `all_gather` after the head's logits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from helios.ignition.preparation.contract import (
    Declarations,
    HistoryPlanes,
    TextGeometry,
    admission_inputs,
    device_pending_tokens,
    paged_text_inputs,
    prompt_score_inputs,
    sampling_inputs,
    state_transfer,
    submission_slots,
    write_prompt_scores,
)
from helios.ignition.preparation.engram import EngramInjection
from helios.ignition.preparation.ranks import WHOLE, RankShard, WeightPart
from helios.ignition.preparation.speculative import speculative_inputs
from helios.ignition.reader import Checkpoint, MissingCheckpointFile, RopeParameters, UnsupportedCheckpoint
from helios.ignition.recipes.catalog import RECIPE_MODULES
from helios.ignition.recipes.llava_vision import VisionTower, encode_image, image_context_inputs
from helios.program import ACTIVATIONS, ProgramBuilder
from helios.program.speculative import PROPOSAL_DRAW
from helios.proto import manifest_pb2 as M
from helios.proto import program_pb2

RECIPE = "llama_family"
MODEL_TYPES = tuple(t for t, module in RECIPE_MODULES.items() if module == "llama_family")
_MOE_FIELDS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_intermediate_size")


@dataclass(frozen=True, slots=True)
class LlamaFamilyConfig:
    """What the programs depend on, read once from config.json."""

    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    rotary_dim: int
    rms_norm_eps: float
    activation: str
    tie_word_embeddings: bool
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool
    qk_norm: bool
    windows: tuple[int | None, ...]  # per layer: sliding window tokens, None for full attention
    rope: RopeParameters
    max_position_embeddings: int

    def __post_init__(self) -> None:
        if len(self.windows) != self.layers:
            raise UnsupportedCheckpoint(f"config.json: {len(self.windows)} layer types for {self.layers} layers")
        if self.heads % self.kv_heads:
            raise UnsupportedCheckpoint(
                f"config.json: num_attention_heads = {self.heads} is not a multiple of num_key_value_heads = "
                f"{self.kv_heads}")


# What transformers assumes for a config.json key that is absent, per model_type (its config classes'
# defaults). "heads" stands for num_attention_heads, "hidden/heads" for hidden_size // num_attention_heads.
_HF_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": {"num_key_value_heads": "heads", "head_dim": "hidden/heads", "max_position_embeddings": 2048},
    "qwen2": {"num_key_value_heads": 32, "head_dim": "hidden/heads", "max_position_embeddings": 32768,
              "sliding_window": 4096, "max_window_layers": 28},
    "qwen3": {"num_key_value_heads": 32, "head_dim": 128, "max_position_embeddings": 32768,
              "sliding_window": 4096, "max_window_layers": 28},
    "mistral": {"num_key_value_heads": 8, "head_dim": "hidden/heads", "max_position_embeddings": 4096 * 32,
                "sliding_window": 4096},
}


def _int(config: Mapping[str, Any], key: str, default: int | None = None) -> int:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise UnsupportedCheckpoint(f"config.json: {key} = {value!r} must be a positive integer")
    return value


def _number(config: Mapping[str, Any], key: str, default: float) -> float:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0 or value == float("inf"):
        raise UnsupportedCheckpoint(f"config.json: {key} = {value!r} must be a positive number")
    return float(value)


def _windows(config: Mapping[str, Any], model_type: str, layers: int) -> tuple[int | None, ...]:
    """The sliding window of each layer, exactly as the transformers modeling code of `model_type` reads it.

    Llama has no sliding attention (a `sliding_window` or `layer_types` key is ignored). Mistral
    applies `sliding_window` (default 4096; null: none) to every layer; it does not read
    `layer_types` (transformers warns that such a checkpoint needs another class), so layer types it
    would ignore are refused rather than silently dropped. Qwen2 and Qwen3 null `sliding_window`
    unless `use_sliding_window`; their layer types are `layer_types` when given, else sliding from
    layer `max_window_layers` (default 28) on when a window is set; a sliding layer without a window
    is refused, as transformers refuses to run it.
    """
    if model_type == "llama":
        return (None,) * layers
    defaults = _HF_DEFAULTS[model_type]
    window = config.get("sliding_window", defaults["sliding_window"])
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window <= 0):
        raise UnsupportedCheckpoint(f"config.json: sliding_window = {window!r} must be a positive integer or null")
    layer_types = config.get("layer_types")
    if layer_types is not None:
        if not isinstance(layer_types, list) or len(layer_types) != layers:
            raise UnsupportedCheckpoint(f"config.json: layer_types must list {layers} layer types")
        unknown = sorted({str(t) for t in layer_types if t not in ("full_attention", "sliding_attention")})
        if unknown:
            raise UnsupportedCheckpoint(f"config.json: layer_types holds {unknown[0]!r}")
    if model_type == "mistral":
        expected = "full_attention" if window is None else "sliding_attention"
        if layer_types is not None and any(t != expected for t in layer_types):
            raise UnsupportedCheckpoint("config.json: layer_types differ per layer, which Mistral does not read "
                                        "(it applies sliding_window to every layer)")
        return (window,) * layers
    if not config.get("use_sliding_window", False):
        window = None
    if layer_types is None:
        first = config.get("max_window_layers", defaults["max_window_layers"])
        if isinstance(first, bool) or not isinstance(first, int) or first < 0:
            raise UnsupportedCheckpoint(f"config.json: max_window_layers = {first!r} must be a non-negative integer")
        return tuple(window if window is not None and i >= first else None for i in range(layers))
    if "sliding_attention" in layer_types and window is None:
        raise UnsupportedCheckpoint(
            "config.json: layer_types has sliding_attention but sliding_window is null "
            "(or use_sliding_window is false)")
    return tuple(window if t == "sliding_attention" else None for t in layer_types)


def parse_config(checkpoint: Checkpoint) -> LlamaFamilyConfig:
    """The family config of `checkpoint`; UnsupportedCheckpoint names the first field it cannot serve.

    Every absent key means what transformers makes of it for that model_type (`_HF_DEFAULTS`), and
    biases, head_dim and sliding windows are read as its modeling code reads them.
    """
    config = checkpoint.config
    model_type = config.get("model_type")
    if model_type not in MODEL_TYPES:
        raise UnsupportedCheckpoint(f"config.json: model_type = {model_type!r} (this recipe serves {list(MODEL_TYPES)})")
    defaults = _HF_DEFAULTS[model_type]
    for key in _MOE_FIELDS:
        if config.get(key):
            raise UnsupportedCheckpoint(f"config.json: {key} = {config[key]!r} (mixture-of-experts is not supported)")
    quantization = config.get("quantization_config")
    if quantization:  # its tensors are packed or scaled; reading them as plain weights would be wrong
        method = quantization.get("quant_method") if isinstance(quantization, dict) else quantization
        raise UnsupportedCheckpoint(f"config.json: quantization_config (quant_method = {method!r}): quantized "
                                    "checkpoints are not supported")
    activation = config.get("hidden_act", "silu")
    if activation != "silu" or activation not in ACTIVATIONS:
        raise UnsupportedCheckpoint(f"config.json: hidden_act = {activation!r} (supported: 'silu')")
    rope = checkpoint.rope
    if rope.rope_type not in ROPE_TYPES_FROM_HF:
        raise UnsupportedCheckpoint(f"config.json: rope_parameters.rope_type = {rope.rope_type!r} "
                                    f"(supported: {list(ROPE_TYPES_FROM_HF)})")
    known_scaling = {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings",
                     "beta_fast", "beta_slow", "mscale", "mscale_all_dim", "attention_factor",
                     "partial_rotary_factor", "truncate"}
    for key, _ in rope.scaling:
        if key not in known_scaling:
            raise UnsupportedCheckpoint(f"config.json: rope parameter {key!r} is not supported")
    hidden = _int(config, "hidden_size")
    heads = _int(config, "num_attention_heads")
    if config.get("head_dim") is not None:
        head_dim = config["head_dim"]
    elif "head_dim" in config and model_type == "qwen3":  # Qwen3Config refuses a null head_dim
        raise UnsupportedCheckpoint("config.json: head_dim = None must be a positive integer")
    else:
        head_dim = hidden // heads if defaults["head_dim"] == "hidden/heads" else defaults["head_dim"]
    if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim <= 0:
        raise UnsupportedCheckpoint(f"config.json: head_dim = {head_dim!r} must be a positive integer")
    partial = rope.get("partial_rotary_factor", _number(config, "partial_rotary_factor", 1.0)) or 1.0
    if not 0.0 < partial <= 1.0:
        raise UnsupportedCheckpoint(f"config.json: partial_rotary_factor = {partial!r} must be in (0, 1]")
    rotary_dim = int(head_dim * partial)
    layers = _int(config, "num_hidden_layers")
    kv_heads = config.get("num_key_value_heads", defaults["num_key_value_heads"])
    if kv_heads is None or kv_heads == "heads":  # transformers: null means one kv head per query head
        kv_heads = heads

    attention_bias = bool(config.get("attention_bias", False))
    return LlamaFamilyConfig(
        model_type=model_type,
        vocab_size=_int(config, "vocab_size"),
        hidden_size=hidden,
        intermediate_size=_int(config, "intermediate_size"),
        layers=layers,
        heads=heads,
        kv_heads=_int({"num_key_value_heads": kv_heads}, "num_key_value_heads"),
        head_dim=head_dim,
        rotary_dim=rotary_dim,
        rms_norm_eps=_number(config, "rms_norm_eps", 1e-6),
        activation=activation,
        tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
        # Qwen2: q/k/v always biased, o never; Mistral: never; Llama, Qwen3: attention_bias on q/k/v/o.
        qkv_bias=model_type == "qwen2" or (model_type in ("llama", "qwen3") and attention_bias),
        o_bias=model_type in ("llama", "qwen3") and attention_bias,
        mlp_bias=model_type == "llama" and bool(config.get("mlp_bias", False)),
        qk_norm=model_type == "qwen3",
        windows=_windows(config, model_type, layers),
        rope=rope,
        max_position_embeddings=_int(config, "max_position_embeddings", defaults["max_position_embeddings"]),
    )


@dataclass(frozen=True, slots=True)
class WeightSpec:
    """One stored tensor the programs read: its checkpoint name (also its resource id) and shape."""

    name: str
    shape: tuple[int, ...]


def weight_specs(cfg: LlamaFamilyConfig, checkpoint: Checkpoint) -> tuple[WeightSpec, ...]:
    """Every tensor the programs read, in a fixed order, checked against the checkpoint."""
    h, q, kv, f = cfg.hidden_size, cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim, cfg.intermediate_size
    specs = [WeightSpec("model.embed_tokens.weight", (cfg.vocab_size, h))]
    for i in range(cfg.layers):
        p = f"model.layers.{i}."
        specs += [WeightSpec(p + "input_layernorm.weight", (h,)),
                  WeightSpec(p + "self_attn.q_proj.weight", (q, h)),
                  WeightSpec(p + "self_attn.k_proj.weight", (kv, h)),
                  WeightSpec(p + "self_attn.v_proj.weight", (kv, h))]
        if cfg.qkv_bias:
            specs += [WeightSpec(p + "self_attn.q_proj.bias", (q,)), WeightSpec(p + "self_attn.k_proj.bias", (kv,)),
                      WeightSpec(p + "self_attn.v_proj.bias", (kv,))]
        if cfg.qk_norm:
            specs += [WeightSpec(p + "self_attn.q_norm.weight", (cfg.head_dim,)),
                      WeightSpec(p + "self_attn.k_norm.weight", (cfg.head_dim,))]
        specs.append(WeightSpec(p + "self_attn.o_proj.weight", (h, q)))
        if cfg.o_bias:
            specs.append(WeightSpec(p + "self_attn.o_proj.bias", (h,)))
        specs += [WeightSpec(p + "post_attention_layernorm.weight", (h,)),
                  WeightSpec(p + "mlp.gate_proj.weight", (f, h)),
                  WeightSpec(p + "mlp.up_proj.weight", (f, h)),
                  WeightSpec(p + "mlp.down_proj.weight", (h, f))]
        if cfg.mlp_bias:
            specs += [WeightSpec(p + "mlp.gate_proj.bias", (f,)), WeightSpec(p + "mlp.up_proj.bias", (f,)),
                      WeightSpec(p + "mlp.down_proj.bias", (h,))]
    specs.append(WeightSpec("model.norm.weight", (h,)))
    if not cfg.tie_word_embeddings:
        specs.append(WeightSpec("lm_head.weight", (cfg.vocab_size, h)))
    return checked_weight_specs(checkpoint, specs)


def checked_weight_specs(checkpoint: Checkpoint, specs: list[WeightSpec]) -> tuple[WeightSpec, ...]:
    """`specs` once every tensor is in the checkpoint with its shape (one line naming the first that is not)."""
    for spec in specs:
        if spec.name not in checkpoint.tensors:
            if spec.name == "lm_head.weight":
                raise MissingCheckpointFile("checkpoint has no lm_head.weight and config.json: "
                                            "tie_word_embeddings = false")
            raise MissingCheckpointFile(f"checkpoint has no tensor {spec.name} (required by config.json)")
        stored = checkpoint.tensors.info(spec.name).shape
        if stored != spec.shape:
            raise UnsupportedCheckpoint(f"tensor {spec.name} has shape {list(stored)}, config.json implies "
                                        f"{list(spec.shape)}")
    return tuple(specs)


def weight_resource(tensor: str, prefix: str = "") -> str:
    """The ExecutableResource id of a stored checkpoint tensor (`prefix` "draft." for the draft model's)."""
    return f"draft/weight/{tensor}" if prefix else f"weight/{tensor}"


def check_tensor_parallel(cfg: LlamaFamilyConfig, ranks: int) -> None:
    """`ranks` tensor-parallel ranks can split this model, or UnsupportedCheckpoint names the field.

    Query heads, the MLP's intermediate features and the vocabulary are split evenly; key/value
    heads are split when the ranks divide them and replicated (each rank holding the one head its
    query heads read) when the ranks are a multiple of them.
    """
    if ranks == 1:
        return
    for key, value in (("num_attention_heads", cfg.heads), ("intermediate_size", cfg.intermediate_size),
                       ("vocab_size", cfg.vocab_size)):
        if value % ranks:
            raise UnsupportedCheckpoint(f"--tp {ranks}: config.json: {key} = {value} is not divisible by {ranks} ranks")
    if cfg.kv_heads % ranks and ranks % cfg.kv_heads:
        raise UnsupportedCheckpoint(f"--tp {ranks}: config.json: num_key_value_heads = {cfg.kv_heads} neither "
                                    f"divides nor is divisible by {ranks} ranks")


def rank_kv_heads(cfg: LlamaFamilyConfig, shard: RankShard) -> tuple[int, int]:
    """[start, stop) of the key/value heads rank `shard` holds: its share when the ranks divide them,
    else the one head its query heads read (replicated on ranks // kv_heads ranks)."""
    if cfg.kv_heads % shard.ranks == 0:
        return shard.span(cfg.kv_heads)
    head = shard.rank // (shard.ranks // cfg.kv_heads)
    return head, head + 1


def weight_part(cfg: LlamaFamilyConfig, tensor: str, shard: RankShard | None) -> WeightPart | None:
    """The part of stored `tensor` the rank `shard` holds (all of it on a one-rank core), or None
    when the rank does not read it.

    Column-parallel (by output rows): q/k/v and gate/up (and their biases), the embedding and the
    output head (the vocabulary). Row-parallel (by input columns): o and down; their biases are held
    whole by rank 0 alone, which adds them once before the sum over ranks. Norms are held whole.
    """
    if shard is None or shard.ranks == 1:
        return WHOLE
    hd = cfg.head_dim
    leaf = tensor.rsplit(".", 2)
    module, kind = (leaf[-2], leaf[-1]) if len(leaf) == 3 else ("", "")
    if tensor in ("model.embed_tokens.weight", "lm_head.weight"):
        return WeightPart.rows(*shard.span(cfg.vocab_size))
    if module == "q_proj":
        start, stop = shard.span(cfg.heads)
        return WeightPart.rows(start * hd, stop * hd)
    if module in ("k_proj", "v_proj"):
        start, stop = rank_kv_heads(cfg, shard)
        return WeightPart.rows(start * hd, stop * hd)
    if module in ("gate_proj", "up_proj"):
        return WeightPart.rows(*shard.span(cfg.intermediate_size))
    if module == "o_proj" and kind == "weight":
        start, stop = shard.span(cfg.heads)
        return WeightPart.columns(start * hd, stop * hd)
    if module == "down_proj" and kind == "weight":
        return WeightPart.columns(*shard.span(cfg.intermediate_size))
    if module in ("o_proj", "down_proj") and kind == "bias" and shard.rank != 0:
        return None
    return WHOLE


def weight_parts(cfg: LlamaFamilyConfig, tensor: str, shard: RankShard | None) -> tuple[WeightPart, ...]:
    """The parts of stored `tensor` rank `shard` holds: `weight_part`'s one part, or none."""
    part = weight_part(cfg, tensor, shard)
    return () if part is None else (part,)


def lm_head_tensor(cfg: LlamaFamilyConfig) -> str:
    return "model.embed_tokens.weight" if cfg.tie_word_embeddings else "lm_head.weight"


# transformers' rope_type -> the rotary operator's (the operator names the formula, not a family).
ROPE_TYPES_FROM_HF = {"default": "default", "linear": "linear", "llama3": "frequency_band", "yarn": "yarn"}
# The rope parameters transformers' ROPE_INIT_FUNCTIONS read for each rope type (others are ignored).
_ROPE_KEYS = {
    "default": (),
    "linear": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor"),
    "yarn": ("factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim", "attention_factor"),
}
# The ones it requires (a KeyError there); yarn's factor may be null (derived below).
_ROPE_REQUIRED = {"linear": ("factor",), "llama3": ("factor", "low_freq_factor", "high_freq_factor")}


def _rope_attributes(cfg: LlamaFamilyConfig) -> dict[str, Any]:
    """The rotary operator's attributes: exactly the parameters transformers uses for the rope type."""
    rope = cfg.rope
    attributes: dict[str, Any] = {"theta": rope.theta, "head_dim": cfg.head_dim, "rotary_dim": cfg.rotary_dim,
                                  "rope_type": ROPE_TYPES_FROM_HF[rope.rope_type]}
    for key in _ROPE_REQUIRED.get(rope.rope_type, ()):
        if rope.get(key) is None:
            raise UnsupportedCheckpoint(
                f"config.json: rope_parameters.{key} is required by rope_type {rope.rope_type!r}")
    for key in _ROPE_KEYS[rope.rope_type]:
        value = rope.get(key)
        if value is not None:
            attributes[key] = value
    truncate = rope.get("truncate")
    if truncate is not None and rope.rope_type == "yarn":
        attributes["truncate"] = bool(truncate)
    original = rope.get("original_max_position_embeddings")
    if rope.rope_type in ("llama3", "yarn"):
        attributes["original_max_position_embeddings"] = int(original or cfg.max_position_embeddings)
    if rope.rope_type == "yarn" and "factor" not in attributes:
        # transformers: a null yarn factor is max_position_embeddings / original_max_position_embeddings.
        attributes["factor"] = cfg.max_position_embeddings / attributes["original_max_position_embeddings"]
    return attributes


@dataclass(frozen=True, slots=True)
class Decoder:
    """One model's decoder as programs read it: its config, its cache planes per layer and the names
    of its weights (`prefix` on program tensors and resources: "" for the target, "draft." for a
    speculative core's draft model, whose tensors are resources of the same core)."""

    cfg: LlamaFamilyConfig
    histories: tuple[HistoryPlanes, ...]
    weight_dtype: str
    prefix: str = ""
    # A tensor-parallel rank (None: the one rank of a one-rank core): the programs hold the rank's
    # heads, intermediate features and vocabulary slice, and meet the other ranks at collectives.
    shard: RankShard | None = None
    # An Engram table's gated sum (helios/ignition/preparation/engram.py, a test recipe) added to the
    # input of its layer; None: none.
    engram: EngramInjection | None = None

    final_norm = "model.norm.weight"  # the norm before the output head

    @property
    def state_bindings(self) -> tuple:
        """Value bindings the layers' state needs beyond the text inputs (none: paged histories only)."""
        return ()

    @property
    def ranks(self) -> int:
        return 1 if self.shard is None else self.shard.ranks

    def weights(self, b: ProgramBuilder, specs: dict[str, str]):
        """The weight-declaring function of this model in program `b` (each tensor declared once);
        `shape` is the stored tensor's, the declared one the rank's part of it."""
        def w(name: str, shape: tuple[int, ...]) -> str:
            key = self.prefix + name
            if key not in specs:
                part = weight_part(self.cfg, name, self.shard)
                if part is None:
                    raise ValueError(f"rank {self.shard.rank} does not hold {name}")  # type: ignore[union-attr]
                specs[key] = b.weight(key, resource=part.resource(weight_resource(name, self.prefix)),
                                      dtype=self.weight_dtype, shape=part.shape(shape))
            return specs[key]
        return w

    def _reduced(self, b: ProgramBuilder, x: str, *, name: str) -> str:
        """x summed over the ranks (a rank's partial product made whole); x itself on one rank."""
        if self.ranks == 1:
            return x
        return b.all_reduce(x, ranks=self.ranks, name=name)

    def _first_rank(self) -> bool:
        return self.shard is None or self.shard.rank == 0

    def embed(self, b: ProgramBuilder, w, tokens: str, *, name: str) -> str:
        cfg = self.cfg
        table = w("model.embed_tokens.weight", (cfg.vocab_size, cfg.hidden_size))
        if self.ranks == 1:
            return b.embedding(tokens, table, name=name)
        # Vocabulary-parallel: each rank's rows of its slice (zero rows for other ids), summed.
        start, _ = self.shard.span(cfg.vocab_size)  # type: ignore[union-attr]
        rows = b.embedding(tokens, table, row_offset=start, name=f"{name}.rank_rows")
        return self._reduced(b, rows, name=name)

    def layers(self, b: ProgramBuilder, w, x: str, positions: str, token_lane: str, page_table: str, *,
               tag: str) -> str:
        """Every decoder layer over packed rows `x` (each row's KV written to its lane's pages)."""
        cfg = self.cfg
        # The stored widths (the weights' shapes): on a rank, `w` declares the rank's part of each
        # (weight_part), and every width after it follows from the shapes.
        h, q_width, kv_width = cfg.hidden_size, cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
        rope = _rope_attributes(cfg)
        for i in range(cfg.layers):
            p = f"model.layers.{i}."
            n = f"{tag}l{i}"
            planes = self.histories[i]
            if self.engram is not None and i == self.engram.layer:
                x = self.engram.inject(b, w, x, tag=n, eps=cfg.rms_norm_eps)
            hn = b.rms_norm(x, w(p + "input_layernorm.weight", (h,)), eps=cfg.rms_norm_eps, name=f"{n}.attn_in")
            qkv = []
            for proj, width in (("q", q_width), ("k", kv_width), ("v", kv_width)):
                bias = w(p + f"self_attn.{proj}_proj.bias", (width,)) if cfg.qkv_bias else None
                qkv.append(b.matmul(hn, w(p + f"self_attn.{proj}_proj.weight", (width, h)), bias, name=f"{n}.{proj}"))
            q, k, v = qkv
            if cfg.qk_norm:
                q = b.head_rms_norm(q, w(p + "self_attn.q_norm.weight", (cfg.head_dim,)), eps=cfg.rms_norm_eps,
                                    head_dim=cfg.head_dim, name=f"{n}.q_normed")
                k = b.head_rms_norm(k, w(p + "self_attn.k_norm.weight", (cfg.head_dim,)), eps=cfg.rms_norm_eps,
                                    head_dim=cfg.head_dim, name=f"{n}.k_normed")
            q = b.rotary(q, positions, **rope, name=f"{n}.q_rot")
            k = b.rotary(k, positions, **rope, name=f"{n}.k_rot")
            key_cache = _cache_state(b, f"{self.prefix}l{i}.key_cache", planes.key, planes)
            value_cache = _cache_state(b, f"{self.prefix}l{i}.value_cache", planes.value, planes)
            b.paged_cache_write(key_cache, k, token_lane, positions, page_table)
            b.paged_cache_write(value_cache, v, token_lane, positions, page_table)
            attended = b.paged_attention(q, key_cache, value_cache, token_lane, positions, page_table,
                                         scale=cfg.head_dim ** -0.5, sliding_window=cfg.windows[i],
                                         name=f"{n}.attn")
            # Row-parallel: each rank's heads give a partial product, the bias is rank 0's to add once.
            o_bias = w(p + "self_attn.o_proj.bias", (h,)) if cfg.o_bias and self._first_rank() else None
            o = b.matmul(attended, w(p + "self_attn.o_proj.weight", (h, q_width)), o_bias,
                         name=f"{n}.o" if self.ranks == 1 else f"{n}.o_part")
            o = self._reduced(b, o, name=f"{n}.o")
            x = b.add(x, o, name=f"{n}.x_attn")
            hn = b.rms_norm(x, w(p + "post_attention_layernorm.weight", (h,)), eps=cfg.rms_norm_eps,
                            name=f"{n}.mlp_in")
            f = cfg.intermediate_size
            mlp_bias = {m: (w(p + f"mlp.{m}.bias", (e,)) if cfg.mlp_bias and (m != "down_proj" or self._first_rank())
                            else None)
                        for m, e in (("gate_proj", f), ("up_proj", f), ("down_proj", h))}
            gate = b.matmul(hn, w(p + "mlp.gate_proj.weight", (f, h)), mlp_bias["gate_proj"], name=f"{n}.gate")
            up = b.matmul(hn, w(p + "mlp.up_proj.weight", (f, h)), mlp_bias["up_proj"], name=f"{n}.up")
            act = b.gated_activation(gate, up, activation=cfg.activation, name=f"{n}.act")
            down = b.matmul(act, w(p + "mlp.down_proj.weight", (h, f)), mlp_bias["down_proj"],
                            name=f"{n}.down" if self.ranks == 1 else f"{n}.down_part")
            down = self._reduced(b, down, name=f"{n}.down")
            x = b.add(x, down, name=f"{n}.x")
        return x

    def head(self, b: ProgramBuilder, w, hidden: str, geometry: TextGeometry, *, tag: str) -> str:
        """Final norm and the output head: f32 logits of every row of `hidden`."""
        cfg = self.cfg
        normed = b.rms_norm(hidden, w(self.final_norm, (cfg.hidden_size,)), eps=cfg.rms_norm_eps,
                            name=f"{tag}final_hidden")
        head = w(lm_head_tensor(cfg), (cfg.vocab_size, cfg.hidden_size))
        if self.ranks == 1:
            return b.logits(normed, head, sampled_tokens=geometry.sampled_tokens, name=f"{tag}logits")
        # Vocabulary-parallel: each rank's slice of the columns, gathered into whole rows on every
        # rank, so every rank samples the same token from the same row (docs/ranks.md).
        start, stop = self.shard.span(cfg.vocab_size)  # type: ignore[union-attr]
        sampled = min(geometry.sampled_tokens - start, stop - start)
        if sampled < 1:
            raise UnsupportedCheckpoint(f"--tp {self.ranks}: rank {self.shard.rank}'s vocabulary slice "  # type: ignore[union-attr]
                                        f"[{start}, {stop}) holds no sampled token")
        part = b.logits(normed, head, sampled_tokens=sampled, name=f"{tag}logits.rank_columns")
        return b.all_gather(part, ranks=self.ranks, name=f"{tag}logits")


def _cache_state(b: ProgramBuilder, name: str, buffer: str, planes: HistoryPlanes) -> str:
    if b.declared(name):  # one plane, read and written by several passes of one program
        return name
    return b.state(name, buffer, "bf16" if planes.dtype == M.DTYPE_BF16 else "f32", planes.shape)


def text_program(cfg: LlamaFamilyConfig, geometry: TextGeometry, decl: Declarations, *, graph: str,
                 packed_tokens: int, weight_dtype: str, histories: list[HistoryPlanes],
                 pending_token: str = "device", draft: Decoder | None = None, completion_width: int = 1,
                 shard: RankShard | None = None, scores: tuple[int, int] | None = None,
                 decoder: Decoder | None = None, image_store_rows: int | None = None,
                 encoder: VisionTower | None = None, batch: int | None = None):
    """One PREFILL/DECODE/MIXED program (they differ only in P) and its value bindings.

    `batch` is the graph's batch capacity B. A graph of fewer lanes than request slots (B < S: every
    PREFILL graph, the smaller DECODE ones) runs the output head and the sampler over its B submission
    rows only, each gathered from its slot's row (`submission_slots`), and scatters the sampled ids
    back to their slots; a graph of B = S lanes (or B not given) runs them over the S slot rows.

    With `scores` = (R, K), the SCORED_PREFILL program of the same P: it also scores every packed
    row (`prompt_scores` of the row's logits at its SCORED_PREFILL_TARGETS target, and its top K)
    into the leading rows of the record's two [R, ...] score buffers.

    `pending_token` "device" (the default): the program reads each lane's last sampled id from the
    `pending_tokens` STATE row and writes every sampled id back there (`device_pending_tokens`), so no
    host binding feeds it; "host": a PENDING_TOKEN binding feeds it. With a `draft` (a speculative
    core), the draft model consumes the same packed rows, so its history stays in step with the
    target's for a later speculative round. With a `shard` the program is that rank's (its
    `histories` hold the rank's key/value heads). A `decoder` replaces the Llama-family decoder of
    `cfg` (another recipe's layers over the same inputs and tail; its `state_bindings` join the
    program's bindings).
    With `image_store_rows` (a vision core's feature
    store of that many rows) each packed row's input adds its image feature (`ImageContext.inject`);
    with an `encoder` too (a PREFILL program at the tower's patch capacity), the program first encodes
    the submission's image into its feature slot (`encode_image`: the vision encoder runs inside the
    prefill graph, the contract has no operation of its own for it).
    """
    if pending_token not in ("host", "device"):
        raise ValueError(f"pending_token must be 'host' or 'device', got {pending_token!r}")
    if draft is not None and shard is not None and shard.ranks > 1:
        raise ValueError("a draft model on tensor-parallel ranks is not built")
    b = ProgramBuilder(graph, rank=0 if shard is None else shard.rank)
    text = paged_text_inputs(decl, geometry, b, packed_tokens, host_pending=pending_token == "host")
    device = device_pending_tokens(decl, geometry, b, text) if pending_token == "device" else None
    tokens = text.tokens if device is None else device.tokens
    admission = admission_inputs(decl, geometry, b)
    sampling = sampling_inputs(decl, geometry, b)
    specs: dict[str, str] = {}
    target = decoder if decoder is not None else Decoder(cfg, tuple(histories), weight_dtype, shard=shard)
    w = target.weights(b, specs)
    x = target.embed(b, w, tokens, name="x")
    image_bindings: tuple = ()
    if encoder is not None and image_store_rows is None:
        raise ValueError("an encoder needs the feature store (image_store_rows)")
    if image_store_rows is not None:
        if shard is not None and shard.ranks > 1 or draft is not None:
            raise ValueError("image inputs on tensor-parallel ranks or with a draft model are not built")
        if encoder is not None:
            image_bindings = encode_image(b, encoder, feature_slots=image_store_rows // encoder.features,
                                          dtype=weight_dtype, decl=decl).bindings
        image = image_context_inputs(decl, b, packed_tokens, store_rows=image_store_rows, hidden=cfg.hidden_size,
                                     dtype=weight_dtype)
        x = image.inject(b, x, name="x_image")
        image_bindings += image.bindings
    x = target.layers(b, w, x, text.positions, text.token_lane, text.page_table, tag="")
    if draft is not None:
        dw = draft.weights(b, specs)
        dx = draft.embed(b, dw, tokens, name="draft.x")
        draft.layers(b, dw, dx, text.positions, text.token_lane, text.page_table, tag="draft.")
    score_bindings: tuple = ()
    if scores is not None:
        targets = prompt_score_inputs(decl, b, packed_tokens)
        every_row = target.head(b, w, x, geometry, tag="scored.")
        write_prompt_scores(b, every_row, targets.targets, rows=scores[0], top=scores[1])
        score_bindings = targets.bindings
    last = b.last_row_gather(x, text.token_lane, lanes=geometry.slots, name="last_hidden")
    last_position = b.last_row_gather(text.positions, text.token_lane, lanes=geometry.slots, name="last_position")
    endpoint = b.last_row_gather(text.next_positions, text.token_lane, lanes=geometry.slots, name="endpoint")
    submission_bindings: tuple = ()
    if batch is None or batch >= geometry.slots:
        logits = target.head(b, w, last, geometry, tag="")
        sampled = sampling.sample(b, logits, last_position)
    else:
        lanes, binding = submission_slots(decl, b, batch)
        submission_bindings = (binding,)
        logits = target.head(b, w, b.gather(last, lanes, name="lane_hidden"), geometry, tag="")
        drawn = b.sample(logits, b.gather(sampling.seed, lanes, name="lane_seed"),
                         b.gather(last_position, lanes, name="lane_last_position"),
                         b.gather(sampling.parameters, lanes, name="lane_sampling_parameters"),
                         b.gather(sampling.histogram, lanes, name="lane_prompt_histogram"),
                         b.gather(sampling.grammar_mask, lanes, name="lane_grammar_mask"), name="lane_sampled")
        # slots outside the submission keep 0 here; the pending-token commit and the completion
        # record read only the round's slots
        sampled = b.fill(0, shape=(geometry.slots,), dtype="i32", name="sampled")
        b.scatter(drawn, lanes, into=sampled)
    if device is not None:
        device.commit(b, sampled, admission.sampling_decision, in_round=endpoint)
    state_transfer(decl, geometry, b, generation=admission.generation, emitted=admission.sampling_decision,
                   sampled=sampled, consumed_endpoint=endpoint, width=completion_width)
    program = b.build(decl.buffers)
    bindings = (text.bindings + admission.bindings + sampling.bindings + (device.bindings if device else ())
                + score_bindings + target.state_bindings + image_bindings + submission_bindings)
    return program, bindings, sorted({d.resource for d in program.tensors
                                      if d.role == program_pb2.TENSOR_ROLE_WEIGHT})


def speculative_program(target: Decoder, draft: Decoder, geometry: TextGeometry, decl: Declarations, *,
                        graph: str, batch: int, drafts: int, width: int, packed_tokens: int, confidence: bool,
                        completion_width: int, confidence_capacity: int):
    """One complete SPECULATIVE program (docs/speculative.md) and its value bindings.

    The draft runs `passes = max(D, min(D + 1, W))` one-row-a-lane passes from each lane's pending
    token: pass j (position consumed + j) writes the draft's KV and, for j < D, draws proposal j + 1
    (`sample`, draw index 1) and its confidence; within a lane's copied run (history drafting) the
    proposal is the host's copied id instead, judged as drawn from a one-hot row (`copied_proposal`),
    and the draft's next pass reads it, so the draft's history follows the proposals either way. The lanes' target lengths are the host's
    (QUERY_LENGTH) or allocated on the device within P from the confidences (SPECULATIVE_PREFIX_LIMIT:
    the host's ceilings). The target then runs over the packed rows, every row's logits are judged
    (`speculative_verify`; first masked by each position's grammar mask, `speculative_grammar_mask`, in
    a program that takes copied proposals), and the accepted run is committed: the pending token, the completion's
    offers, accepted drafts, emitted ids, consumed endpoint and draft cursor (lag 0).
    """
    b = ProgramBuilder(graph)
    spec = speculative_inputs(decl, geometry, b, batch=batch, passes=max(drafts, min(drafts + 1, width)),
                              drafts=drafts, width=width, confidence=confidence,
                              confidence_capacity=confidence_capacity)
    admission = admission_inputs(decl, geometry, b, sampling_decision=False)
    sampling = sampling_inputs(decl, geometry, b)
    lanes = spec.lane_order
    seed, parameters = b.gather(sampling.seed, lanes, name="lane_seed"), b.gather(sampling.parameters, lanes,
                                                                                  name="lane_parameters")
    histogram = b.gather(sampling.histogram, lanes, name="lane_histogram")
    mask = b.gather(sampling.grammar_mask, lanes, name="lane_grammar_mask")
    pending = b.gather(spec.pending_state, lanes, name="lane_pending")
    columns = max(drafts, 1)
    candidates = b.fill(-1, shape=(batch, columns + 1), dtype="i32", name="candidates")
    b.column_write(pending, index=0, into=candidates)
    vocab = target.cfg.vocab_size
    draft_logits = b.fill(0, shape=(batch, columns, vocab), dtype="f32", name="draft_logits")
    scores = b.fill(0, shape=(batch, confidence_capacity), dtype="f32", name="confidence") if confidence else None
    specs: dict[str, str] = {}
    dw = draft.weights(b, specs)
    token = pending
    for j, position in enumerate(spec.pass_positions):
        dx = draft.embed(b, dw, token, name=f"draft.p{j}.x")
        hidden = draft.layers(b, dw, dx, position, lanes, spec.page_table, tag=f"draft.p{j}.")
        if j >= drafts:  # the last pass of a rectangular program only keeps the draft's history in step
            continue
        logits = draft.head(b, dw, hidden, geometry, tag=f"draft.p{j}.")
        token = b.sample(logits, seed, position, parameters, histogram, mask, draw_index=PROPOSAL_DRAW,
                         name=f"drawn{j + 1}")
        proposal_logits = logits
        if spec.copied_ids is not None:  # within a lane's copied run the host's id, its row one-hot
            token, proposal_logits = b.copied_proposal(token, logits, spec.copied_ids, spec.copied_count,
                                                       index=j, name=f"proposal{j + 1}")
        b.column_write(token, index=j + 1, into=candidates)
        b.column_write(proposal_logits, index=j, into=draft_logits)
        if scores is not None:  # the draft's own confidence in the proposal, copied or drawn
            score = b.token_probability(logits, token, parameters, histogram, mask, name=f"confidence{j + 1}")
            b.column_write(score, index=j, into=scores)
    if scores is not None:
        lengths = b.speculative_allocate(scores, spec.limits, lanes, packed_tokens=packed_tokens, name="lengths")
        spec.publish_confidence(b, scores)
    else:
        lengths = spec.limits
    tokens, positions, _, token_lane = b.speculative_pack(lanes, lengths, spec.consumed, candidates,
                                                          packed_tokens=packed_tokens)
    tw = target.weights(b, specs)
    x = target.embed(b, tw, tokens, name="x")
    x = target.layers(b, tw, x, positions, token_lane, spec.page_table, tag="")
    logits = target.head(b, tw, x, geometry, tag="")
    if spec.candidate_masks is not None:  # each row judged under its position's grammar mask
        logits, draft_logits = b.speculative_grammar_mask(logits, draft_logits, spec.candidate_masks, lengths)
    ids, accepted = b.speculative_verify(logits, draft_logits, candidates, lengths, spec.consumed, seed, parameters,
                                         histogram, mask, verify_tokens=completion_width)
    next_pending, emitted, endpoint = b.speculative_commit(ids, accepted, lengths, spec.consumed)
    b.scatter(next_pending, lanes, into=spec.pending_state)
    spec.complete(b, generation=admission.generation, ids=ids, offers=lengths, accepted=accepted, emitted=emitted,
                  endpoint=endpoint, width=completion_width)
    program = b.build(decl.buffers)
    bindings = spec.bindings + admission.bindings + sampling.bindings
    return program, bindings, sorted({d.resource for d in program.tensors
                                      if d.role == program_pb2.TENSOR_ROLE_WEIGHT})


def initialization_program(geometry: TextGeometry, decl: Declarations, *, graph: str, completion_width: int = 1,
                           rank: int = 0):
    """Per-request setup: the lane's completion row announces its generation, nothing emitted or consumed
    (the same on every rank: `rank` only names the program's)."""
    b = ProgramBuilder(graph, rank=rank)
    admission = admission_inputs(decl, geometry, b, sampling_decision=False)
    state_transfer(decl, geometry, b, generation=admission.generation, emitted=None, sampled=None,
                   consumed_endpoint=None, width=completion_width)
    return b.build(decl.buffers), admission.bindings
