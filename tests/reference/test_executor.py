"""The reference executor runs round plans: the page-table updates a plan carries must rebuild the
page ids its lanes hold (a scheduler whose delta skips a page is caught here), and the rows come back
as read, in the frame they were submitted in."""

from __future__ import annotations

import pytest

from helios.ignition.prepare import PreparationOptions, prepare_checkpoint
from helios.proto import contract_pb2
from helios.reference.executor import FrameBusy, PageTableMismatch, ReferenceExecutor
from helios.runtime.packing import LaneInput
from helios.runtime.request import SamplingParams
from helios.runtime.rounds import PageTableUpdate, RoundPlan

OPTIONS = PreparationOptions(dtype="fp32", page_tokens=4, batch_capacities=(1, 2), prefill_capacities=(8,),
                             context_tokens=32)


@pytest.fixture(scope="module")
def core(tiny_checkpoint):
    return prepare_checkpoint(tiny_checkpoint("llama"), OPTIONS)


def lane(slot: int, page_ids: tuple[int, ...], tokens: tuple[int, ...] = (5, 6, 7)) -> LaneInput:
    return LaneInput(slot=slot, generation=1, consumed=0, tokens=tokens, prompt_tokens_in_round=len(tokens),
                     samples=True, page_ids=page_ids, seed=0, sampling=SamplingParams(temperature=0.0),
                     output_limit=4, eos_ids=())


def plan(sequence: int, lanes, updates, frame: int = 0) -> RoundPlan:
    return RoundPlan(sequence, frame, "prefill_p8", contract_pb2.OPERATION_PREFILL, tuple(lanes), tuple(f"r{i}" for i in range(len(lanes))),
                     tuple(updates), 0, 1)


def test_updates_must_rebuild_each_lanes_page_ids(core):
    executor = ReferenceExecutor.load(core, pages=8)
    first = plan(1, [lane(0, (2,))], [PageTableUpdate(0, 0, (2,))])
    executor.submit(first)
    (row,) = executor.collect(first)
    assert (row.submission_sequence, row.frame_index, row.consumed_endpoint) == (1, 0, 3)
    grown = lane(0, (2, 5), tokens=(8,) * 6)
    with pytest.raises(PageTableMismatch, match=r"slot 0: the updates leave the row \[2\], the lane holds \[2, 5\]"):
        executor.submit(plan(2, [grown], []))  # a delta that skipped the newly assigned page
    with pytest.raises(PageTableMismatch, match="from entry 2 while the row holds 1"):
        executor.submit(plan(2, [grown], [PageTableUpdate(0, 2, (5,))]))
    executor.submit(ok := plan(2, [grown], [PageTableUpdate(0, 1, (5,))]))
    assert executor.collect(ok)[0].submission_sequence == 2


def test_two_frames_hold_their_own_rows(core):
    executor = ReferenceExecutor.load(core, pages=8, frames=2)
    a, b = plan(1, [lane(0, (1,))], [PageTableUpdate(0, 0, (1,))]), plan(2, [lane(1, (3,))], [PageTableUpdate(1, 0, (3,))], 1)
    executor.submit(a)
    executor.submit(b)
    with pytest.raises(FrameBusy):
        executor.submit(plan(3, [lane(0, (1,))], [], 0))
    assert [r.frame_index for r in executor.collect(a)] == [0]
    assert [(r.frame_index, r.submission_sequence) for r in executor.collect(b)] == [(1, 2)]
