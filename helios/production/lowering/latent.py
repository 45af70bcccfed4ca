"""The latent-attention operators' lowerings (device side): `latent_attention` (the Triton kernel of
`kernels/latent.py`, split along the context as paged attention is) and `head_matmul` (one batched
torch product over the heads into a static scratch, copied into the output's head columns)."""

from __future__ import annotations

import torch

from helios.production.kernels import attention, latent
from helios.production.lowering.context import Context
from helios.program.validate import ValidatedOperator


def lower_head_matmul(c: Context, op: ValidatedOperator):
    x, weight, out = c.t(op.inputs[0]), c.t(op.inputs[1]), c.t(op.outputs[0])
    heads, out_width, in_width = weight.shape
    rows = x.shape[0]
    by_head = x.view(rows, heads, in_width).transpose(0, 1)  # [H, N, I], a strided view
    weight_t = weight.transpose(1, 2)  # [H, I, O]
    # one static scratch per shape, shared by every plan (launches run in order on the stream)
    product = c.arena.memo(("head_matmul", heads, rows, out_width, out.dtype),
                           lambda: torch.empty((heads, rows, out_width), dtype=out.dtype, device=out.device))
    into = out.view(rows, heads, out_width)

    def run() -> None:
        torch.matmul(by_head, weight_t, out=product)
        into.copy_(product.transpose(0, 1))
    return run


def lower_latent_attention(c: Context, op: ValidatedOperator):
    q_latent, q_rope, latent_cache, rope_cache, lanes, positions, table = (c.t(n) for n in op.inputs)
    out = c.t(op.outputs[0])
    _, page_tokens, _, width = latent_cache.shape
    heads = q_latent.shape[1] // width
    rows = q_latent.shape[0]
    splits, block_n = 1, 32
    paths = c.gpu_paths
    if paths is not None:  # the split and combine at every context length
        splits, block_n = paths.attention_splits, paths.attention_keys
    elif c.device.type == "cuda":
        splits = attention.choose_splits(rows, 1, table.shape[1] * page_tokens)
    scratch = None
    if splits > 1:
        scratch = c.arena.memo(("attention", rows, heads, width, splits),
                               lambda: attention.split_scratch(rows, heads, width, splits, c.device))
    scale = float(op.attributes["scale"])
    return lambda: latent.latent_attention(q_latent, q_rope, latent_cache, rope_cache, lanes, positions, table, out,
                                           scale=scale, splits=splits, scratch=scratch, block_n=block_n)
