"""Shared value-binding packing (helios.runtime.packing): every indexing, the token layout of a
round, seeds, padding and offsets, and the load-time checks of each binding."""

from __future__ import annotations

import numpy as np
import pytest

from helios.program import SAMPLING_PARAMETERS
from helios.proto import contract_pb2, manifest_pb2
from helios.runtime.packing import (
    SAMPLING_PARAMETER_ORDER,
    BindingExtentMismatch,
    GraphPacking,
    LaneInput,
    LaneOverflow,
    PackingError,
    UnsupportedValueSource,
)
from helios.runtime.request import SamplingParams

C, M = contract_pb2, manifest_pb2


def _manifest(*buffers):
    return M.ExecutionManifest(buffers=[M.BufferDescriptor(name=n, role=M.BUFFER_ROLE_TRANSPORT if r is None else r,
                                                           dtype=d, shape=s) for n, d, s, r in buffers])


def _graph(*bindings, batch=2, packed=6):
    return C.GraphContract(name="g", value_bindings=list(bindings),
                           capacity=C.GraphCapacity(batch_capacity=batch, packed_token_capacity=packed))


def _binding(destination, source, indexing, **kw):
    return C.ValueBinding(destination=destination, source=source, indexing=indexing, **kw)


def _lane(slot, consumed, tokens, prompt_in_round, **kw):
    values = dict(slot=slot, generation=10 + slot, consumed=consumed, tokens=tokens,
                  prompt_tokens_in_round=prompt_in_round, samples=True, page_ids=(7, 8), seed=5,
                  sampling=SamplingParams(temperature=0.5, top_k=3), output_limit=9, eos_ids=(1,),
                  prompt_token_ids=(2, 2, 3))
    values.update(kw)
    return LaneInput(**values)


def _buffers(manifest):
    from helios.runtime.packing import NUMPY_DTYPES

    return {b.name: np.full(list(b.shape), 99, dtype=NUMPY_DTYPES[b.dtype]) for b in manifest.buffers}


def test_sampling_parameter_order_is_the_operator_sets():
    assert SAMPLING_PARAMETER_ORDER == SAMPLING_PARAMETERS


def test_packed_tokens_follow_each_lanes_count():
    manifest = _manifest(("tokens", M.DTYPE_I32, [6], None), ("positions", M.DTYPE_I32, [6], None),
                         ("lane", M.DTYPE_I32, [6], None), ("next", M.DTYPE_I32, [6], None))
    graph = _graph(
        _binding("tokens", C.VALUE_SOURCE_PROMPT_TOKENS, C.INDEXING_PACKED_TOKEN, padding=-1),
        _binding("tokens", C.VALUE_SOURCE_PENDING_TOKEN, C.INDEXING_PACKED_TOKEN, padding=-1),
        _binding("positions", C.VALUE_SOURCE_PROMPT_POSITIONS, C.INDEXING_PACKED_TOKEN),
        _binding("next", C.VALUE_SOURCE_PROMPT_POSITIONS, C.INDEXING_PACKED_TOKEN, offset=1),
        _binding("lane", C.VALUE_SOURCE_SLOT, C.INDEXING_PACKED_TOKEN, padding=-1),
    )
    packing = GraphPacking.resolve(graph, manifest, physical_rows=4)
    buffers = _buffers(manifest)
    # a decode lane in slot 3 (pending token 42 at position 9), then a prefill chunk in slot 1
    packing.pack([_lane(3, 9, (42,), 0), _lane(1, 4, (20, 21, 22), 3)], buffers)
    assert buffers["tokens"].tolist() == [42, 20, 21, 22, -1, -1]
    assert buffers["positions"].tolist() == [9, 4, 5, 6, 0, 0]
    assert buffers["next"].tolist() == [10, 5, 6, 7, 0, 0]
    assert buffers["lane"].tolist() == [3, 1, 1, 1, -1, -1]


def test_row_indexings():
    manifest = _manifest(("sub", M.DTYPE_I32, [4], None), ("active", M.DTYPE_I32, [4], None),
                         ("phys", M.DTYPE_I32, [4], None), ("count", M.DTYPE_I32, [1], None),
                         ("const", M.DTYPE_I32, [4, 2], None), ("table", M.DTYPE_I32, [4, 3], None))
    graph = _graph(
        _binding("sub", C.VALUE_SOURCE_GENERATION, C.INDEXING_SUBMISSION_ROW, padding=-7),
        _binding("active", C.VALUE_SOURCE_QUERY_LENGTH, C.INDEXING_ACTIVE_ROW),
        _binding("phys", C.VALUE_SOURCE_OUTPUT_LIMIT, C.INDEXING_PHYSICAL_REQUEST_ROW, offset=100),
        _binding("count", C.VALUE_SOURCE_LIVE_ROW_COUNT, C.INDEXING_SCALAR),
        _binding("const", C.VALUE_SOURCE_CONSTANT, C.INDEXING_SUBMISSION_ROW, constants=[4, 5]),
        _binding("table", C.VALUE_SOURCE_PAGE_TABLE, C.INDEXING_PHYSICAL_REQUEST_ROW, padding=0),
        batch=3,
    )
    packing = GraphPacking.resolve(graph, manifest, physical_rows=4)
    buffers = _buffers(manifest)
    packing.pack([_lane(2, 0, (1, 2), 2)], buffers)
    assert buffers["sub"].tolist() == [12, -7, -7, 99]  # capacity rows padded, rows past B untouched
    assert buffers["active"].tolist() == [2, 99, 99, 99]  # inactive tail keeps its bytes
    assert buffers["phys"].tolist() == [99, 99, 109, 99]  # the lane's slot row
    assert buffers["count"].tolist() == [1]
    assert buffers["const"][0].tolist() == [4, 5]
    assert buffers["table"][2].tolist() == [7, 8, 0]


def test_seed_bits_and_sampling_parameters():
    manifest = _manifest(("seed64", M.DTYPE_I64, [2], None), ("seed32", M.DTYPE_I32, [2, 2], None),
                         ("params", M.DTYPE_F32, [2, 7], None), ("hist", M.DTYPE_I32, [2, 5], None),
                         ("mask", M.DTYPE_I32, [2, 1], None))
    graph = _graph(
        _binding("seed64", C.VALUE_SOURCE_SEED_BITS, C.INDEXING_SUBMISSION_ROW),
        _binding("seed32", C.VALUE_SOURCE_SEED_BITS, C.INDEXING_SUBMISSION_ROW),
        _binding("params", C.VALUE_SOURCE_SAMPLING_PARAMETERS, C.INDEXING_SUBMISSION_ROW, padding=1),
        _binding("hist", C.VALUE_SOURCE_PROMPT_HISTOGRAM, C.INDEXING_SUBMISSION_ROW),
        _binding("mask", C.VALUE_SOURCE_GRAMMAR_MASK, C.INDEXING_SUBMISSION_ROW),
    )
    packing = GraphPacking.resolve(graph, manifest, physical_rows=2)
    buffers = _buffers(manifest)
    packing.pack([_lane(0, 0, (1,), 1, seed=-1), _lane(1, 0, (1,), 1, seed=2**32 + 7, grammar_mask=(5,))], buffers)
    assert buffers["seed64"].tolist() == [-1, 2**32 + 7]  # uint64 bits in two's complement
    assert buffers["seed32"].view(np.uint32).tolist() == [[0xFFFFFFFF, 0xFFFFFFFF], [7, 1]]
    assert buffers["params"][0].tolist() == [0.5, 1.0, 3.0, 0.0, 1.0, 0.0, 0.0]
    assert buffers["hist"][0].tolist() == [0, 0, 2, 1, 0]
    assert buffers["mask"][:, 0].tolist() == [-1, 5]  # no grammar: every token allowed


@pytest.mark.parametrize("ids", [(2, 5), (-1, 2)])
def test_a_prompt_id_outside_the_histogram_is_refused(ids):
    manifest = _manifest(("hist", M.DTYPE_I32, [2, 5], None))
    graph = _graph(_binding("hist", C.VALUE_SOURCE_PROMPT_HISTOGRAM, C.INDEXING_SUBMISSION_ROW))
    packing = GraphPacking.resolve(graph, manifest, physical_rows=2)
    with pytest.raises(LaneOverflow, match=f"prompt id {ids[0] if ids[0] < 0 else ids[1]} outside histogram width 5"):
        packing.pack([_lane(0, 0, (1,), 1, prompt_token_ids=ids)], _buffers(manifest))


def test_initialize_fills_padding():
    manifest = _manifest(("params", M.DTYPE_F32, [2, 7], None))
    graph = _graph(_binding("params", C.VALUE_SOURCE_SAMPLING_PARAMETERS, C.INDEXING_PHYSICAL_REQUEST_ROW, padding=1))
    buffers = _buffers(manifest)
    GraphPacking.resolve(graph, manifest, physical_rows=2).initialize(buffers)
    assert (buffers["params"] == 1).all()


@pytest.mark.parametrize(("buffer", "binding", "error", "match"), [
    (("x", M.DTYPE_I32, [4], M.BUFFER_ROLE_COMPLETION), (C.VALUE_SOURCE_SLOT, C.INDEXING_SUBMISSION_ROW),
     PackingError, "transport"),
    (("x", M.DTYPE_F32, [4], None), (C.VALUE_SOURCE_SLOT, C.INDEXING_SUBMISSION_ROW), BindingExtentMismatch,
     "integer"),
    (("x", M.DTYPE_I32, [1], None), (C.VALUE_SOURCE_SLOT, C.INDEXING_SUBMISSION_ROW), BindingExtentMismatch,
     "needs 2 rows"),
    (("x", M.DTYPE_I32, [8], None), (C.VALUE_SOURCE_IMAGE_FEATURE_SLOT, C.INDEXING_SCALAR), UnsupportedValueSource,
     "IMAGE_FEATURE_SLOT"),
    (("x", M.DTYPE_F32, [8], None), (C.VALUE_SOURCE_IMAGE_TENSOR, C.INDEXING_PACKED_TOKEN), BindingExtentMismatch,
     "SCALAR indexing"),
    (("x", M.DTYPE_I32, [8], None), (C.VALUE_SOURCE_PROMPT_TOKENS, C.INDEXING_SUBMISSION_ROW), BindingExtentMismatch,
     "packed token"),
    (("x", M.DTYPE_F32, [2, 6], None), (C.VALUE_SOURCE_SAMPLING_PARAMETERS, C.INDEXING_SUBMISSION_ROW),
     BindingExtentMismatch, "rows of 7"),
])
def test_resolve_rejects_bindings_it_cannot_pack(buffer, binding, error, match):
    graph = _graph(_binding("x", *binding))
    with pytest.raises(error, match=match):
        GraphPacking.resolve(graph, _manifest(buffer), physical_rows=2)


def test_a_round_beyond_the_capacity_is_refused():
    manifest = _manifest(("tokens", M.DTYPE_I32, [6], None))
    graph = _graph(_binding("tokens", C.VALUE_SOURCE_PROMPT_TOKENS, C.INDEXING_PACKED_TOKEN), batch=2, packed=3)
    packing = GraphPacking.resolve(graph, manifest, physical_rows=4)
    with pytest.raises(LaneOverflow, match="packed token capacity"):
        packing.pack([_lane(0, 0, (1, 2, 3, 4), 4)], _buffers(manifest))
    with pytest.raises(LaneOverflow, match="batch capacity"):
        packing.pack([_lane(i, 0, (1,), 1) for i in range(3)], _buffers(manifest))
