"""A Llama for training the demo pair in fewer kernel launches (device side: imports torch;
preparation, not serving).

`python -m helios.demo.train` trains in eager PyTorch, where a step of the demo's small shapes is
bound by its kernel launches, not its arithmetic (BENCHMARKS.md, "The training step"). Hugging
Face's `LlamaForCausalLM` spends many launches a layer on bookkeeping: its RMS norm is several
elementwise kernels in FP32, q, k and v are three products of one input, gate and up two more, each
weight is cast for autocast apart, and rotary embedding is applied to q and to k apart.
`TrainingLlama` computes the same function in fewer: torch's RMS norm (`F.rms_norm`, fused where
torch has a fused kernel for the device), one product for q, k and v and one for gate and up (their
weights stacked), rotary embedding applied to q and k together, attention by
`F.scaled_dot_product_attention` over grouped heads.

It is a training form only: `as_hf` fills a `LlamaForCausalLM` with the same weights (the
stacked products split by rows into `q_proj`, `k_proj`, `v_proj`, `gate_proj` and `up_proj`), which
is what is saved, evaluated and served; `from_hf` is the inverse. It exposes the surface the training
loop and the drafter's distillation read from an HF model: `model.model(input_ids=...)
.last_hidden_state`, `model.lm_head(hidden)` (the tied embedding) and `model(input_ids=...).logits`.
tests/demo/test_training_model.py checks that both forms compute the same logits and gradients.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

# the demo Llama's rotary base and norm epsilon, in both forms (`train.build_model` reads them)
ROPE_THETA = 10000.0
RMS_EPS = 1e-6


class ModelShape(Protocol):
    """A Llama geometry (`train.ModelShape`)."""

    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int


class _Layer(nn.Module):
    def __init__(self, shape: ModelShape) -> None:
        super().__init__()
        hidden, self.heads, self.kv_heads = shape.hidden_size, shape.num_heads, shape.num_kv_heads
        self.head_dim = hidden // shape.num_heads
        self.input_norm = nn.Parameter(torch.ones(hidden))
        self.qkv = nn.Linear(hidden, (self.heads + 2 * self.kv_heads) * self.head_dim, bias=False)
        self.o = nn.Linear(self.heads * self.head_dim, hidden, bias=False)
        self.post_norm = nn.Parameter(torch.ones(hidden))
        self.gate_up = nn.Linear(hidden, 2 * shape.intermediate_size, bias=False)
        self.down = nn.Linear(shape.intermediate_size, hidden, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        batch, length, hidden = x.shape
        h = F.rms_norm(x, (hidden,), self.input_norm, RMS_EPS)
        qkv = self.qkv(h).view(batch, length, self.heads + 2 * self.kv_heads, self.head_dim).transpose(1, 2)
        qk, v = qkv.split([self.heads + self.kv_heads, self.kv_heads], dim=1)
        qk = _rotary(qk, cos.to(qk.dtype), sin.to(qk.dtype))
        q, k = qk.split([self.heads, self.kv_heads], dim=1)
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.heads != self.kv_heads)
        x = x + self.o(attended.transpose(1, 2).reshape(batch, length, self.heads * self.head_dim))
        gate, up = self.gate_up(F.rms_norm(x, (hidden,), self.post_norm, RMS_EPS)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


def _rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Llama's rotary embedding (halves rotated, as `rotate_half`) of x [B, heads, T, D]."""
    first, second = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-second, first), dim=-1) * sin


class _Decoder(nn.Module):
    def __init__(self, shape: ModelShape, vocab_size: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, shape.hidden_size)
        self.layers = nn.ModuleList(_Layer(shape) for _ in range(shape.num_layers))
        self.norm = nn.Parameter(torch.ones(shape.hidden_size))
        head_dim = shape.hidden_size // shape.num_heads
        inverse = 1.0 / (ROPE_THETA ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
        self.register_buffer("inverse_frequencies", inverse, persistent=False)

    def forward(self, input_ids: torch.Tensor) -> SimpleNamespace:
        x = self.embed(input_ids)
        positions = torch.arange(input_ids.shape[1], device=input_ids.device, dtype=torch.float32)
        angles = torch.outer(positions, self.inverse_frequencies)
        angles = torch.cat((angles, angles), dim=-1)
        cos, sin = angles.cos(), angles.sin()
        for layer in self.layers:
            x = layer(x, cos, sin)
        return SimpleNamespace(last_hidden_state=F.rms_norm(x, (x.shape[-1],), self.norm, RMS_EPS))


class _TiedHead(nn.Module):
    """The output product with the input embedding's weights (`tie_word_embeddings`)."""

    def __init__(self, embed: nn.Embedding) -> None:
        super().__init__()
        self._embed = [embed]  # a list: not registered twice as a submodule

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return F.linear(hidden, self._embed[0].weight)


class TrainingLlama(nn.Module):
    """The training form of `train.build_model`'s Llama (module docstring)."""

    def __init__(self, shape: ModelShape, vocab_size: int) -> None:
        super().__init__()
        self.shape, self.vocab_size = shape, vocab_size
        self.model = _Decoder(shape, vocab_size)
        self.lm_head = _TiedHead(self.model.embed)
        self.apply(_initialize)

    def forward(self, input_ids: torch.Tensor) -> SimpleNamespace:
        return SimpleNamespace(logits=self.lm_head(self.model(input_ids=input_ids).last_hidden_state))


def _initialize(module: nn.Module) -> None:
    """Hugging Face's Llama initialization: normal(0, 0.02) products and embedding."""
    if isinstance(module, nn.Linear | nn.Embedding):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)


def _named(model: TrainingLlama) -> list[tuple[torch.Tensor, tuple[str, ...], tuple[int, ...]]]:
    """Each of `model`'s tensors with the `LlamaForCausalLM` weights it holds, stacked by rows in
    that order, and their row counts: the one table both directions of the mapping read."""
    shape, decoder = model.shape, model.model
    head_dim = shape.hidden_size // shape.num_heads
    q_rows, kv_rows, inner = shape.num_heads * head_dim, shape.num_kv_heads * head_dim, shape.intermediate_size

    def whole(tensor: torch.Tensor, name: str) -> tuple[torch.Tensor, tuple[str, ...], tuple[int, ...]]:
        return tensor, (name,), (tensor.shape[0],)

    named = [whole(decoder.embed.weight, "model.embed_tokens.weight"), whole(decoder.norm, "model.norm.weight")]
    for i, layer in enumerate(decoder.layers):
        prefix = f"model.layers.{i}."
        named += [
            whole(layer.input_norm, prefix + "input_layernorm.weight"),
            (layer.qkv.weight, tuple(prefix + f"self_attn.{p}_proj.weight" for p in "qkv"), (q_rows, kv_rows, kv_rows)),
            whole(layer.o.weight, prefix + "self_attn.o_proj.weight"),
            whole(layer.post_norm, prefix + "post_attention_layernorm.weight"),
            (layer.gate_up.weight, (prefix + "mlp.gate_proj.weight", prefix + "mlp.up_proj.weight"), (inner, inner)),
            whole(layer.down.weight, prefix + "mlp.down_proj.weight"),
        ]
    return named


def hf_state_dict(model: TrainingLlama) -> dict[str, torch.Tensor]:
    """`model`'s weights under `LlamaForCausalLM`'s names (the stacked products split by rows)."""
    state = {}
    for tensor, names, rows in _named(model):
        state |= dict(zip(names, tensor.detach().split(list(rows)), strict=True))
    return state


def as_hf(model: TrainingLlama, hf: nn.Module) -> nn.Module:
    """`hf`, a `LlamaForCausalLM` of `model`'s shape (`train.build_model`), holding `model`'s weights
    on `model`'s device."""
    hf = hf.to(model.model.embed.weight.device)
    missing, unexpected = hf.load_state_dict(hf_state_dict(model), strict=False)
    # the tied lm_head is the embedding: the only key the state leaves out
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise ValueError(f"the training form's weights do not map onto the Llama: missing {missing}, "
                         f"unexpected {unexpected}")
    return hf


def from_hf(hf: nn.Module, shape: ModelShape) -> TrainingLlama:
    """The training form holding `hf`'s weights (the inverse of `as_hf`)."""
    state = {name: tensor.detach() for name, tensor in hf.state_dict().items()}
    model = TrainingLlama(shape, hf.config.vocab_size).to(state["model.embed_tokens.weight"].device)
    with torch.no_grad():
        for tensor, names, _ in _named(model):
            tensor.copy_(torch.cat([state[name] for name in names]))
    return model
