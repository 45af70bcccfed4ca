"""The DeepSeek-V3 recipe, dense configurations (preparation side, host): multi-head latent attention
(transformers' `DeepseekV3ForCausalLM` with every layer's feed-forward dense, that is
`first_k_dense_replace >= num_hidden_layers`).

Owns reading such a checkpoint's config into `DeepseekV3Config` (rejecting what it cannot serve with
one line naming the config field), the per-head weight layouts the programs read, and the decoder
as programs over the operator set. The programs are the Llama-family recipe's
(`llama_family.text_program`, `initialization_program`) over a `LatentDecoder`, whose layers are

    rms_norm; [q_a_proj matmul, rms_norm (q_a_layernorm)]; q matmul as two products (no-position
    rows, rotary rows); kv_a_proj as two products (latent rows, rotary-key rows); rms_norm of the
    latent (kv_a_layernorm); rotary q_rope, k_rope; paged_cache_write k_rope, latent;
    head_matmul q_nope by W_uk^T (into the latent space); latent_attention; head_matmul by W_uv;
    o_proj matmul, add; rms_norm, gate/up matmul, gated_activation (silu), down matmul, add

Each layer's history is a PAGED_LATENT region (`helios.ignition.preparation.latent`): per token the
latent after its norm and the rotated key, paged like key/value planes. The decompression
`kv_b_proj` is never applied to the history: its key block of each head is absorbed into that
head's query and its value block applied to that head's latent output, the two prepared once as
per-head matrices (`HeadRows`). `rope_interleave` (DeepSeek's interleaved rotary pairs) is a
permutation of the rotary rows of q and kv_a at preparation: the rotary operator then rotates
halves, as transformers' interleaved formula does. Mixture-of-experts layers, tensor-parallel ranks
and learned drafting are not built for this family (refused in one line).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from helios.ignition.preparation.contract import HistoryPlanes
from helios.ignition.preparation.latent import HeadRows
from helios.ignition.preparation.ranks import WHOLE, RankShard, WeightPart
from helios.ignition.reader import Checkpoint, RopeParameters, UnsupportedCheckpoint
from helios.ignition.recipes.catalog import RECIPE_MODULES
from helios.ignition.recipes.llama_family import (
    ROPE_TYPES_FROM_HF,
    Decoder,
    WeightSpec,
    _cache_state,
    _int,
    _number,
    _rope_attributes,
    checked_weight_specs,
    lm_head_tensor,
    weight_resource,
)
from helios.program import ProgramBuilder
from helios.proto import manifest_pb2

RECIPE = "deepseek_v3"
MODEL_TYPES = tuple(t for t, module in RECIPE_MODULES.items() if module == "deepseek_v3")
# transformers' DeepseekV3RMSNorm default: q_a_layernorm and kv_a_layernorm are built without the
# config's rms_norm_eps
LATENT_NORM_EPS = 1e-6


@dataclass(frozen=True, slots=True)
class DeepseekV3Config:
    """What the programs depend on, read once from config.json (the fields the shared decoder code
    reads have the Llama-family config's names)."""

    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    layers: int
    heads: int
    q_lora_rank: int | None  # None: one q_proj product
    kv_lora_rank: int  # L: the latent's features
    nope_dim: int  # qk_nope_head_dim: a head's query/key features without position
    rope_dim: int  # qk_rope_head_dim: R, a head's rotary features (the shared rotary key's width)
    v_dim: int  # v_head_dim
    rms_norm_eps: float
    tie_word_embeddings: bool
    attention_bias: bool
    rope_interleave: bool
    rope: RopeParameters
    max_position_embeddings: int
    activation: str = "silu"

    @property
    def head_dim(self) -> int:
        """The rotary operator's head width: the rotary rows of a head (transformers' head_dim)."""
        return self.rope_dim

    @property
    def rotary_dim(self) -> int:
        return self.rope_dim

    @property
    def windows(self) -> tuple[None, ...]:
        return (None,) * self.layers

    @property
    def q_dim(self) -> int:
        """qk_head_dim: a head's query width (no-position then rotary rows)."""
        return self.nope_dim + self.rope_dim

    def scale(self) -> float:
        """The softmax scale: qk_head_dim^-0.5, times mscale(factor, mscale_all_dim)^2 under a scaled rope
        (transformers' yarn_apply_mscale)."""
        scale = self.q_dim ** -0.5
        if self.rope.rope_type != "default":
            mscale_all_dim = self.rope.get("mscale_all_dim") or 0.0
            factor = self.rope.get("factor") or 1.0
            if mscale_all_dim and factor > 1:
                mscale = 0.1 * mscale_all_dim * math.log(factor) + 1.0
                scale *= mscale * mscale
        return scale


def parse_config(checkpoint: Checkpoint) -> DeepseekV3Config:
    """The DeepSeek-V3 config of `checkpoint`; UnsupportedCheckpoint names the first field it cannot
    serve. Absent keys mean what transformers' DeepseekV3Config defaults them to."""
    config = checkpoint.config
    model_type = config.get("model_type")
    if model_type not in MODEL_TYPES:
        raise UnsupportedCheckpoint(f"config.json: model_type = {model_type!r} (this recipe serves {list(MODEL_TYPES)})")
    quantization = config.get("quantization_config")
    if quantization:
        method = quantization.get("quant_method") if isinstance(quantization, dict) else quantization
        raise UnsupportedCheckpoint(f"config.json: quantization_config (quant_method = {method!r}): quantized "
                                    "checkpoints are not supported")
    layers = _int(config, "num_hidden_layers", 61)
    dense = config.get("first_k_dense_replace", 3)
    if dense is None or isinstance(dense, bool) or not isinstance(dense, int) or dense < layers:
        raise UnsupportedCheckpoint(f"config.json: first_k_dense_replace = {dense!r} < num_hidden_layers = {layers}: "
                                    "mixture-of-experts layers are not supported (a dense configuration needs "
                                    "first_k_dense_replace >= num_hidden_layers)")
    activation = config.get("hidden_act", "silu")
    if activation != "silu":
        raise UnsupportedCheckpoint(f"config.json: hidden_act = {activation!r} (supported: 'silu')")
    rope = checkpoint.rope
    if rope.rope_type not in ROPE_TYPES_FROM_HF:
        raise UnsupportedCheckpoint(f"config.json: rope_parameters.rope_type = {rope.rope_type!r} "
                                    f"(supported: {list(ROPE_TYPES_FROM_HF)})")
    partial = rope.get("partial_rotary_factor", config.get("partial_rotary_factor"))
    if partial is not None and partial != 1.0:
        raise UnsupportedCheckpoint(f"config.json: partial_rotary_factor = {partial!r} is not supported")
    q_lora = config.get("q_lora_rank", 1536)
    if q_lora is not None:
        q_lora = _int(config, "q_lora_rank")
    rope_dim = _int(config, "qk_rope_head_dim", 64)
    if rope_dim % 2:
        raise UnsupportedCheckpoint(f"config.json: qk_rope_head_dim = {rope_dim} must be even")
    v_dim = config.get("v_head_dim", 128)
    return DeepseekV3Config(
        model_type=model_type, vocab_size=_int(config, "vocab_size", 129280),
        hidden_size=_int(config, "hidden_size", 7168), intermediate_size=_int(config, "intermediate_size", 18432),
        layers=layers, heads=_int(config, "num_attention_heads", 128), q_lora_rank=q_lora,
        kv_lora_rank=_int(config, "kv_lora_rank", 512), nope_dim=_int(config, "qk_nope_head_dim", 128),
        rope_dim=rope_dim, v_dim=_int({"v_head_dim": 128 if v_dim is None else v_dim}, "v_head_dim"),
        rms_norm_eps=_number(config, "rms_norm_eps", 1e-6),
        tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
        attention_bias=bool(config.get("attention_bias", False)),
        rope_interleave=bool(config.get("rope_interleave", True)), rope=rope,
        max_position_embeddings=_int(config, "max_position_embeddings", 4096))


def check_tensor_parallel(cfg: DeepseekV3Config, ranks: int) -> None:
    if ranks != 1:
        raise UnsupportedCheckpoint(f"--tp {ranks}: tensor-parallel ranks are not built for model_type "
                                    f"{cfg.model_type!r} (prepare with --tp 1)")


def _q_tensor(cfg: DeepseekV3Config) -> str:
    return "self_attn.q_proj.weight" if cfg.q_lora_rank is None else "self_attn.q_b_proj.weight"


def weight_specs(cfg: DeepseekV3Config, checkpoint: Checkpoint) -> tuple[WeightSpec, ...]:
    """Every tensor the programs read, in a fixed order, checked against the checkpoint."""
    h, f, heads = cfg.hidden_size, cfg.intermediate_size, cfg.heads
    specs = [WeightSpec("model.embed_tokens.weight", (cfg.vocab_size, h))]
    for i in range(cfg.layers):
        p = f"model.layers.{i}."
        specs.append(WeightSpec(p + "input_layernorm.weight", (h,)))
        if cfg.q_lora_rank is None:
            specs.append(WeightSpec(p + "self_attn.q_proj.weight", (heads * cfg.q_dim, h)))
        else:
            specs.append(WeightSpec(p + "self_attn.q_a_proj.weight", (cfg.q_lora_rank, h)))
            if cfg.attention_bias:
                specs.append(WeightSpec(p + "self_attn.q_a_proj.bias", (cfg.q_lora_rank,)))
            specs += [WeightSpec(p + "self_attn.q_a_layernorm.weight", (cfg.q_lora_rank,)),
                      WeightSpec(p + "self_attn.q_b_proj.weight", (heads * cfg.q_dim, cfg.q_lora_rank))]
        specs.append(WeightSpec(p + "self_attn.kv_a_proj_with_mqa.weight", (cfg.kv_lora_rank + cfg.rope_dim, h)))
        if cfg.attention_bias:
            specs.append(WeightSpec(p + "self_attn.kv_a_proj_with_mqa.bias", (cfg.kv_lora_rank + cfg.rope_dim,)))
        specs += [WeightSpec(p + "self_attn.kv_a_layernorm.weight", (cfg.kv_lora_rank,)),
                  WeightSpec(p + "self_attn.kv_b_proj.weight", (heads * (cfg.nope_dim + cfg.v_dim), cfg.kv_lora_rank)),
                  WeightSpec(p + "self_attn.o_proj.weight", (h, heads * cfg.v_dim))]
        if cfg.attention_bias:
            specs.append(WeightSpec(p + "self_attn.o_proj.bias", (h,)))
        specs += [WeightSpec(p + "post_attention_layernorm.weight", (h,)),
                  WeightSpec(p + "mlp.gate_proj.weight", (f, h)), WeightSpec(p + "mlp.up_proj.weight", (f, h)),
                  WeightSpec(p + "mlp.down_proj.weight", (h, f))]
    specs.append(WeightSpec("model.norm.weight", (h,)))
    if not cfg.tie_word_embeddings:
        specs.append(WeightSpec("lm_head.weight", (cfg.vocab_size, h)))
    return checked_weight_specs(checkpoint, specs)


def query_parts(cfg: DeepseekV3Config) -> tuple[HeadRows, HeadRows]:
    """q's rows of every head: its no-position rows, its rotary rows (rotate-half order)."""
    return (HeadRows(cfg.heads, cfg.q_dim, 0, cfg.nope_dim),
            HeadRows(cfg.heads, cfg.q_dim, cfg.nope_dim, cfg.q_dim, deinterleaved=cfg.rope_interleave))


def compressed_parts(cfg: DeepseekV3Config) -> tuple[WeightPart, HeadRows]:
    """kv_a_proj_with_mqa's rows: the latent's, the shared rotary key's (rotate-half order)."""
    width = cfg.kv_lora_rank + cfg.rope_dim
    return (WeightPart.rows(0, cfg.kv_lora_rank),
            HeadRows(1, width, cfg.kv_lora_rank, width, deinterleaved=cfg.rope_interleave))


def decompression_parts(cfg: DeepseekV3Config) -> tuple[HeadRows, HeadRows]:
    """kv_b_proj as per-head matrices: W_uk^T [heads, L, nope] (absorbed into the query) and W_uv
    [heads, v, L] (applied to each head's latent output)."""
    block = cfg.nope_dim + cfg.v_dim
    return (HeadRows(cfg.heads, block, 0, cfg.nope_dim, split=True, transposed=True),
            HeadRows(cfg.heads, block, cfg.nope_dim, block, split=True))


def weight_parts(cfg: DeepseekV3Config, tensor: str, shard: RankShard | None) -> tuple[WeightPart | HeadRows, ...]:
    """The parts of stored `tensor` the programs read: q (q_proj or q_b_proj) and kv_a_proj (and its
    bias) by rows, kv_b_proj as per-head matrices, every other tensor whole."""
    if tensor.endswith(("self_attn.q_proj.weight", "self_attn.q_b_proj.weight")):
        return query_parts(cfg)
    if tensor.endswith(("self_attn.kv_a_proj_with_mqa.weight", "self_attn.kv_a_proj_with_mqa.bias")):
        return compressed_parts(cfg)
    if tensor.endswith("self_attn.kv_b_proj.weight"):
        return decompression_parts(cfg)
    return (WHOLE,)


@dataclass(frozen=True, slots=True)
class LatentDecoder(Decoder):
    """The dense DeepSeek-V3 decoder: `histories[i]` holds layer i's latent and rotary-key planes."""

    def weights(self, b: ProgramBuilder, specs: dict[str, str]):
        def w(name: str, shape: tuple[int, ...], part: WeightPart | HeadRows = WHOLE) -> str:
            resource = part.resource(weight_resource(name, self.prefix))
            key = self.prefix + name if part is WHOLE else resource
            if key not in specs:
                specs[key] = b.weight(key, resource=resource, dtype=self.weight_dtype, shape=part.shape(shape))
            return specs[key]
        return w

    def layers(self, b: ProgramBuilder, w, x: str, positions: str, token_lane: str, page_table: str, *,
               tag: str) -> str:
        cfg: DeepseekV3Config = self.cfg  # type: ignore[assignment]
        h, f, heads = cfg.hidden_size, cfg.intermediate_size, cfg.heads
        latent, rope_dim = cfg.kv_lora_rank, cfg.rope_dim
        compressed = (latent + rope_dim, h)
        rope = _rope_attributes(cfg)  # type: ignore[arg-type]
        eps = cfg.rms_norm_eps
        for i in range(cfg.layers):
            p = f"model.layers.{i}.self_attn."
            n = f"{tag}l{i}"
            planes: HistoryPlanes = self.histories[i]
            hn = b.rms_norm(x, w(f"model.layers.{i}.input_layernorm.weight", (h,)), eps=eps, name=f"{n}.attn_in")
            q_in, q_shape = hn, (heads * cfg.q_dim, h)
            if cfg.q_lora_rank is not None:
                rank = cfg.q_lora_rank
                bias = w(p + "q_a_proj.bias", (rank,)) if cfg.attention_bias else None
                q_a = b.matmul(hn, w(p + "q_a_proj.weight", (rank, h)), bias, name=f"{n}.q_a")
                q_in = b.rms_norm(q_a, w(p + "q_a_layernorm.weight", (rank,)), eps=LATENT_NORM_EPS,
                                  name=f"{n}.q_a_normed")
                q_shape = (heads * cfg.q_dim, rank)
            nope_part, rope_part = query_parts(cfg)
            q_nope = b.matmul(q_in, w(p + _q_tensor(cfg).removeprefix("self_attn."), q_shape, nope_part),
                              name=f"{n}.q_nope")
            q_rope = b.matmul(q_in, w(p + _q_tensor(cfg).removeprefix("self_attn."), q_shape, rope_part),
                              name=f"{n}.q_rope")
            latent_part, key_part = compressed_parts(cfg)
            biases = [w(p + "kv_a_proj_with_mqa.bias", (compressed[0],), part) if cfg.attention_bias else None
                      for part in (latent_part, key_part)]
            c = b.matmul(hn, w(p + "kv_a_proj_with_mqa.weight", compressed, latent_part), biases[0],
                         name=f"{n}.latent_raw")
            k_rope = b.matmul(hn, w(p + "kv_a_proj_with_mqa.weight", compressed, key_part), biases[1],
                              name=f"{n}.k_rope")
            c = b.rms_norm(c, w(p + "kv_a_layernorm.weight", (latent,)), eps=LATENT_NORM_EPS, name=f"{n}.latent")
            q_rope = b.rotary(q_rope, positions, **rope, name=f"{n}.q_rot")
            k_rope = b.rotary(k_rope, positions, **rope, name=f"{n}.k_rot")
            latent_cache = _cache_state(b, f"{self.prefix}l{i}.latent_cache", planes.key, planes)
            rope_cache = _rope_state(b, f"{self.prefix}l{i}.rope_cache", planes)
            b.paged_cache_write(rope_cache, k_rope, token_lane, positions, page_table)
            b.paged_cache_write(latent_cache, c, token_lane, positions, page_table)
            absorb, expand = decompression_parts(cfg)
            decompression = (heads * (cfg.nope_dim + cfg.v_dim), latent)
            q_latent = b.head_matmul(q_nope, w(p + "kv_b_proj.weight", decompression, absorb), name=f"{n}.q_latent")
            attended = b.latent_attention(q_latent, q_rope, latent_cache, rope_cache, token_lane, positions,
                                          page_table, scale=cfg.scale(), name=f"{n}.attn_latent")
            values = b.head_matmul(attended, w(p + "kv_b_proj.weight", decompression, expand), name=f"{n}.attn")
            o_bias = w(p + "o_proj.bias", (h,)) if cfg.attention_bias else None
            o = b.matmul(values, w(p + "o_proj.weight", (h, heads * cfg.v_dim)), o_bias, name=f"{n}.o")
            x = b.add(x, o, name=f"{n}.x_attn")
            m = f"model.layers.{i}."
            hn = b.rms_norm(x, w(m + "post_attention_layernorm.weight", (h,)), eps=eps, name=f"{n}.mlp_in")
            gate = b.matmul(hn, w(m + "mlp.gate_proj.weight", (f, h)), name=f"{n}.gate")
            up = b.matmul(hn, w(m + "mlp.up_proj.weight", (f, h)), name=f"{n}.up")
            act = b.gated_activation(gate, up, activation=cfg.activation, name=f"{n}.act")
            down = b.matmul(act, w(m + "mlp.down_proj.weight", (h, f)), name=f"{n}.down")
            x = b.add(x, down, name=f"{n}.x")
        return x


def _rope_state(b: ProgramBuilder, name: str, planes: HistoryPlanes) -> str:
    """The rotary-key plane's STATE tensor (its shape is the second plane's)."""
    if b.declared(name):
        return name
    shape = planes.value_shape or planes.shape
    return b.state(name, planes.value, "bf16" if planes.dtype == manifest_pb2.DTYPE_BF16 else "f32", shape)


__all__ = ["MODEL_TYPES", "RECIPE", "DeepseekV3Config", "LatentDecoder", "check_tensor_parallel",
           "lm_head_tensor", "parse_config", "weight_parts", "weight_specs"]
