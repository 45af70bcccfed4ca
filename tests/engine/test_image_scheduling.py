"""The batching scheduler with images (host only): each image is encoded in a PREFILL round of its
request's own, one a round, into the request's feature slots, and no chunk reaches an image not
encoded by its end; lanes carry the prompt's feature-store rows; the slots come back with the
request slot (a readmission encodes again); page keys hold the images' digests and a reused prefix
never ends inside an image's span."""

from __future__ import annotations

import numpy as np

from helios.engine.config import SchedulerConfig, SchedulerRequest
from helios.engine.page_cache import PageCache
from helios.engine.scheduler import Scheduler
from helios.runtime.request import GenerationRequest, RequestImage
from tests.engine.test_scheduler import DECODE, INIT, PREFILL, catalog, run

FEATURES, SENTINEL = 4, 299


def _image(start: int, digest: bytes) -> RequestImage:
    return RequestImage(start, FEATURES, digest, (("patches", np.zeros((FEATURES + 1, 3), np.float32)),),
                        np.array([-1, 0, 1, 2, 3], np.int32))


def _request(name: str, starts: tuple[int, ...], length: int, digests: tuple[bytes, ...],
             max_tokens: int = 4) -> SchedulerRequest:
    tokens = [10 + i for i in range(length)]
    for start in starts:
        tokens[start:start + FEATURES] = [SENTINEL] * FEATURES
    images = tuple(_image(start, digest) for start, digest in zip(starts, digests, strict=True))
    return SchedulerRequest(name, GenerationRequest(tuple(tokens), max_tokens=max_tokens, images=images))


def _scheduler(pages: int = 64, max_active: int = 2) -> Scheduler:
    config = SchedulerConfig(max_active=max_active, queue_capacity=8, page_tokens=4, context_tokens=64,
                             input_tokens=300, sampled_tokens=299, eos_ids=(298,), image_feature_slots=2,
                             image_slot_rows=FEATURES)
    return Scheduler(config, catalog(), PageCache(pages, 4, "test"))


def _drain(s: Scheduler, limit: int = 200) -> list:
    plans = []
    for _ in range(limit):
        plan = s.schedule()
        if plan is None:
            break
        plans.append(plan)
        for outcome in run(s, plan):
            if outcome.sampled == s._all[outcome.request_id].request.generation.max_tokens:
                s.finish(outcome.request_id)
    return plans


def test_each_image_is_encoded_alone_in_a_prefill_round_before_any_chunk_reaches_it():
    s = _scheduler()
    s.add(_request("text", (), 10, ()))
    s.add(_request("two", (3, 14), 22, (b"a", b"b")))
    plans = _drain(s)
    encoding = [p for p in plans if any(lane.image is not None for lane in p.lanes)]
    assert [p.operation for p in encoding] == [PREFILL, PREFILL] and all(len(p.lanes) == 1 for p in encoding)
    first, second = (p.lanes[0] for p in encoding)
    # the first round encodes image 0 (slot 0: store rows 0..3) and stops before image 1's span
    assert first.consumed + len(first.tokens) <= 14 and first.image.feature_rows.tolist() == [-1, 0, 1, 2, 3]
    assert second.image.feature_rows.tolist() == [-1, 4, 5, 6, 7]  # image 1 in the request's second slot
    context = first.image_context
    assert context[3:7] == (0, 1, 2, 3) and context[14:18] == (4, 5, 6, 7) and context[:3] == (-1, -1, -1)
    two = [lane for p in plans for lane, rid in zip(p.lanes, p.request_ids, strict=True)
           if rid == "two" and p.operation != INIT]
    assert all(lane.image_context == context for lane in two)  # every round reads the store by position
    assert {p.operation for p in plans} >= {DECODE}
    assert s.idle and s.feature_slots.free == s.feature_slots.capacity == 4  # returned with the request


def test_a_readmitted_request_encodes_its_image_again_in_new_slots():
    # 5 pages of 4 tokens: the two requests' growth cannot both be held, one is preempted
    s = _scheduler(pages=5)
    s.add(_request("a", (2,), 8, (b"a",), max_tokens=10))
    s.add(_request("b", (1,), 8, (b"b",), max_tokens=10))
    plans = _drain(s)
    assert s.counters.preemptions >= 1 and s.counters.readmissions >= 1
    encoded = [rid for p in plans for lane, rid in zip(p.lanes, p.request_ids, strict=True) if lane.image is not None]
    assert len(encoded) == 2 + s.counters.readmissions  # each readmission recomputes past its reused prefix
    assert s.idle and s.feature_slots.free == s.feature_slots.capacity


def test_page_keys_hold_the_image_digest_and_a_reused_prefix_never_splits_a_span():
    s = _scheduler()
    s.add(_request("a", (6,), 13, (b"cat",)))
    _drain(s)
    # the same tokens with another image: only the pages before the span are reused ([0, 4)); the
    # page [4, 8) holds part of the span, so its key differs
    s.add(_request("b", (6,), 13, (b"dog",)))
    _drain(s)
    assert s.counters.reused_tokens == 4
    # the same image again: the reused prefix may not end inside the span [6, 10): pages up to 12 hold it
    s.add(_request("c", (6,), 13, (b"cat",)))
    plans = _drain(s)
    assert s.counters.reused_tokens == 4 + 12
    assert not any(lane.image is not None for p in plans for lane in p.lanes)  # its features are cached content
    # a 9-token prompt matches the pages [0, 8), which end inside the span: the reuse is cut back to 4
    # (a page boundary before the span) and the image is encoded
    s.add(_request("d", (6,), 9, (b"cat",)))
    plans = _drain(s)
    assert s.counters.reused_tokens == 4 + 12 + 4
    assert sum(lane.image is not None for p in plans for lane in p.lanes) == 1
    assert s.cache.gauges().in_use == 0  # the pages cut from the match were released


def test_admission_refuses_more_images_than_feature_slots_and_prompt_scores_with_images():
    s = _scheduler()
    assert "image feature slots" in s.admission_check(_request("x", (0, 5, 10), 16, (b"a", b"b", b"c")))
    scored = SchedulerRequest("y", _request("y", (0,), 8, (b"a",)).generation, prompt_logprobs=0)
    assert "prompt scores" in s.admission_check(scored)
