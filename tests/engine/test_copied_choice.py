"""History drafting's choice between a lane's copied proposals and its learned draft (host only):
a request whose copies keep being rejected while its draft's proposals are accepted stops copying;
one whose copies are accepted keeps copying; a grammar-constrained lane always copies (its learned
positions are never verified)."""

from __future__ import annotations

from helios.engine.catalog import GraphCatalog, GraphVariant
from helios.engine.config import SchedulerConfig, SchedulerRequest
from helios.engine.page_cache import PageCache
from helios.engine.scheduler import Scheduler
from helios.proto import contract_pb2
from helios.runtime.completion import Completion, SpeculativeRound
from helios.runtime.request import GenerationRequest

C = contract_pb2
SPEC = C.OPERATION_SPECULATIVE
TOKEN = 7  # every sampled id: the history repeats, so a copied run is found at every round


def _scheduler() -> Scheduler:
    cat = GraphCatalog([GraphVariant("initialization", C.OPERATION_INITIALIZATION, 1, 1, True),
                        GraphVariant("prefill", C.OPERATION_PREFILL, 1, 16, True),
                        GraphVariant("decode_b1", C.OPERATION_DECODE, 1, 1, True),
                        GraphVariant("speculative_b1_w4", SPEC, 1, 4, True, width=4, drafts=3, lane_limit=4,
                                     check=SpeculativeRound(4, exact=True))])
    config = SchedulerConfig(max_active=1, queue_capacity=2, page_tokens=4, context_tokens=512, input_tokens=300,
                             sampled_tokens=300, speculative_width=4, history_drafting=True)
    return Scheduler(config, cat, PageCache(160, 4, "test"))


def _rows(plan, *, copies_accepted: bool) -> list[Completion]:
    """A lane accepts its copied proposals if `copies_accepted` (else rejects the first), and every
    learned-draft proposal the other way round."""
    out = []
    for lane in plan.lanes:
        if plan.operation == SPEC:
            offer = lane.speculative_limit
            copied = min(len(lane.copied), offer - 1)
            if copied:
                accepted = copied if copies_accepted else 0  # past an accepted copied run the draft fails
            else:
                accepted = 0 if copies_accepted else offer - 1
            endpoint = lane.consumed + accepted + 1
            out.append(Completion(frame_index=plan.frame, submission_sequence=plan.sequence,
                                  generation=lane.generation, sampled_id=TOKEN, emitted=accepted + 1,
                                  consumed_endpoint=endpoint, draft_cursor=endpoint, model_reserved=-1, status=0,
                                  offer=offer, accepted_drafts=accepted, sampled_ids=(TOKEN,) * (accepted + 1)))
        else:
            out.append(Completion(frame_index=plan.frame, submission_sequence=plan.sequence,
                                  generation=lane.generation, sampled_id=TOKEN, emitted=int(lane.samples),
                                  consumed_endpoint=lane.consumed + len(lane.tokens), draft_cursor=-1, model_reserved=-1,
                                  status=0))
    return out


def _run(copies_accepted: bool) -> list[bool]:
    """Whether each speculative round of one 60-token request copied."""
    s = _scheduler()
    s.add(SchedulerRequest("a", GenerationRequest((TOKEN, TOKEN, 3, TOKEN, TOKEN), max_tokens=60)))
    copied = []
    while (plan := s.schedule()) is not None:
        if plan.operation == SPEC:
            copied.append(bool(plan.lanes[0].copied))
        s.complete(plan, _rows(plan, copies_accepted=copies_accepted))
        if s._all["a"].sampled >= 60:
            s.finish("a")
    return copied


def test_a_request_whose_copies_lose_to_its_draft_stops_copying():
    copied = _run(copies_accepted=False)
    assert copied[0]  # both sources start from the uniform prior: copies are tried first
    assert len(copied) > 12 and not any(copied[3:])  # then its draft, accepted every time, keeps the positions


def test_a_request_whose_copies_win_keeps_copying():
    copied = _run(copies_accepted=True)
    assert len(copied) > 12 and all(copied[:-1])  # the last round has room for its pending token alone
