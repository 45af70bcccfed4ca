"""The LFM2 recipe (preparation side, host): Liquid's hybrid decoder of gated short convolutions and
grouped-query attention layers (transformers' `Lfm2ForCausalLM`, dense).

Owns reading such a checkpoint's config into `Lfm2Config` (rejecting what it cannot serve with one
line naming the config field) and the decoder as programs over the operator set. The programs are
the Llama-family recipe's (`llama_family.text_program`, `initialization_program`) over an
`Lfm2Decoder`, whose layers are, per `layer_types`:

    conv:           rms_norm, in_proj as three products (B, C, x), mul B*x, short_convolution
                    (its state row: the last conv_L_cache - 1 inputs, docs/recurrent.md), mul C*conv,
                    out_proj, add
    full_attention: rms_norm, q/k/v matmul, head_rms_norm q, k, rotary q, k, paged_cache_write k, v,
                    paged_attention, out_proj, add
    then:           rms_norm, w1/w3 matmul, gated_activation (silu), w2 matmul, add

and the final norm is `model.embedding_norm`. The convolution layers' state is a RECURRENT history
(`helios.ignition.preparation.recurrent`), one state row per request; the attention layers keep
paged key/value planes. Tensor-parallel ranks and learned drafting are not built for this family
(refused in one line).
"""

from __future__ import annotations

from dataclasses import dataclass

from helios.ignition.preparation.contract import HistoryPlanes
from helios.ignition.preparation.ranks import WHOLE, RankShard, WeightPart
from helios.ignition.preparation.recurrent import RecurrentHistory
from helios.ignition.reader import Checkpoint, MissingCheckpointFile, RopeParameters, UnsupportedCheckpoint
from helios.ignition.recipes.catalog import RECIPE_MODULES
from helios.ignition.recipes.llama_family import (
    ROPE_TYPES_FROM_HF,
    Decoder,
    WeightSpec,
    _cache_state,
    _int,
    _number,
    _rope_attributes,
    lm_head_tensor,
    weight_resource,
)
from helios.program import ProgramBuilder
from helios.proto import contract_pb2

RECIPE = "lfm2"
MODEL_TYPES = tuple(t for t, module in RECIPE_MODULES.items() if module == "lfm2")
LAYER_TYPES = ("conv", "full_attention")


@dataclass(frozen=True, slots=True)
class Lfm2Config:
    """What the programs depend on, read once from config.json (the fields the shared decoder code
    reads have the Llama-family config's names)."""

    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int  # the feed-forward width transformers builds (block_auto_adjust_ff_dim applied)
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    rotary_dim: int
    rms_norm_eps: float
    tie_word_embeddings: bool
    conv_taps: int  # conv_L_cache: the convolution's K
    conv_bias: bool
    attention: tuple[bool, ...]  # per layer: full attention (else a short convolution)
    rope: RopeParameters
    max_position_embeddings: int
    activation: str = "silu"

    @property
    def windows(self) -> tuple[None, ...]:
        return (None,) * self.layers

    @property
    def conv_layers(self) -> list[int]:
        return [i for i, attention in enumerate(self.attention) if not attention]

    @property
    def attention_layers(self) -> list[int]:
        return [i for i, attention in enumerate(self.attention) if attention]


def _feed_forward_width(config, intermediate: int) -> int:
    """transformers' Lfm2MLP width: 2/3 of intermediate_size, scaled and rounded up to a multiple
    when block_auto_adjust_ff_dim (its default) is set."""
    if not config.get("block_auto_adjust_ff_dim", True):
        return intermediate
    width = int(2 * intermediate / 3)
    multiplier = config.get("block_ffn_dim_multiplier", 1.0)
    if multiplier is not None:
        width = int(multiplier * width)
        multiple = _int(config, "block_multiple_of", 256)
        width = multiple * ((width + multiple - 1) // multiple)
    if width < 1:
        raise UnsupportedCheckpoint(f"config.json: intermediate_size = {intermediate} gives a feed-forward width "
                                    f"of {width}")
    return width


def parse_config(checkpoint: Checkpoint) -> Lfm2Config:
    """The LFM2 config of `checkpoint`; UnsupportedCheckpoint names the first field it cannot serve.
    Absent keys mean what transformers' Lfm2Config defaults them to."""
    config = checkpoint.config
    model_type = config.get("model_type")
    if model_type not in MODEL_TYPES:
        raise UnsupportedCheckpoint(f"config.json: model_type = {model_type!r} (this recipe serves {list(MODEL_TYPES)})")
    quantization = config.get("quantization_config")
    if quantization:
        method = quantization.get("quant_method") if isinstance(quantization, dict) else quantization
        raise UnsupportedCheckpoint(f"config.json: quantization_config (quant_method = {method!r}): quantized "
                                    "checkpoints are not supported")
    rope = checkpoint.rope
    if "rope_parameters" not in config and "rope_theta" not in config and "rope_scaling" not in config:
        rope = RopeParameters("default", 1000000.0)  # Lfm2Config's default theta
    if rope.rope_type not in ROPE_TYPES_FROM_HF:
        raise UnsupportedCheckpoint(f"config.json: rope_parameters.rope_type = {rope.rope_type!r} "
                                    f"(supported: {list(ROPE_TYPES_FROM_HF)})")
    hidden = _int(config, "hidden_size", 2560)
    heads = _int(config, "num_attention_heads", 32)
    kv_heads = _int(config, "num_key_value_heads", 8)
    if heads % kv_heads:
        raise UnsupportedCheckpoint(f"config.json: num_attention_heads = {heads} is not a multiple of "
                                    f"num_key_value_heads = {kv_heads}")
    head_dim = config.get("head_dim") or hidden // heads
    if hidden % heads and not config.get("head_dim"):
        raise UnsupportedCheckpoint(f"config.json: hidden_size = {hidden} is not a multiple of "
                                    f"num_attention_heads = {heads}")
    layers = _int(config, "num_hidden_layers", 32)
    layer_types = config.get("layer_types")
    if layer_types is None:  # transformers: full attention at full_attn_idxs, convolutions elsewhere
        indices = config.get("full_attn_idxs")
        indices = list(range(layers)) if indices is None else indices
        layer_types = ["full_attention" if i in indices else "conv" for i in range(layers)]
    if not isinstance(layer_types, list) or len(layer_types) != layers:
        raise UnsupportedCheckpoint(f"config.json: layer_types must list {layers} layer types")
    unknown = sorted({str(t) for t in layer_types if t not in LAYER_TYPES})
    if unknown:
        raise UnsupportedCheckpoint(f"config.json: layer_types holds {unknown[0]!r} (supported: {list(LAYER_TYPES)})")
    taps = _int(config, "conv_L_cache", 3)
    if taps < 2:
        raise UnsupportedCheckpoint(f"config.json: conv_L_cache = {taps} must be >= 2")
    partial = rope.get("partial_rotary_factor")
    if partial is not None and partial != 1.0:
        raise UnsupportedCheckpoint(f"config.json: partial_rotary_factor = {partial!r} is not supported")
    return Lfm2Config(
        model_type=model_type, vocab_size=_int(config, "vocab_size", 65536), hidden_size=hidden,
        intermediate_size=_feed_forward_width(config, _int(config, "intermediate_size", 12288)),
        layers=layers, heads=heads, kv_heads=kv_heads, head_dim=int(head_dim), rotary_dim=int(head_dim),
        rms_norm_eps=_number(config, "norm_eps", 1e-5),
        tie_word_embeddings=bool(config.get("tie_word_embeddings", True)),
        conv_taps=taps, conv_bias=bool(config.get("conv_bias", False)),
        attention=tuple(t == "full_attention" for t in layer_types), rope=rope,
        max_position_embeddings=_int(config, "max_position_embeddings", 128000))


def check_tensor_parallel(cfg: Lfm2Config, ranks: int) -> None:
    if ranks != 1:
        raise UnsupportedCheckpoint(f"--tp {ranks}: tensor-parallel ranks are not built for model_type "
                                    f"{cfg.model_type!r} (prepare with --tp 1)")


def weight_specs(cfg: Lfm2Config, checkpoint: Checkpoint) -> tuple[WeightSpec, ...]:
    """Every tensor the programs read, in a fixed order, checked against the checkpoint."""
    h, f = cfg.hidden_size, cfg.intermediate_size
    q, kv = cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
    specs = [WeightSpec("model.embed_tokens.weight", (cfg.vocab_size, h))]
    for i in range(cfg.layers):
        p = f"model.layers.{i}."
        specs.append(WeightSpec(p + "operator_norm.weight", (h,)))
        if cfg.attention[i]:
            specs += [WeightSpec(p + "self_attn.q_proj.weight", (q, h)), WeightSpec(p + "self_attn.k_proj.weight", (kv, h)),
                      WeightSpec(p + "self_attn.v_proj.weight", (kv, h)),
                      WeightSpec(p + "self_attn.q_layernorm.weight", (cfg.head_dim,)),
                      WeightSpec(p + "self_attn.k_layernorm.weight", (cfg.head_dim,)),
                      WeightSpec(p + "self_attn.out_proj.weight", (h, q))]
        else:
            specs += [WeightSpec(p + "conv.in_proj.weight", (3 * h, h)),
                      WeightSpec(p + "conv.conv.weight", (h, 1, cfg.conv_taps)),
                      WeightSpec(p + "conv.out_proj.weight", (h, h))]
            if cfg.conv_bias:
                specs += [WeightSpec(p + "conv.in_proj.bias", (3 * h,)), WeightSpec(p + "conv.conv.bias", (h,)),
                          WeightSpec(p + "conv.out_proj.bias", (h,))]
        specs += [WeightSpec(p + "ffn_norm.weight", (h,)), WeightSpec(p + "feed_forward.w1.weight", (f, h)),
                  WeightSpec(p + "feed_forward.w3.weight", (f, h)), WeightSpec(p + "feed_forward.w2.weight", (h, f))]
    specs.append(WeightSpec("model.embedding_norm.weight", (h,)))
    if not cfg.tie_word_embeddings:
        specs.append(WeightSpec("lm_head.weight", (cfg.vocab_size, h)))
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


def _thirds(cfg: Lfm2Config) -> tuple[WeightPart, WeightPart, WeightPart]:
    """in_proj's rows of B, C and x (transformers chunks its output in that order)."""
    h = cfg.hidden_size
    return WeightPart.rows(0, h), WeightPart.rows(h, 2 * h), WeightPart.rows(2 * h, 3 * h)


def weight_parts(cfg: Lfm2Config, tensor: str, shard: RankShard | None) -> tuple[WeightPart, ...]:
    """The parts of stored `tensor` the programs read: in_proj (and its bias) as its three row
    blocks, every other tensor whole."""
    if tensor.endswith(("conv.in_proj.weight", "conv.in_proj.bias")):
        return _thirds(cfg)
    return (WHOLE,)


def recurrent_record(cfg: Lfm2Config) -> tuple[int, ...]:
    """One request's state of one convolution layer: its last K-1 inputs of every channel."""
    return (cfg.conv_taps - 1, cfg.hidden_size)


@dataclass(frozen=True, slots=True)
class Lfm2Decoder(Decoder):
    """The LFM2 decoder: `histories[i]` holds layer i's key/value planes (None for a convolution
    layer), `recurrent` the convolution layers' state planes."""

    recurrent: RecurrentHistory | None = None
    decl: object = None  # the core's Declarations (the LIVE_STATE_ROWS transport is registered there)

    final_norm = "model.embedding_norm.weight"

    @property
    def state_bindings(self) -> tuple[contract_pb2.ValueBinding, ...]:
        return self.recurrent.bindings if self.recurrent is not None else ()

    def weights(self, b: ProgramBuilder, specs: dict[str, str]):
        def w(name: str, shape: tuple[int, ...], part: WeightPart = WHOLE) -> str:
            key = self.prefix + name if part.axis is None else f"{self.prefix}{name}.{part.resource('')[1:]}"
            if key not in specs:
                specs[key] = b.weight(key, resource=part.resource(weight_resource(name, self.prefix)),
                                      dtype=self.weight_dtype, shape=part.shape(shape))
            return specs[key]
        return w

    def layers(self, b: ProgramBuilder, w, x: str, positions: str, token_lane: str, page_table: str, *,
               tag: str) -> str:
        cfg = self.cfg
        h, f = cfg.hidden_size, cfg.intermediate_size
        q_width, kv_width = cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
        rope = _rope_attributes(cfg)
        eps = cfg.rms_norm_eps
        for i in range(cfg.layers):
            p = f"model.layers.{i}."
            n = f"{tag}l{i}"
            hn = b.rms_norm(x, w(p + "operator_norm.weight", (h,)), eps=eps, name=f"{n}.operator_in")
            if cfg.attention[i]:
                planes: HistoryPlanes = self.histories[i]  # type: ignore[assignment]
                q = b.matmul(hn, w(p + "self_attn.q_proj.weight", (q_width, h)), name=f"{n}.q")
                k = b.matmul(hn, w(p + "self_attn.k_proj.weight", (kv_width, h)), name=f"{n}.k")
                v = b.matmul(hn, w(p + "self_attn.v_proj.weight", (kv_width, h)), name=f"{n}.v")
                q = b.head_rms_norm(q, w(p + "self_attn.q_layernorm.weight", (cfg.head_dim,)), eps=eps,
                                    head_dim=cfg.head_dim, name=f"{n}.q_normed")
                k = b.head_rms_norm(k, w(p + "self_attn.k_layernorm.weight", (cfg.head_dim,)), eps=eps,
                                    head_dim=cfg.head_dim, name=f"{n}.k_normed")
                q = b.rotary(q, positions, **rope, name=f"{n}.q_rot")
                k = b.rotary(k, positions, **rope, name=f"{n}.k_rot")
                key_cache = _cache_state(b, f"{self.prefix}l{i}.key_cache", planes.key, planes)
                value_cache = _cache_state(b, f"{self.prefix}l{i}.value_cache", planes.value, planes)
                b.paged_cache_write(key_cache, k, token_lane, positions, page_table)
                b.paged_cache_write(value_cache, v, token_lane, positions, page_table)
                attended = b.paged_attention(q, key_cache, value_cache, token_lane, positions, page_table,
                                             scale=cfg.head_dim ** -0.5, name=f"{n}.attn")
                o = b.matmul(attended, w(p + "self_attn.out_proj.weight", (h, q_width)), name=f"{n}.o")
            else:
                assert self.recurrent is not None
                gates = []
                for part, what in zip(_thirds(cfg), ("b", "c", "x"), strict=True):
                    bias = w(p + "conv.in_proj.bias", (3 * h,), part) if cfg.conv_bias else None
                    gates.append(b.matmul(hn, w(p + "conv.in_proj.weight", (3 * h, h), part), bias,
                                          name=f"{n}.conv_{what}"))
                b_gate, c_gate, inputs = gates
                gated = b.mul(b_gate, inputs, name=f"{n}.conv_in")
                conv_bias = w(p + "conv.conv.bias", (h,)) if cfg.conv_bias else None
                state_rows = self.recurrent.live_rows(self.decl, b)  # type: ignore[arg-type]
                conv = b.short_convolution(self.recurrent.state(b, i), gated,
                                           w(p + "conv.conv.weight", (h, 1, cfg.conv_taps)), token_lane, positions,
                                           state_rows, conv_bias, name=f"{n}.conv")
                y = b.mul(c_gate, conv, name=f"{n}.conv_out")
                out_bias = w(p + "conv.out_proj.bias", (h,)) if cfg.conv_bias else None
                o = b.matmul(y, w(p + "conv.out_proj.weight", (h, h)), out_bias, name=f"{n}.o")
            x = b.add(x, o, name=f"{n}.x_operator")
            hn = b.rms_norm(x, w(p + "ffn_norm.weight", (h,)), eps=eps, name=f"{n}.ffn_in")
            gate = b.matmul(hn, w(p + "feed_forward.w1.weight", (f, h)), name=f"{n}.gate")
            up = b.matmul(hn, w(p + "feed_forward.w3.weight", (f, h)), name=f"{n}.up")
            act = b.gated_activation(gate, up, activation=cfg.activation, name=f"{n}.act")
            down = b.matmul(act, w(p + "feed_forward.w2.weight", (h, f)), name=f"{n}.down")
            x = b.add(x, down, name=f"{n}.x")
        return x


__all__ = ["MODEL_TYPES", "RECIPE", "Lfm2Config", "Lfm2Decoder", "check_tensor_parallel", "lm_head_tensor",
           "parse_config", "recurrent_record", "weight_parts", "weight_specs"]
