"""A request inside the scheduler (host side, no torch): `SequenceState`, and the lane it
contributes to a round (`build_lane`, and `decode_lane` for the one-token steps that make up most
lanes of most rounds).

A request *knows* tokens (its prompt, then each validated sample) and *consumes* them in rounds; a
lane is the next chunk of its unconsumed known tokens, and it samples when the chunk reaches the last
known token (scheduler.py's docstring has the whole rule). The last known token is the pending one
when it was sampled; earlier tokens (the prompt, or history re-fed after readmission) are host-fed as
prompt tokens. A device-owned pending token is state of the admission that sampled it: one sampled
before a readmission is re-fed by the host like the rest of the history. A token sampled in a round
still in flight is not known on the host yet: the lane carries `DEVICE_PENDING` in its place.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from helios.engine.config import SchedulerRequest
from helios.engine.page_cache import SequencePages
from helios.engine.program_choice import AcceptanceEstimate, ProposalSources
from helios.engine.snapshots import Snapshot
from helios.runtime.history_drafting import HistoryIndex
from helios.runtime.images import AdmittedImages, page_content
from helios.runtime.packing import LaneInput

DEVICE_PENDING = -1  # stands for a pending token the host does not know yet (device-owned, in flight)


@dataclass(eq=False, slots=True)
class SequenceState:
    """One request as the scheduler holds it: what it knows, what it consumed, where it lives."""

    request: SchedulerRequest
    order: int  # arrival ticket: admission and preemption priority (lower is older)
    known: list[int]
    consumed: int = 0  # committed positions
    submitted: int = 0  # positions in outstanding rounds
    unknown: int = 0  # outstanding rounds that sample (their tokens are not known yet)
    sampled: int = 0
    slot: int | None = None
    generation: int = 0
    pages: SequencePages | None = None
    initialized: bool = False
    in_flight: int = 0
    last_operation: int = 0
    cancelled: bool = False
    ended: bool = False
    admitted: bool = False  # admitted at least once
    admitted_known: int = 0  # tokens known at the latest (re)admission: the device has sampled none of them
    reused_prompt_tokens: int = 0
    scored: int = 0  # prompt scores delivered: those of prompt tokens [1, scored] (a request asking for them)
    eos_ids: tuple[int, ...] | None = None  # the lane's EOS ids (its own, else the core's), built once
    # What every lane of the request carries unchanged (seed, sampling, output limit, EOS ids, prompt),
    # gathered once: the same objects each round, so the executor compares them at no cost.
    lane_fields: tuple | None = None
    # The page-table row `uploads` last recorded for the request's slot (generation, entries): while
    # both stand, a round uploads nothing and `uploads.delta` is not asked.
    table_generation: int = -1
    table_entries: int = -1
    history: HistoryIndex | None = None  # history drafting's n-gram index of `known`, built on first use
    acceptance: AcceptanceEstimate | None = None  # its completed speculative lanes (program choice), on first use
    # history drafting: its copied proposals' acceptance and its learned draft's (the positions past
    # an accepted copied run, or lanes without one), which decide whether its next round copies
    sources: ProposalSources = field(default_factory=ProposalSources)
    plain_until: int = 0  # adaptive choice chose plain decoding: it decodes as any lane until this many sampled
    plain_stint: int = 0  # tokens of its last plain stint (0: it speculated since, or never chose plain)
    # Snapshots (snapshots.py). While preempted: its checkpoints and continuation row. While running: the
    # row a RESTORATION round is snapshotting its partial page into (its preemption awaits that round's
    # fence), or the row a RESTORATION round must restore into its private page before it continues.
    snapshot: Snapshot | None = None
    snapshot_row: int | None = None
    restore_row: int | None = None
    preempted_at: int = 0  # positions it had consumed when it was last preempted
    preempt_asked: bool = False  # `Scheduler.preempt` asked for its preemption at the next scheduling point
    # Published continuations (snapshots.py): it ended by EOS or its output limit, so its partial page
    # may be published (`publish`); `publishing` while its snapshot round is due or in flight;
    # `shared_restore` when `restore_row` is a published continuation it matched (pinned, not its own).
    publish: bool = False
    publishing: bool = False
    shared_restore: bool = False
    # A request with images, while admitted: their feature-store rows and how many are encoded
    # (helios.runtime.images); None without images or while not admitted.
    images: AdmittedImages | None = None

    @property
    def frontier(self) -> int:
        return self.consumed + self.submitted

    @property
    def remaining(self) -> int:
        return len(self.known) + self.unknown - self.frontier


def content_of(s: SequenceState) -> Callable[[int, int], bytes] | None:
    """What the request's pages depend on besides their tokens (its images' digests), for its page
    keys; None for a request without images."""
    images = s.request.generation.images
    if not images:
        return None
    return lambda start, end: page_content(images, start, end)


def lane_fields(s: SequenceState, default_eos_ids: tuple[int, ...]) -> tuple:
    """What every lane of the request carries unchanged, gathered once a request: the same objects
    every round, so the executor compares them at no cost."""
    fields = s.lane_fields
    if fields is None:
        request = s.request.generation
        s.eos_ids = tuple(request.eos_token_ids or default_eos_ids)
        fields = s.lane_fields = (request.sampling.seed, request.sampling, request.max_tokens, s.eos_ids,
                                  request.prompt_token_ids)
    return fields


def decode_lane(s: SequenceState, device_pending: bool, speculative_limit: int = 0,
                copied: tuple[int, ...] = (), history: int = 0) -> LaneInput:
    """`build_lane` for one token of a request without a grammar whose lane fields are gathered (a
    SPECULATIVE lane: with its `speculative_limit` and `copied` proposals; `history` as `build_lane`'s)."""
    fields = s.lane_fields
    known = s.known
    consumed = s.consumed + s.submitted
    total = len(known) + s.unknown
    samples = consumed + 1 == total
    pending = samples and total > len(fields[4]) and not (consumed < s.admitted_known and device_pending)
    return LaneInput(s.slot, s.generation, consumed,  # type: ignore[arg-type]
                     (known[consumed] if consumed < len(known) else DEVICE_PENDING,),
                     0 if pending else 1, samples, s.pages.page_ids, *fields, None,  # type: ignore[union-attr, misc]
                     speculative_limit, copied,
                     history=tuple(known[max(0, consumed - history):consumed]) if history else ())


def build_lane(s: SequenceState, chunk: int, initialization: bool, device_pending: bool,
               default_eos_ids: tuple[int, ...], *, lane_mask: bool = True, speculative_limit: int = 0,
               copied: tuple[int, ...] = (), candidate_masks: tuple[tuple[int, ...], ...] | None = None,
               history: int = 0) -> LaneInput:
    """The lane of `s` that consumes its next `chunk` tokens (none in an INITIALIZATION round);
    `lane_mask` False: no GRAMMAR_MASK row even for a constrained request (a speculative lane whose
    rows carry per-position masks instead); a SPECULATIVE lane carries its `speculative_limit`, its
    `copied` proposals and their `candidate_masks`; `history` > 0: the lane carries that many known
    tokens before its first (a core with Engram tables)."""
    assert s.pages is not None and s.slot is not None
    fields = lane_fields(s, default_eos_ids)
    if initialization:
        tokens: tuple[int, ...] = ()
        consumed, prompt_in_round, samples = 0, 0, False
    else:
        known = s.known
        consumed = s.consumed + s.submitted
        end = consumed + chunk
        part = known[consumed:end]
        tokens = tuple(part) + (DEVICE_PENDING,) * (chunk - len(part))
        total = len(known) + s.unknown
        samples = end == total
        ends_in_sample = samples and total > len(fields[4]) and not (end <= s.admitted_known and device_pending)
        prompt_in_round = chunk - 1 if ends_in_sample else chunk
    before = tuple(s.known[max(0, consumed - history):consumed]) if history else ()  # () at initialization
    return LaneInput(s.slot, s.generation, consumed, tokens, prompt_in_round, samples, s.pages.page_ids, *fields,
                     grammar_mask(s.request, samples) if lane_mask else None, speculative_limit, copied, candidate_masks,
                     history=before)


def restoration_lane(s: SequenceState, default_eos_ids: tuple[int, ...]) -> LaneInput:
    """The RESTORATION lane of `s` at its endpoint `consumed`: it snapshots the partial page there
    into `snapshot_row`, or restores `restore_row` into it; it consumes and samples nothing."""
    assert s.pages is not None and s.slot is not None
    fields = lane_fields(s, default_eos_ids)
    return LaneInput(s.slot, s.generation, s.consumed, (), 0, False, s.pages.page_ids, *fields, None,
                     restore_source=-1 if s.restore_row is None else s.restore_row,
                     snapshot_destination=-1 if s.snapshot_row is None else s.snapshot_row)


def grammar_mask(request: SchedulerRequest, samples: bool) -> tuple[int, ...] | None:
    """A sampling lane of a constrained request carries its grammar's mask; the request's previous
    token was delivered (and advanced the grammar) before this round: one outstanding round."""
    if request.grammar is None or not samples:
        return None
    return tuple(request.grammar.mask())


__all__ = ["DEVICE_PENDING", "SequenceState", "build_lane", "content_of", "decode_lane", "grammar_mask", "lane_fields",
           "restoration_lane"]
