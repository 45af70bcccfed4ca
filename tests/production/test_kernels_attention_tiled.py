"""Paged attention tiled over a lane's query rows (`query_tile`) against the reference operator, on
fresh random cohorts: long prefill lanes, ragged lanes whose boundaries fall inside tiles, MIXED-like
rounds (decode rows next to a prefill chunk), padding, windows, soft-caps, grouped-query heads, a
non-power-of-two head width and chunks that start and end mid-page."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helios.production.buffers import ScratchArena
from helios.production.kernels import attention
from helios.production.lowering import lower_program
from helios.program import validate_program
from helios.program.builder import ProgramBuilder
from helios.reference import operators as ref
from tests.production.helpers import DEVICE, DTYPE, GPU, close, cohort, numpy, tensor, values

TOLERANCE = 3e-2 if DTYPE != torch.float32 else 2e-5


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng()


def _case(rng, *, history, queries, padding, group, head_dim=32, kv_heads=2, page_tokens=8, shuffle=False):
    max_pages = -(-max(h + n for h, n in zip(history, queries, strict=True)) // page_tokens) + 1
    c = cohort(rng, lanes=len(history), history=history, queries=queries, padding=padding,
               page_tokens=page_tokens, max_pages=max_pages)
    token_lane, positions = c.token_lane, c.positions
    if shuffle:  # nothing in the kernels assumes packing's order
        order = rng.permutation(len(token_lane))
        token_lane, positions = token_lane[order], positions[order]
    shape = (c.pages, page_tokens, kv_heads, head_dim)
    key_cache, value_cache = values(rng.standard_normal(shape)), values(rng.standard_normal(shape))
    q = values(rng.standard_normal((len(token_lane), kv_heads * group * head_dim)))
    return dict(q=q, key_cache=key_cache, value_cache=value_cache, token_lane=token_lane, positions=positions,
                page_table=c.page_table), head_dim ** -0.5


def _run(case, scale, *, window=None, softcap=None, query_tile, fill=0.0, one_lane=False):
    out = torch.full(case["q"].shape, fill, dtype=DTYPE, device=DEVICE)
    attention.paged_attention(*(tensor(case[k]) for k in ("q", "key_cache", "value_cache", "token_lane",
                                                          "positions", "page_table")),
                              out, scale=scale, sliding_window=window, softcap=softcap, query_tile=query_tile,
                              tile=attention.AttentionTile(block_n=16), one_lane=one_lane)
    return out


def _check(case, scale, *, window=None, softcap=None, query_tile):
    out = _run(case, scale, window=window, softcap=softcap, query_tile=query_tile, fill=float("nan"))
    expected = ref.paged_attention(case["q"], case["key_cache"], case["value_cache"], case["token_lane"],
                                   case["positions"], case["page_table"], scale=scale, sliding_window=window,
                                   softcap=softcap)
    close(out, expected, atol=TOLERANCE, rtol=TOLERANCE)  # NaN-filled first: every row was stored
    assert not numpy(out)[case["token_lane"] < 0].any()


TILE = attention.QueryTile(block_m=16, block_n=16)


@pytest.mark.parametrize("group", [1, 3])
def test_one_long_prefill_lane(rng, group):
    # 70 rows from position 13: starts mid-page, five tiles, the last one part padding
    case, scale = _case(rng, history=[13], queries=[70], padding=6, group=group)
    _check(case, scale, query_tile=TILE)


@pytest.mark.parametrize("window,softcap", [(None, None), (11, None), (None, 25.0), (20, 15.0)])
def test_ragged_lanes_with_tiles_across_lane_boundaries(rng, window, softcap):
    # lane boundaries at rows 20 and 57: tiles [16, 32) and [48, 64) hold two lanes each
    case, scale = _case(rng, history=[0, 21, 50], queries=[20, 37, 5], padding=5, group=2)
    _check(case, scale, window=window, softcap=softcap, query_tile=TILE)


@pytest.mark.parametrize("group", [1, 4])
def test_mixed_round_decode_rows_next_to_a_prefill_chunk(rng, group):
    # three decode rows (one row each, long histories) then a prefill chunk of 40 rows
    case, scale = _case(rng, history=[30, 7, 64, 12], queries=[1, 1, 1, 40], padding=4, group=group)
    _check(case, scale, window=9, query_tile=TILE)
    _check(case, scale, softcap=30.0, query_tile=attention.QueryTile(block_m=32, block_n=32))


def test_non_power_of_two_head_width_and_group(rng):
    case, scale = _case(rng, history=[5, 33], queries=[27, 19], padding=2, group=3, head_dim=24, kv_heads=1)
    _check(case, scale, window=16, softcap=20.0, query_tile=TILE)


def test_rows_in_any_order(rng):
    # lanes interleaved and positions unsorted: most tiles are mixed, a few may be single-lane
    case, scale = _case(rng, history=[3, 18], queries=[30, 20], padding=3, group=2, shuffle=True)
    _check(case, scale, window=7, query_tile=TILE)


def test_each_row_is_stored_by_exactly_one_kernel(rng, monkeypatch):
    # rows 0..19 lane 0, 20..56 lane 1, 57..61 lane 2, 62..66 padding; tiles of 16 rows:
    # single-lane [0, 16), [32, 48), [64, 67); mixed [16, 32), [48, 64)
    case, scale = _case(rng, history=[0, 21, 50], queries=[20, 37, 5], padding=5, group=2)
    expected = ref.paged_attention(case["q"], case["key_cache"], case["value_cache"], case["token_lane"],
                                   case["positions"], case["page_table"], scale=scale)
    tiled_rows = np.r_[0:16, 32:48, 64:67]
    per_row_rows = np.r_[16:32, 48:64]

    class Skipped:
        def __getitem__(self, grid):
            return lambda *args, **kwargs: None

    with monkeypatch.context() as m:
        m.setattr(attention, "_attention_kernel", Skipped())
        tiled = numpy(_run(case, scale, query_tile=TILE, fill=float("nan")))
    np.testing.assert_allclose(tiled[tiled_rows], expected[tiled_rows], atol=TOLERANCE, rtol=TOLERANCE)
    assert np.isnan(tiled[per_row_rows]).all()
    with monkeypatch.context() as m:
        m.setattr(attention, "_tiled_attention_kernel", Skipped())
        per_row = numpy(_run(case, scale, query_tile=TILE, fill=float("nan")))
    np.testing.assert_allclose(per_row[per_row_rows], expected[per_row_rows], atol=TOLERANCE, rtol=TOLERANCE)
    assert np.isnan(per_row[tiled_rows]).all()


class _Refused:
    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            raise AssertionError("the per-row kernel was launched for a graph of one lane")
        return launch


@pytest.mark.parametrize(("history", "queries", "softcap"), [([13], [70], None), ([0], [64], 12.0), ([40], [3], None)])
def test_a_graph_of_one_lane_runs_the_tiled_kernel_alone(rng, monkeypatch, history, queries, softcap):
    # whole key blocks seen by every row of a tile run unmasked (later tiles of the first case), the
    # causal diagonal masked; padding rows stored as zeros either way
    case, scale = _case(rng, history=history, queries=queries, padding=6, group=2)
    expected = ref.paged_attention(case["q"], case["key_cache"], case["value_cache"], case["token_lane"],
                                   case["positions"], case["page_table"], scale=scale, softcap=softcap)
    with monkeypatch.context() as m:
        m.setattr(attention, "_attention_kernel", _Refused())
        out = numpy(_run(case, scale, softcap=softcap, query_tile=TILE, fill=float("nan"), one_lane=True))
    np.testing.assert_allclose(out, expected, atol=TOLERANCE, rtol=TOLERANCE)
    assert not out[case["token_lane"] < 0].any()


def test_query_tile_rule_and_validation():
    assert attention.choose_query_tile(64, 2, cuda=True) is None
    big = attention.choose_query_tile(256, 2, cuda=True)
    assert big is not None and big.block_m * 2 == 128
    assert attention.choose_query_tile(256, 16, cuda=True).block_m == 16
    assert attention.choose_query_tile(8, 1, cuda=False) is None
    assert attention.choose_query_tile(16, 1, cuda=False) is not None
    # a graph whose requests hold fewer rows than a tile (DECODE, SPECULATIVE): the per-row kernel alone
    assert attention.choose_query_tile(256, 2, cuda=True, lane_rows=1) is None
    assert attention.choose_query_tile(1152, 2, cuda=True, lane_rows=9) is None
    assert attention.choose_query_tile(256, 2, cuda=True, lane_rows=256) == big
    assert attention.choose_query_tile(32, 1, cuda=False, lane_rows=1) is None
    assert attention.choose_query_tile(32, 1, cuda=False, lane_rows=32) is not None
    with pytest.raises(ValueError, match="block_m"):
        attention.QueryTile(block_m=8)
    with pytest.raises(ValueError, match="one context split"):
        q = torch.zeros((16, 32))
        cache = torch.zeros((1, 8, 1, 32))
        attention.paged_attention(q, cache, cache, torch.zeros(16, dtype=torch.int32),
                                  torch.zeros(16, dtype=torch.int32), torch.zeros((1, 1), dtype=torch.int32),
                                  q, scale=1.0, splits=2, scratch=attention.split_scratch(16, 1, 32, 2, "cpu"),
                                  query_tile=TILE)



class _Counted:
    def __init__(self, kernel) -> None:
        self.kernel, self.launches = kernel, 0

    def __getitem__(self, grid):
        self.launches += 1
        return self.kernel[grid]


@pytest.mark.parametrize(("lane_rows", "tiled"), [(1, False), (None, True)])
def test_a_graph_whose_requests_hold_one_row_lowers_attention_without_the_tiled_kernel(rng, monkeypatch,
                                                                                        lane_rows, tiled):
    # a DECODE-shaped round with enough lanes for the device's tiled threshold: with the graph's lane
    # rows known, the tiled kernel, whose tiles would all be mixed, is not launched
    lanes = attention.TILED_ROWS_CUDA if GPU else 20
    history = [int(h) for h in rng.integers(0, 40, lanes)]
    case, scale = _case(rng, history=history, queries=[1] * lanes, padding=0, group=2)
    float_name = {torch.float32: "f32", torch.bfloat16: "bf16"}[DTYPE]
    b = ProgramBuilder(f"decode_b{lanes}")
    names = {name: b.state(name, buffer=name, dtype="i32" if value.dtype == np.int32 else float_name,
                           shape=list(value.shape)) for name, value in case.items()}
    out = b.state("out", buffer="out", dtype=float_name, shape=list(case["q"].shape))
    b.paged_attention(names["q"], names["key_cache"], names["value_cache"], names["token_lane"], names["positions"],
                      names["page_table"], scale=scale, into=out)
    program = b.build()
    buffers = {name: tensor(value) for name, value in case.items()} | {"out": tensor(np.zeros_like(case["q"]))}
    counted = _Counted(attention._tiled_attention_kernel)
    monkeypatch.setattr(attention, "_tiled_attention_kernel", counted)
    plan = lower_program(program, validate_program(program), weights={}, buffers=buffers,
                         arena=ScratchArena(DEVICE), device=DEVICE, lanes=lanes, lane_rows=lane_rows)
    plan.run()
    assert (counted.launches > 0) == tiled
    expected = ref.paged_attention(case["q"], case["key_cache"], case["value_cache"], case["token_lane"],
                                   case["positions"], case["page_table"], scale=scale)
    close(buffers["out"], expected, atol=TOLERANCE, rtol=TOLERANCE)
