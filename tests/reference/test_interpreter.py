"""The reference interpreter: binding rules, in-place state and completion writes, dtype rounding,
and one rule for prefill, chunked prefill and decode over the paged cache."""

from __future__ import annotations

import numpy as np
import pytest

from helios.program import ProgramBuilder, validate_program
from helios.program.types import BF16, F16, I32
from helios.reference import operators as ops
from helios.reference.interpreter import (
    MissingTensorValue,
    ReadOnlyTensorValue,
    TensorValueMismatch,
    bf16_to_f32,
    execute,
    f32_to_bf16,
    round_to_dtype,
)
from tests.program.tiny import HEAD_DIM, HEADS, KV_HEADS, MAX_PAGES, PAGE_TOKENS, B, H, V, tiny_builder

RNG = np.random.default_rng(4)


def weights() -> dict[str, np.ndarray]:
    def w(*shape):
        return (RNG.standard_normal(shape) * 0.3).astype(np.float32)

    return {"model.embed": w(V, H), "model.norm": 1 + w(H), "model.wq": w(HEADS * HEAD_DIM, H),
            "model.wk": w(KV_HEADS * HEAD_DIM, H), "model.wv": w(KV_HEADS * HEAD_DIM, H),
            "model.wo": w(H, HEADS * HEAD_DIM)}


def bound(weights_by_resource: dict[str, np.ndarray], pages: int = 8) -> dict[str, np.ndarray]:
    return {
        **weights_by_resource,
        "tokens": np.array([3, 7, 1, 30, 2, 0], np.int32),
        "token_lane": np.array([0, 0, 0, 1, 1, -1], np.int32),
        "positions": np.array([0, 1, 2, 0, 1, 0], np.int32),
        "page_table": np.array([[5, 2, 0], [7, 1, 0]], np.int32),
        "cache.k": np.zeros((pages, PAGE_TOKENS, KV_HEADS, HEAD_DIM), np.float32),
        "cache.v": np.zeros((pages, PAGE_TOKENS, KV_HEADS, HEAD_DIM), np.float32),
        "completion.sampled": np.full(B, 99, np.int32),
        "completion.reserved": np.zeros(B, np.int32),
    }


def by_hand(t: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The tiny program's logits and argmax, composed directly from the reference operators."""
    k_cache, v_cache = np.zeros_like(t["cache.k"]), np.zeros_like(t["cache.v"])
    lane, pos, table = t["token_lane"], t["positions"], t["page_table"]
    x = ops.embedding(t["tokens"], t["model.embed"])
    h = ops.rms_norm(x, t["model.norm"], eps=1e-6)
    q = ops.rotary(ops.matmul(h, t["model.wq"]), pos, theta=10000.0, head_dim=HEAD_DIM, rotary_dim=HEAD_DIM)
    k = ops.rotary(ops.matmul(h, t["model.wk"]), pos, theta=10000.0, head_dim=HEAD_DIM, rotary_dim=HEAD_DIM)
    ops.paged_cache_write(k_cache, k, lane, pos, table)
    ops.paged_cache_write(v_cache, ops.matmul(h, t["model.wv"]), lane, pos, table)
    a = ops.paged_attention(q, k_cache, v_cache, lane, pos, table, scale=HEAD_DIM ** -0.5)
    x = ops.add(x, ops.matmul(a, t["model.wo"]))
    logits = ops.logits(ops.last_row_gather(x, lane, lanes=B), t["model.embed"])
    return logits, ops.argmax(logits)


def test_execute_matches_the_operators_composed_by_hand_and_writes_in_place():
    program = tiny_builder().build()
    tensors = bound(weights())
    tokens_before = tensors["tokens"].copy()
    env = execute(program, tensors)
    logits, ids = by_hand(tensors)
    logits_name = next(o.outputs[0] for o in program.operators if o.op == "logits")
    np.testing.assert_array_equal(env[logits_name], logits)
    np.testing.assert_array_equal(tensors["completion.sampled"], ids)  # the caller's array
    np.testing.assert_array_equal(tensors["completion.reserved"], [-1, -1])
    assert env["sampled"] is tensors["completion.sampled"]
    assert np.count_nonzero(tensors["cache.k"].any(axis=(2, 3))) == 5  # five real rows, padding skipped
    np.testing.assert_array_equal(tensors["tokens"], tokens_before)


def test_tensors_bind_by_tensor_name_before_resource_or_buffer():
    program = tiny_builder().build()
    tensors = bound(weights())
    tensors["embed"] = tensors.pop("model.embed")  # the WEIGHT tensor's own name
    tensors["ids"] = tensors.pop("tokens")  # a TRANSPORT tensor's own name
    execute(program, tensors)
    tensors["ids"] = np.array([0, 0, 0, 0, 0, 0], np.int32)
    tensors["tokens"] = np.array([31, 31, 31, 31, 31, 31], np.int32)  # ignored: the tensor name wins
    env = execute(program, tensors)
    np.testing.assert_array_equal(env["x"][0], tensors["embed"][0])


def test_validated_operators_can_be_reused():
    program = tiny_builder().build()
    operators = validate_program(program)
    a = bound(weights())
    execute(program, a, operators)
    b = {k: (v.copy() if k.startswith("completion") or k.startswith("cache") else v) for k, v in a.items()}
    b["cache.k"][:] = 0
    b["cache.v"][:] = 0
    execute(program, b, operators)
    np.testing.assert_array_equal(a["completion.sampled"], b["completion.sampled"])


def test_missing_and_mismatched_arrays_are_rejected():
    program = tiny_builder().build()
    tensors = bound(weights())
    del tensors["model.wq"]
    with pytest.raises(MissingTensorValue, match="'wq'.*model.wq"):
        execute(program, tensors)
    tensors = bound(weights())
    tensors["positions"] = tensors["positions"].astype(np.int64)
    with pytest.raises(TensorValueMismatch, match="'positions'"):
        execute(program, tensors)
    tensors = bound(weights())
    tensors["page_table"] = np.zeros((B, MAX_PAGES + 1), np.int32)
    with pytest.raises(TensorValueMismatch, match="'page_table'"):
        execute(program, tensors)
    tensors = bound(weights())
    tensors["cache.k"].setflags(write=False)
    with pytest.raises(ReadOnlyTensorValue, match="'key_cache'"):
        execute(program, tensors)


def test_load_sized_cache_planes_accept_any_page_count():
    program = tiny_builder().build()
    small = bound(weights(), pages=8)
    execute(program, small)
    large = {**small, "cache.k": np.zeros((40, PAGE_TOKENS, KV_HEADS, HEAD_DIM), np.float32),
             "cache.v": np.zeros((40, PAGE_TOKENS, KV_HEADS, HEAD_DIM), np.float32),
             "completion.sampled": np.zeros(B, np.int32)}
    execute(program, large)
    np.testing.assert_array_equal(small["completion.sampled"], large["completion.sampled"])


def test_bf16_conversion_rounds_to_nearest_even():
    assert f32_to_bf16(np.float32([1.0]))[0] == 0x3F80
    # 1 + 2^-8 lies halfway between two bf16 values: ties go to the even mantissa (1.0).
    assert bf16_to_f32(f32_to_bf16(np.float32([1 + 2**-8])))[0] == 1.0
    assert bf16_to_f32(f32_to_bf16(np.float32([1 + 3 * 2**-8])))[0] == 1 + 2**-6
    assert np.isnan(bf16_to_f32(f32_to_bf16(np.float32([np.nan])))[0])
    values = RNG.standard_normal(100).astype(np.float32)
    rounded = round_to_dtype(values, BF16)
    np.testing.assert_array_equal(round_to_dtype(rounded, BF16), rounded)
    assert np.max(np.abs(rounded - values) / np.abs(values)) <= 2**-8
    assert round_to_dtype(values, F16).dtype == np.float16
    assert round_to_dtype(np.float32([2.0]), I32).dtype == np.int32


def test_bf16_programs_store_bf16_values_in_scratch_and_cache():
    b = ProgramBuilder("bf16")
    x = b.transport("x", "x", "bf16", [2, 8])
    w = b.weight("w", "w", "bf16", [8, 8])
    lane = b.transport("lane", "lane", "i32", [2])
    pos = b.transport("pos", "pos", "i32", [2])
    table = b.transport("table", "table", "i32", [1, 1])
    cache = b.state("cache", "cache", "bf16", [0, 2, 2, 4])
    y = b.matmul(x, w)
    b.paged_cache_write(cache, b.transport("f32_values", "f32_values", "f32", [2, 8]), lane, pos, table)
    program = b.build()
    tensors = {
        "x": round_to_dtype(RNG.standard_normal((2, 8)).astype(np.float32), BF16),
        "w": round_to_dtype(RNG.standard_normal((8, 8)).astype(np.float32), BF16),
        "lane": np.zeros(2, np.int32), "pos": np.arange(2, dtype=np.int32), "table": np.zeros((1, 1), np.int32),
        "cache": np.zeros((1, 2, 2, 4), np.float32),
        "f32_values": RNG.standard_normal((2, 8)).astype(np.float32),
    }
    env = execute(program, tensors)
    np.testing.assert_array_equal(env[y], round_to_dtype(tensors["x"] @ tensors["w"].T, BF16))
    np.testing.assert_array_equal(tensors["cache"][0].reshape(2, 8), round_to_dtype(tensors["f32_values"], BF16))


def attention_program(rows: int, lanes: int, pages: int) -> tuple:
    """Embed, project, rotate, write the cache, attend: the same program at any token capacity."""
    b = ProgramBuilder(f"attend_p{rows}")
    ids = b.transport("ids", "ids", "i32", [rows])
    lane = b.transport("lane", "lane", "i32", [rows])
    pos = b.transport("pos", "pos", "i32", [rows])
    table = b.transport("table", "table", "i32", [lanes, pages])
    x = b.embedding(ids, b.weight("embed", "embed", "f32", [V, H]))
    q = b.rotary(b.matmul(x, b.weight("wq", "wq", "f32", [HEADS * HEAD_DIM, H])), pos, theta=500.0,
                 head_dim=HEAD_DIM)
    k = b.rotary(b.matmul(x, b.weight("wk", "wk", "f32", [KV_HEADS * HEAD_DIM, H])), pos, theta=500.0,
                 head_dim=HEAD_DIM)
    v = b.matmul(x, b.weight("wv", "wv", "f32", [KV_HEADS * HEAD_DIM, H]))
    plane = [0, PAGE_TOKENS, KV_HEADS, HEAD_DIM]
    key_cache, value_cache = b.state("kc", "kc", "f32", plane), b.state("vc", "vc", "f32", plane)
    b.paged_cache_write(key_cache, k, lane, pos, table)
    b.paged_cache_write(value_cache, v, lane, pos, table)
    b.paged_attention(q, key_cache, value_cache, lane, pos, table, scale=0.5, sliding_window=6, name="out")
    return b.build()


def test_prefill_chunked_prefill_and_decode_are_one_rule():
    w = weights()
    w = {"embed": w["model.embed"], "wq": w["model.wq"], "wk": w["model.wk"], "wv": w["model.wv"]}
    prompt = RNG.integers(0, V, 11).astype(np.int32)
    table = np.array([[3, 0, 2, 1]], np.int32)

    def planes():
        return {"kc": np.zeros((4, PAGE_TOKENS, KV_HEADS, HEAD_DIM), np.float32),
                "vc": np.zeros((4, PAGE_TOKENS, KV_HEADS, HEAD_DIM), np.float32)}

    whole = execute(attention_program(12, 1, 4), {
        **w, **planes(), "ids": np.append(prompt, 0).astype(np.int32), "lane": np.array([0] * 11 + [-1], np.int32),
        "pos": np.arange(12, dtype=np.int32), "table": table})["out"][:11]
    state = planes()
    pieces = []
    for start, stop, capacity in ((0, 5, 6), (5, 9, 6), (9, 10, 1), (10, 11, 1)):  # prefill chunks, then decode
        n = stop - start
        env = execute(attention_program(capacity, 1, 4), {
            **w, **state, "ids": np.pad(prompt[start:stop], (0, capacity - n)).astype(np.int32),
            "lane": np.array([0] * n + [-1] * (capacity - n), np.int32),
            "pos": np.pad(np.arange(start, stop), (0, capacity - n)).astype(np.int32), "table": table})
        pieces.append(env["out"][:n])
    np.testing.assert_allclose(np.concatenate(pieces), whole, rtol=1e-5, atol=1e-6)
