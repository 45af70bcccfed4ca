"""The vision-encoder operators' lowerings (device side): `activation` (the Triton elementwise kernel
of `kernels/activation.py`) and `bidirectional_attention` (torch on static tensors).

A vision encoder attends over one image's few hundred patches: the attention is a product of two
small matrices per head, which torch runs at the bandwidth it needs. The group mask comes from the
`group` tensor on the device (no host value, so the launch captures in a CUDA graph); a row of a
negative group has no keys and stores zeros.
"""

from __future__ import annotations

import torch

from helios.production.kernels import activation
from helios.production.lowering.context import Context
from helios.program.validate import ValidatedOperator


def lower_activation(c: Context, op: ValidatedOperator):
    x, out = c.t(op.inputs[0]), c.t(op.outputs[0])
    kind = str(op.attributes["activation"])
    block = {} if c.gpu_paths is None else {"block": c.gpu_paths.copy_block}
    return lambda: activation.plain_activation(x, out, activation=kind, **block)


def bidirectional_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, group: torch.Tensor,
                            out: torch.Tensor, *, scale: float, head_dim: int) -> None:
    """out = softmax(scale * q k^T over the row's group) v per head, in FP32; zeros for group < 0."""
    rows = q.shape[0]
    heads, kv_heads = q.shape[1] // head_dim, k.shape[1] // head_dim
    qh = q.float().reshape(rows, heads, head_dim).transpose(0, 1)  # [H, N, D]
    kh = k.float().reshape(rows, kv_heads, head_dim).transpose(0, 1)
    vh = v.float().reshape(rows, kv_heads, head_dim).transpose(0, 1)
    if kv_heads != heads:
        kh = kh.repeat_interleave(heads // kv_heads, dim=0)
        vh = vh.repeat_interleave(heads // kv_heads, dim=0)
    allowed = (group[:, None] == group[None, :]) & (group[:, None] >= 0)  # [N, N]
    scores = torch.matmul(qh, kh.transpose(1, 2)) * scale
    scores = scores.masked_fill(~allowed, float("-inf"))
    peak = scores.amax(dim=-1, keepdim=True).clamp_min(torch.finfo(torch.float32).min)
    weights = torch.exp(scores - peak)
    weights = weights / weights.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(torch.float32).tiny)
    result = torch.matmul(weights, vh).transpose(0, 1).reshape(rows, heads * head_dim)
    out.copy_(result)


def lower_bidirectional_attention(c: Context, op: ValidatedOperator):
    q, k, v, group = (c.t(n) for n in op.inputs)
    out = c.t(op.outputs[0])
    scale, head_dim = float(op.attributes["scale"]), int(op.attributes["head_dim"])
    return lambda: bidirectional_attention(q, k, v, group, out, scale=scale, head_dim=head_dim)
