"""A small valid program over every kind of tensor role, shared by the program tests."""

from __future__ import annotations

from helios.program import ProgramBuilder
from helios.proto import manifest_pb2

P, B, H, V, PAGE_TOKENS, MAX_PAGES, HEADS, KV_HEADS, HEAD_DIM = 6, 2, 16, 32, 4, 3, 4, 2, 4


def tiny_builder(graph: str = "decode_b2") -> ProgramBuilder:
    b = ProgramBuilder(graph, rank=0)
    ids = b.transport("ids", "tokens", "i32", [P])
    lane = b.transport("token_lane", "token_lane", "i32", [P])
    pos = b.transport("positions", "positions", "i32", [P])
    table = b.transport("page_table", "page_table", "i32", [B, MAX_PAGES])
    embed = b.weight("embed", "model.embed", "f32", [V, H])
    x = b.embedding(ids, embed, name="x")
    h = b.rms_norm(x, b.weight("norm", "model.norm", "f32", [H]), eps=1e-6)
    q = b.matmul(h, b.weight("wq", "model.wq", "f32", [HEADS * HEAD_DIM, H]))
    k = b.matmul(h, b.weight("wk", "model.wk", "f32", [KV_HEADS * HEAD_DIM, H]))
    v = b.matmul(h, b.weight("wv", "model.wv", "f32", [KV_HEADS * HEAD_DIM, H]))
    q = b.rotary(q, pos, theta=10000.0, head_dim=HEAD_DIM)
    k = b.rotary(k, pos, theta=10000.0, head_dim=HEAD_DIM)
    key_cache = b.state("key_cache", "cache.k", "f32", [0, PAGE_TOKENS, KV_HEADS, HEAD_DIM])
    value_cache = b.state("value_cache", "cache.v", "f32", [0, PAGE_TOKENS, KV_HEADS, HEAD_DIM])
    b.paged_cache_write(key_cache, k, lane, pos, table)
    b.paged_cache_write(value_cache, v, lane, pos, table)
    a = b.paged_attention(q, key_cache, value_cache, lane, pos, table, scale=HEAD_DIM ** -0.5)
    o = b.matmul(a, b.weight("wo", "model.wo", "f32", [H, HEADS * HEAD_DIM]))
    x = b.add(x, o)
    last = b.last_row_gather(x, lane, lanes=B)
    logits = b.logits(last, embed)
    sampled = b.completion("sampled", "completion.sampled", "i32", [B])
    b.argmax(logits, into=sampled)
    b.fill(-1, into=b.completion("reserved", "completion.reserved", "i32", [B]))
    return b


def tiny_buffers() -> dict[str, manifest_pb2.BufferDescriptor]:
    T = manifest_pb2
    rows = [
        ("tokens", T.BUFFER_ROLE_TRANSPORT, T.DTYPE_I32, [P]),
        ("token_lane", T.BUFFER_ROLE_TRANSPORT, T.DTYPE_I32, [P]),
        ("positions", T.BUFFER_ROLE_TRANSPORT, T.DTYPE_I32, [P]),
        ("page_table", T.BUFFER_ROLE_TRANSPORT, T.DTYPE_I32, [B, MAX_PAGES]),
        ("cache.k", T.BUFFER_ROLE_CACHE, T.DTYPE_F32, [0, PAGE_TOKENS, KV_HEADS, HEAD_DIM]),
        ("cache.v", T.BUFFER_ROLE_CACHE, T.DTYPE_F32, [0, PAGE_TOKENS, KV_HEADS, HEAD_DIM]),
        ("completion.sampled", T.BUFFER_ROLE_COMPLETION, T.DTYPE_I32, [B]),
        ("completion.reserved", T.BUFFER_ROLE_COMPLETION, T.DTYPE_I32, [B]),
    ]
    return {name: T.BufferDescriptor(name=name, role=role, dtype=dtype, shape=shape) for name, role, dtype, shape in rows}
