"""Vectorized packing (host only): one round's lanes become NumPy columns and each binding fills its
whole destination from them; the results are the layouts the packing module's docstring gives."""

from __future__ import annotations

import numpy as np
import pytest

from helios.proto import contract_pb2 as V
from helios.runtime.packing import LaneColumns, LaneInput, LaneOverflow, ResolvedBinding
from helios.runtime.request import SamplingParams

SAMPLING = SamplingParams()


def _lane(slot: int, consumed: int, tokens: tuple[int, ...], pending: bool, *, mask=None) -> LaneInput:
    return LaneInput(slot=slot, generation=slot + 10, consumed=consumed, tokens=tokens,
                     prompt_tokens_in_round=len(tokens) - int(pending), samples=bool(tokens), page_ids=(slot,),
                     seed=slot, sampling=SAMPLING, output_limit=7, eos_ids=(1,), grammar_mask=mask)


# A prefill chunk of 3 prompt tokens, a decode lane (its pending token), an initialization lane (no tokens).
LANES = [_lane(4, 0, (11, 12, 13), False), _lane(1, 9, (99,), True), _lane(2, 0, (), False)]


def _binding(source: int, indexing: int, rows: int, row_shape=(), *, offset=0, padding=-1, constants=()):
    return ResolvedBinding("d", source, indexing, offset, padding, constants, np.dtype(np.int32), rows, row_shape)


def _write(binding: ResolvedBinding, lanes=LANES, fill=-7) -> np.ndarray:
    buffer = np.full((binding.rows, *binding.row_shape), fill, dtype=np.int32)
    binding.write(buffer, lanes, LaneColumns(lanes))
    return buffer


def test_lane_columns():
    c = LaneColumns(LANES)
    assert c.slots.tolist() == [4, 1, 2] and c.lengths.tolist() == [3, 1, 0] and c.total == 4
    assert c.token_lane.tolist() == [0, 0, 0, 1] and c.positions.tolist() == [0, 1, 2, 9]
    assert c.is_prompt.tolist() == [True, True, True, False] and c.has_pending.tolist() == [False, True, False]
    assert c.pending[1] == 99


def test_lane_columns_of_every_row_scalar_source():
    c = LaneColumns(LANES)
    expected = {V.VALUE_SOURCE_SLOT: [4, 1, 2], V.VALUE_SOURCE_GENERATION: [14, 11, 12],
                V.VALUE_SOURCE_QUERY_LENGTH: [3, 1, 0], V.VALUE_SOURCE_SAMPLING_DECISION: [1, 1, 0],
                V.VALUE_SOURCE_CONSUMED_TOKEN_ENDPOINT: [0, 9, 0], V.VALUE_SOURCE_OUTPUT_LIMIT: [7, 7, 7]}
    for source, values in expected.items():
        assert c.scalar(source).tolist() == values
    assert c.page_counts.tolist() == [1, 1, 1] and c.prompt_in_round.tolist() == [3, 0, 0]
    assert c.tokens.tolist() == [11, 12, 13, 99]


@pytest.mark.parametrize(("fields", "message"), [
    ({"prompt_tokens_in_round": 3}, "prompt_tokens_in_round out of range"),
    ({"prompt_tokens_in_round": -1}, "prompt_tokens_in_round out of range"),
    ({"tokens": (1, 2, 3), "prompt_tokens_in_round": 1}, "at most one pending token"),
    ({"slot": -1}, "must be >= 0"),
    ({"generation": -1}, "must be >= 0"),
    ({"consumed": -1}, "must be >= 0"),
    ({"tokens": (), "prompt_tokens_in_round": 0}, "consumes at least one token"),
])
def test_a_lane_breaking_a_rule_names_it(fields, message):
    base = {"slot": 0, "generation": 1, "consumed": 0, "tokens": (5, 6), "prompt_tokens_in_round": 1,
            "samples": True, "page_ids": (0,), "seed": 0, "sampling": SAMPLING, "output_limit": 4,
            "eos_ids": ()}
    LaneInput(**base)  # the valid lane
    with pytest.raises(LaneOverflow, match=message):
        LaneInput(**{**base, **fields})


def test_packed_token_sources_share_a_destination():
    prompt = _write(_binding(V.VALUE_SOURCE_PROMPT_TOKENS, V.INDEXING_PACKED_TOKEN, 6, offset=1))
    # the pending row gets padding: the pending binding overwrites it, or (a device-owned pending
    # token) the program reads its state there, never a stale token of an earlier round
    assert prompt.tolist() == [12, 13, 14, -1, -1, -1]
    shared = prompt.copy()
    _binding(V.VALUE_SOURCE_PENDING_TOKEN, V.INDEXING_PACKED_TOKEN, 6, offset=1).write(shared, LANES)
    assert shared.tolist() == [12, 13, 14, 100, -1, -1]
    positions = _write(_binding(V.VALUE_SOURCE_PROMPT_POSITIONS, V.INDEXING_PACKED_TOKEN, 6, offset=1, padding=0))
    assert positions.tolist() == [1, 2, 3, 10, 0, 0]
    lanes = _write(_binding(V.VALUE_SOURCE_SLOT, V.INDEXING_PACKED_TOKEN, 6))
    assert lanes.tolist() == [4, 4, 4, 1, -1, -1]
    with pytest.raises(LaneOverflow, match="4 packed tokens exceed the capacity 3"):
        _write(_binding(V.VALUE_SOURCE_PROMPT_POSITIONS, V.INDEXING_PACKED_TOKEN, 3))


def test_row_sources_by_indexing():
    submission = _write(_binding(V.VALUE_SOURCE_QUERY_LENGTH, V.INDEXING_SUBMISSION_ROW, 5, (2,)))
    assert submission.tolist() == [[3, 3], [1, 1], [0, 0], [-1, -1], [-1, -1]]
    active = _write(_binding(V.VALUE_SOURCE_CONSUMED_TOKEN_ENDPOINT, V.INDEXING_ACTIVE_ROW, 5))
    assert active.tolist() == [0, 9, 0, -7, -7]  # the tail keeps its bytes
    physical = _write(_binding(V.VALUE_SOURCE_GENERATION, V.INDEXING_PHYSICAL_REQUEST_ROW, 6, offset=100))
    assert physical.tolist() == [-7, 111, 112, -7, 114, -7]
    pending = _write(_binding(V.VALUE_SOURCE_PENDING_TOKEN, V.INDEXING_PHYSICAL_REQUEST_ROW, 6, padding=-2))
    assert pending.tolist() == [-7, 99, -2, -7, -2, -7]
    with pytest.raises(LaneOverflow, match="row 4 outside 3 rows"):
        _write(_binding(V.VALUE_SOURCE_GENERATION, V.INDEXING_PHYSICAL_REQUEST_ROW, 3))


def test_grammar_masks_and_vector_rows():
    lanes = [LANES[0], _lane(1, 9, (99,), True, mask=(5, 6))]
    masks = _write(_binding(V.VALUE_SOURCE_GRAMMAR_MASK, V.INDEXING_PHYSICAL_REQUEST_ROW, 5, (2,)), lanes)
    assert masks.tolist() == [[-7, -7], [5, 6], [-7, -7], [-7, -7], [-1, -1]]
    pages = _write(_binding(V.VALUE_SOURCE_PAGE_TABLE, V.INDEXING_PHYSICAL_REQUEST_ROW, 5, (3,), padding=0), lanes)
    assert pages.tolist() == [[-7] * 3, [1, 0, 0], [-7] * 3, [-7] * 3, [4, 0, 0]]
    with pytest.raises(LaneOverflow, match="grammar mask of 2 words"):
        _write(_binding(V.VALUE_SOURCE_GRAMMAR_MASK, V.INDEXING_PHYSICAL_REQUEST_ROW, 5, (3,)), lanes)


def test_candidate_grammar_masks_rows():
    """CANDIDATE_GRAMMAR_MASKS [W, words] by submission row: a constrained lane's masks, then rows that
    allow nothing (positions the host has no mask for); all ones without masks; padding rows past the
    lanes; masks of the wrong width refused."""
    from dataclasses import replace

    masks = ((5, -1), (7, 3))
    lanes = [replace(LANES[1], candidate_masks=masks, copied=(42,)), LANES[1]]
    out = _write(_binding(V.VALUE_SOURCE_CANDIDATE_GRAMMAR_MASKS, V.INDEXING_SUBMISSION_ROW, 3, (4, 2), padding=-1),
                 lanes)
    assert out[0].tolist() == [[5, -1], [7, 3], [0, 0], [0, 0]]
    assert (out[1] == -1).all() and (out[2] == -1).all()
    with pytest.raises(LaneOverflow, match="position masks"):
        _write(_binding(V.VALUE_SOURCE_CANDIDATE_GRAMMAR_MASKS, V.INDEXING_SUBMISSION_ROW, 3, (4, 3)), lanes)
    with pytest.raises(LaneOverflow, match="position masks"):
        _write(_binding(V.VALUE_SOURCE_CANDIDATE_GRAMMAR_MASKS, V.INDEXING_SUBMISSION_ROW, 3, (1, 2)), lanes)


def test_candidate_ids_rows():
    """CANDIDATE_IDS [D] by submission row: each lane's copied proposals (plus the offset), padded; a
    lane without any and the rows past the lanes hold padding; too many proposals refused."""
    from dataclasses import replace

    lanes = [LANES[1], replace(LANES[1], slot=3, copied=(42, 43)), replace(LANES[1], slot=5)]
    out = _write(_binding(V.VALUE_SOURCE_CANDIDATE_IDS, V.INDEXING_SUBMISSION_ROW, 4, (3,), offset=1, padding=-5),
                 lanes)
    assert out.tolist() == [[-5, -5, -5], [43, 44, -5], [-5, -5, -5], [-5, -5, -5]]
    with pytest.raises(LaneOverflow, match="copied proposals"):
        _write(_binding(V.VALUE_SOURCE_CANDIDATE_IDS, V.INDEXING_SUBMISSION_ROW, 4, (1,)), lanes)


def test_image_context_indices_follow_each_prompt_rows_position():
    from dataclasses import replace

    # a lane whose prompt holds an image at positions 2..4 (store rows 8..10), consumed 1 before this
    # chunk of 4 prompt rows; a decode lane (its pending row never reads a feature); a text lane
    image = replace(_lane(3, 1, (21, 22, 23, 24), False), image_context=(-1, -1, 8, 9, 10, -1, -1))
    lanes = [image, _lane(1, 9, (99,), True), _lane(5, 0, (31, 32), False)]
    context = _write(_binding(V.VALUE_SOURCE_IMAGE_CONTEXT_INDICES, V.INDEXING_PACKED_TOKEN, 9), lanes)
    assert context.tolist() == [-1, 8, 9, 10, -1, -1, -1, -1, -1]
    shifted = _write(_binding(V.VALUE_SOURCE_IMAGE_CONTEXT_INDICES, V.INDEXING_PACKED_TOKEN, 9, offset=100,
                              padding=-5), lanes)
    assert shifted.tolist() == [-5, 108, 109, 110, -5, -5, -5, -5, -5]  # the offset never shifts text rows


def test_the_submissions_image_fills_its_tensor_and_feature_row_buffers():
    from dataclasses import replace

    from helios.proto import manifest_pb2 as M
    from helios.runtime.lanes import ImageSubmission
    from helios.runtime.packing import BindingExtentMismatch, GraphPacking

    patches = np.arange(12, dtype=np.float32).reshape(3, 4)
    image = ImageSubmission(tensors=(("patches", patches),), feature_rows=np.array([-1, 4, 5], np.int32))
    tensor = ResolvedBinding("p", V.VALUE_SOURCE_IMAGE_TENSOR, V.INDEXING_SCALAR, 0, 0, (), np.dtype(np.float32), 1,
                             (12,), image_output="patches")
    rows = _binding(V.VALUE_SOURCE_IMAGE_FEATURE_INDICES, V.INDEXING_SCALAR, 1, (3,))
    lanes = [replace(LANES[0], image=image), LANES[1]]
    buffer = np.full((3, 4), 7, np.float32)
    tensor.write(buffer, lanes)
    np.testing.assert_array_equal(buffer, patches)
    assert _write(rows, lanes).tolist() == [[-1, 4, 5]]
    tensor.write(buffer, LANES)  # no image this round: padding everywhere
    assert not buffer.any() and _write(rows).tolist() == [[-1, -1, -1]]
    # a bf16 buffer (uint16 bit patterns) takes the values rounded to nearest even
    bf16 = ResolvedBinding("p", V.VALUE_SOURCE_IMAGE_TENSOR, V.INDEXING_SCALAR, 0, 0, (), np.dtype(np.uint16), 1,
                           (12,), image_output="patches")
    bits = np.zeros((3, 4), np.uint16)
    bf16.write(bits, lanes)
    np.testing.assert_array_equal((bits.astype(np.uint32) << 16).view(np.float32), patches)  # small ints are exact
    with pytest.raises(LaneOverflow, match="2 lanes carry an image"):
        _write(rows, [replace(LANES[0], image=image), replace(LANES[1], image=image)])
    graph = V.GraphContract(name="g", capacity=V.GraphCapacity(batch_capacity=1, packed_token_capacity=4))
    manifest = M.ExecutionManifest(buffers=[M.BufferDescriptor(name="p", role=M.BUFFER_ROLE_TRANSPORT,
                                                               dtype=M.DTYPE_F32, shape=[3, 4])])
    for binding, message in ((V.ValueBinding(destination="p", source=V.VALUE_SOURCE_IMAGE_TENSOR,
                                             indexing=V.INDEXING_SCALAR), "names no image_output"),
                             (V.ValueBinding(destination="p", source=V.VALUE_SOURCE_IMAGE_TENSOR,
                                             indexing=V.INDEXING_PACKED_TOKEN, image_output="patches"),
                              "fills the whole buffer")):
        graph.ClearField("value_bindings")
        graph.value_bindings.append(binding)
        with pytest.raises(BindingExtentMismatch, match=message):
            GraphPacking.resolve(graph, manifest, physical_rows=1)
