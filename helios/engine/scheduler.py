"""The batching scheduler (host side, no torch): cohorts, graph choice, frames, retirement.

    scheduler.add(request)                        # into the pending deque (bounded)
    plan = scheduler.schedule()                   # a RoundPlan, or None when nothing may run now
    outcomes = scheduler.complete(plan, rows)     # validate every row, then retire every lane (RoundOutcomes)

One rule for every request: a request *knows* tokens (its prompt, then each validated sample) and
*consumes* them in rounds; a round gives a lane the next chunk of its unconsumed known tokens, and
the lane samples when the chunk reaches its last known token. Prefill, chunked prefill, decode and
readmission after preemption are all this rule; only the chunk length differs.

    known     [p0 p1 p2 ... p(n-1) s0 s1 s2]        p: prompt, s: sampled
    consumed  [=========== committed ======)        pages hold positions [0, consumed)
    a round   lane.tokens = known[consumed : consumed + chunk]; samples iff the chunk ends at s2

Cohorts. Lanes with one token left are decode lanes, the rest prefill lanes. Where a MIXED graph
exists, one round holds every decode lane and then prefill chunks up to its token capacity; without
one, DECODE and PREFILL rounds alternate while both kinds wait. A request asking for prompt scores
consumes its prompt in SCORED_PREFILL rounds of its own (never MIXED or PREFILL), which take the
prefill turn; `complete` hands each lane's validated scores to delivery before the round's tokens,
and a readmitted request recomputes (and never re-delivers) scores it owes no more. Each round runs the smallest variant
of its operation that holds its lanes and tokens (catalog.py). Newly admitted requests first run
their INITIALIZATION round, as many together as the largest INITIALIZATION variant holds.

Frames. Two rounds may be outstanding only when the transport declares two frames and the executor
holds two (`config.frames`), every generating graph keeps its pending token on the device, and no
active request needs completion feedback (string stops, grammars): otherwise one. A lane joins the
second frame while in the first only as a decode lane after a decode round (no phase change).

Speculation. On a core with a draft, decode lanes with no outstanding round run SPECULATIVE rounds
of the configured width, or under adaptive choice (`config.adaptive_speculation`) the program of the
highest expected rate among DECODE and every selected width, from the executor's measured round costs
and each request's observed acceptance (program_choice.py; docs/speculative.md). A request that opted
out (`SchedulerRequest.speculation` False) decodes plainly.

Images. A request with an image still to encode runs a PREFILL round of its own (one lane, taking
the prefill turn) that encodes its next image into its feature slots; its chunk never reaches an
image not encoded by the round's end (helios.runtime.images). Its lanes carry each prompt position's
feature-store row, so later rounds (MIXED, DECODE) read the features wherever a chunk falls.

Pages. A lane's pages must cover its chunk before it is submitted; where they run short, cached
pages are evicted and younger idle requests preempted. Intake, admission, slots, pages, preemption
and release are `RequestResidency`'s (residency.py), the base class this module's `Scheduler`
extends with rounds: cohorts, graph choice, frames, submission and retirement.

Page tables. The plan carries each slot's page-table delta (`PageTableUpdate`: the entries assigned
since its last upload, or its whole row for a new slot generation); the executor applies it. A
round that fails makes the scheduler forget what its updates would have uploaded: the slot's next
round rewrites its whole row.

Retirement. `complete` validates every row of the round (`helios.runtime.completion.validate_round`,
the one validation a completion row gets) and that the round is the oldest outstanding one before
any lane retires. A cancelled or ended request's lanes
are suppressed (no token, no prefix publication) and its slot and pages return only at the fence of
its last outstanding round.

Per-lane cost (bench/host_round.py). A round's lanes are built and retired in one pass each: what a
request's lanes carry unchanged (seed, sampling, output limit, EOS ids, prompt) is gathered once, a
decode lane is built by the short `decode_lane` (sequence.py), the page table is asked for a delta
only when the request's page count changed, the plan's requests are kept for retirement (no lookups by id), and the sampled tokens come
back as `RoundOutcomes` columns rather than an object per token. A SPECULATIVE round's lanes are built
with their limits and copied proposals, and its rows' offers, accepts and ids are read as columns
(`speculative_columns`), validated by array comparisons first (`bench/host_round.py --speculative W`).
"""

from __future__ import annotations

import collections
import dataclasses
import time
from collections.abc import Callable, Sequence

from helios.engine.catalog import GraphCatalog, GraphVariant
from helios.engine.config import SchedulerConfig
from helios.engine.outcomes import RoundOutcomes
from helios.engine.page_cache import PageCache, PageTableUploads
from helios.engine.program_choice import (
    PLAIN_TOKENS,
    AcceptanceEstimate,
    ChoiceMemory,
    ProgramChoice,
)
from helios.engine.residency import (
    DuplicateRequest,
    QueueFull,
    RequestResidency,
    Residency,
    SchedulerCounters,
    UnknownRequest,
)
from helios.engine.sequence import (
    SequenceState,
    build_lane,
    content_of,
    decode_lane,
    lane_fields,
    restoration_lane,
)
from helios.proto import contract_pb2
from helios.runtime import completion
from helios.runtime.completion import Completion, CompletionRows, SubmissionOrderViolated, speculative_columns
from helios.runtime.costs import RoundCosts
from helios.runtime.history_drafting import HistoryIndex, copied_outcome
from helios.runtime.proposal_masks import constrained_proposal
from helios.runtime.rounds import PageTableUpdate, RoundPlan
from helios.runtime.scores import prompt_score_event, score_refusal, validate_prompt_scores

C = contract_pb2
# Adaptive choice: tokens a lane decodes plainly, as an ordinary decode lane, after the choice was
# plain decoding, before it is chosen for again (a choice needs none of its rounds outstanding, so
# each new choice costs the lane its place in the second frame for a round). The stint doubles at
# each consecutive plain choice of the lane, up to PLAIN_TOKENS_MAX, and starts again at
# PLAIN_TOKENS (program_choice.py) once the lane speculates: a draft that keeps losing costs few choices.
PLAIN_TOKENS_MAX = 128

__all__ = ["DuplicateRequest", "QueueFull", "RequestResidency", "Residency", "Scheduler", "SchedulerCounters",
           "UnknownRequest"]


class Scheduler(RequestResidency):
    """Continuous batching over a graph catalog and a page cache; see the module docstring. Intake,
    slots and pages are `RequestResidency`'s (residency.py)."""

    def __init__(self, config: SchedulerConfig, catalog: GraphCatalog, cache: PageCache, *,
                 costs: RoundCosts | None = None, clock: Callable[[], float] = time.monotonic,
                 memory: ChoiceMemory | None = None) -> None:
        if cache.page_tokens != config.page_tokens:
            raise ValueError(f"page cache of {cache.page_tokens}-token pages, config says {config.page_tokens}")
        super().__init__(config, cache)
        self.catalog = catalog
        self.uploads = PageTableUploads()
        self._sequence = 0  # the last submission's sequence number
        self._outstanding: collections.deque[RoundPlan] = collections.deque()
        self._cohorts: dict[int, list[SequenceState]] = {}  # outstanding plan sequence -> its lanes' requests
        self._prefill_turn = False
        self._scored_turn = True  # scored and plain prefill chunks alternate while both kinds wait
        self._partly_retired: dict[int, int] = {}  # round sequence -> lanes retired before `complete` failed
        self._speculative_turn = True  # speculative and other rounds alternate while both kinds wait
        self._next_frame = 0  # frames alternate by submission, never into a held one; rounds retire in order
        self._init = catalog.variants(C.OPERATION_INITIALIZATION)[0]
        self._init_lanes = catalog.max_lanes(C.OPERATION_INITIALIZATION)  # admissions initialized in one round
        # Preemption snapshots partial pages and readmission restores them when a RESTORATION graph is
        # selected and the continuation storage has snapshot rows (docs/snapshots.md).
        self.snapshots = catalog.has(C.OPERATION_RESTORATION) and self.rows.capacity > 0
        # the one-lane variant of the configured width: its lane limit and draft passes are every variant's
        first = catalog.speculative(config.speculative_width, lanes=1) if config.speculative_width else None
        if config.speculative_width and first is None:
            raise ValueError(f"no SPECULATIVE graph of width {config.speculative_width} is selected")
        self._first_speculative = first
        # Adaptive choice (program_choice.py): the executor's measured round costs (None: unknown, so
        # the configured width runs) and the acceptance pooled over every completed speculative lane.
        # Served rounds' wall time of every graph (ServedCosts: the metrics' served costs, and the
        # choice's refreshed ones): when the schedule call that formed each outstanding round began.
        # With `memory` given (ChoiceMemory: served costs, pooled acceptance, the copies' pools), the
        # one runtimes serving this executor in turn share, each starting where the last left off.
        memory = memory if memory is not None else ChoiceMemory()
        self.served = memory.served
        self._clock = clock
        self._schedule_started = 0.0
        self._round_started: dict[int, float] = {}
        self.choice = (ProgramChoice(catalog, costs, lifetime=config.cost_lifetime, served=self.served)
                       if config.adaptive_speculation else None)
        self.pooled = memory.pooled
        # History drafting: copies or the learned draft, from both sources' acceptance (CopiedChoice).
        self.copied_choice = memory.copied
        # positions a speculating lane's draft passes may reach past its frontier: the configured
        # width's, or under adaptive choice the most of any selected width's
        self._draft_passes = first.draft_passes if first is not None else 0
        if self.choice is not None:
            self._draft_passes = max((v.draft_passes for v in catalog.variants(C.OPERATION_SPECULATIVE)), default=0)
        # Grammar-constrained lanes speculate over their copied proposals only, and only where every
        # SPECULATIVE graph that draws proposals takes their per-position grammar masks.
        drawing = [v for v in catalog.variants(C.OPERATION_SPECULATIVE) if v.drafts > 0]
        self._constrained_speculation = bool(config.history_drafting and drawing
                                             and all(v.grammar_masks for v in drawing))
        self._preempt_asks = 0  # running requests `preempt` asked to preempt, not preempted yet
        # positions a page-table row can address: a lane whose draft passes would pass them decodes plainly
        self._table_tokens = -(-config.context_tokens // config.page_tokens) * config.page_tokens

    # ------------------------------------------------------------------------------------ state

    @property
    def outstanding(self) -> int:
        return len(self._outstanding)

    @property
    def idle(self) -> bool:
        return not (self._pending or self._readmit or self._running or self._outstanding)

    def residency(self) -> Residency:
        """`RequestResidency.residency`, with the rounds outstanding and the cohorts kept for them."""
        return dataclasses.replace(super().residency(), outstanding=tuple(p.sequence for p in self._outstanding),
                                   cohorts=tuple(self._cohorts))

    def oldest(self) -> RoundPlan | None:
        """The oldest outstanding round: the next one to complete."""
        return self._outstanding[0] if self._outstanding else None

    def max_inflight(self) -> int:
        """Rounds that may be outstanding now: 2 only where the specification allows it."""
        if self.config.frames < 2 or not self.catalog.device_pending:
            return 1
        if self._feedback:
            return 1
        return 2

    # ------------------------------------------------------------------------------------ rounds

    def preempt(self, request_id: str) -> None:
        """Preempt a running request once none of its rounds is in flight (it is given no new round
        meanwhile), exactly as page pressure would (snapshot, release, restore at readmission); a request
        not running (queued, preempted, ended) is left as it is."""
        s = self._all.get(request_id)
        if s is None:
            raise UnknownRequest(f"request {request_id!r} is not scheduled")
        if s.slot is not None and not s.preempt_asked:
            s.preempt_asked = True
            self._preempt_asks += 1

    def _preempt_asked(self) -> None:
        self._preempt_asks = 0
        for s in [v for v in self._running if v.preempt_asked]:
            if s.cancelled or s.ended or s.snapshot_row is not None:
                s.preempt_asked = False
            elif s.in_flight == 0 and s.initialized:
                s.preempt_asked = False
                self._preempt_youngest(s)
            else:
                self._preempt_asks += 1  # at a later scheduling point

    def schedule(self) -> RoundPlan | None:
        """The next round to submit, or None (nothing ready, or the frames are full)."""
        self._schedule_started = self._clock()
        plan = self._schedule()
        if plan is None and self._snapshot_due and len(self._outstanding) < self.max_inflight():
            # forming this round preempted a request whose partial page must first be snapshotted
            return self._restoration_round([])
        return plan

    def _schedule(self) -> RoundPlan | None:
        if len(self._outstanding) >= self.max_inflight():
            return None
        if self._preempt_asks:
            self._preempt_asked()
        self._admit()
        limit = self.max_inflight()  # decided once a round: it looks at every running request
        if len(self._outstanding) >= limit:  # an admission may have brought feedback needs
            return None
        second_frame = len(self._outstanding) == 1 and limit == 2
        decode, prefill, initialize, scored, encoding = [], [], [], [], []
        restoring: list[SequenceState] = []  # readmitted requests whose partial page is still to restore
        init_lanes = self._init_lanes
        for s in self._running:  # one pass: requests still to initialize go first, together
            if not s.initialized:
                if s.in_flight == 0 and not (s.cancelled or s.ended) and len(initialize) < init_lanes:
                    initialize.append((s, 0))
                continue
            if initialize:
                continue
            if s.cancelled or s.ended or s.snapshot_row is not None or s.preempt_asked:
                continue  # a victim waits for its snapshot; one asked to be preempted drains its rounds
            if s.restore_row is not None:
                if s.in_flight == 0:
                    restoring.append(s)
                continue
            remaining = len(s.known) + s.unknown - s.consumed - s.submitted
            if remaining < 1 or (s.in_flight and not (second_frame and self._second_frame_ready(s, second_frame)
                                                       and not self._would_speculate(s))):
                continue  # (a lane in flight joins only a second frame: most rounds none is open)
            if s.request.prompt_logprobs is not None and self._owes_scores(s):
                scored.append(s)  # its prompt still has positions to score: SCORED_PREFILL rounds only
                continue
            if s.images is not None and s.images.pending:
                if not s.in_flight:  # an image still to encode: a PREFILL round of its own, one at a time
                    encoding.append(s)
                continue
            (decode if remaining == 1 else prefill).append(s)
        if initialize:
            variant = self.catalog.smallest(C.OPERATION_INITIALIZATION, lanes=len(initialize), tokens=0)
            return self._submit(variant or self._init, initialize)
        if restoring or self._snapshot_due:
            return self._restoration_round(restoring)
        if self.config.speculative_width and decode:
            speculating = [s for s in decode if self._speculates(s)]
            # One speculative round at a time: its lanes need completion feedback anyway, so lanes that
            # wait for it join the next one together rather than splitting into alternating cohorts.
            busy = any(p.operation == C.OPERATION_SPECULATIVE for p in self._outstanding)
            if speculating and busy:
                waiting = set(map(id, speculating))
                decode = [s for s in decode if id(s) not in waiting]
            elif speculating and (self._speculative_turn or (len(speculating) == len(decode) and not prefill)):
                plan = self._speculative_round(speculating)
                if plan is not None:
                    self._speculative_turn = False
                    return plan
                # no speculative round could be formed (pages): they decode plainly this round
            elif speculating:  # they wait for their turn, the next round, while other lanes run this one
                self._speculative_turn = True
                waiting = set(map(id, speculating))
                decode = [s for s in decode if id(s) not in waiting]
        # A request with an image still to encode runs a PREFILL round of its own (one image a round,
        # helios.runtime.images), taking the prefill turn.
        if encoding and (not decode or self._prefill_turn):
            cohort = self._cohort(C.OPERATION_PREFILL, encoding[:1])
            if cohort:
                variant = self.catalog.smallest(C.OPERATION_PREFILL, lanes=1, tokens=cohort[0][1])
                assert variant is not None  # _cohort keeps within the largest variant
                self._prefill_turn = False
                return self._submit(variant, cohort)
        # Scored prompt chunks take the prefill turn, alternating with plain prefill chunks while both wait.
        take_scored = scored and (not decode or self._prefill_turn) and (not prefill or self._scored_turn)
        if scored:
            self._scored_turn = not take_scored
        if take_scored:
            cohort = self._cohort(C.OPERATION_SCORED_PREFILL, scored)
            if cohort:
                tokens = sum(chunk for _, chunk in cohort)
                variant = self.catalog.smallest(C.OPERATION_SCORED_PREFILL, lanes=len(cohort), tokens=tokens)
                assert variant is not None  # _cohort keeps within the largest variant
                self._prefill_turn = False
                return self._submit(variant, cohort)
        mixed = self.catalog.has(C.OPERATION_MIXED)
        if decode and prefill and mixed:
            operation, order = C.OPERATION_MIXED, decode + prefill
        elif prefill and (not decode or self._prefill_turn):
            if mixed and len(prefill) > 1 and self._leaves_room(prefill[0]):
                operation, order = C.OPERATION_MIXED, prefill
            else:
                operation, order = C.OPERATION_PREFILL, prefill
        elif decode:
            operation, order = C.OPERATION_DECODE, decode
        else:
            return None
        cohort = self._cohort(operation, order)
        if not cohort:
            return None
        tokens = sum(chunk for _, chunk in cohort)
        variant = self.catalog.smallest(operation, lanes=len(cohort), tokens=tokens)
        if variant is None:  # _cohort keeps within the largest variant, so this cannot happen
            raise RuntimeError(f"no {C.Operation.Name(operation)} graph holds {len(cohort)} lanes, {tokens} tokens")
        self._prefill_turn = operation == C.OPERATION_DECODE
        return self._submit(variant, cohort)

    def complete(self, plan: RoundPlan, rows: Sequence[Completion]) -> RoundOutcomes:
        """Validate `rows` (the plan's completion rows, lane order), then retire every lane.
        Raises a CompletionInvalid error, retiring nothing; the caller then calls `abort(plan)`."""
        if not self._outstanding or self._outstanding[0] is not plan:
            oldest = self._outstanding[0].sequence if self._outstanding else None
            raise SubmissionOrderViolated(f"graph {plan.graph}: round {plan.sequence} completed while round "
                                          f"{oldest} is the oldest outstanding")
        now = self._clock()  # the round's completion, read back
        speculative = plan.operation == C.OPERATION_SPECULATIVE
        check = self.catalog.variant(plan.graph).check if speculative else None
        completion.validate_round(plan.graph, plan.lanes, rows, sequence=plan.sequence,
                                  sampled_tokens=self.config.sampled_tokens, page_tokens=self.config.page_tokens,
                                  frame=plan.frame, speculative=check)
        scores = getattr(rows, "scores", None)
        if plan.operation == C.OPERATION_SCORED_PREFILL:
            validate_prompt_scores(plan.graph, scores, sum(len(lane.tokens) for lane in plan.lanes),
                                   self.config.sampled_tokens)
        self._outstanding.popleft()
        # a valid round's wall time, overlap included (program_choice.py, ServedCosts)
        self.served.completed(plan.graph, self._round_started.pop(plan.sequence, now), now)
        name = C.Operation.Name(plan.operation).removeprefix("OPERATION_").lower()
        self.counters.launches[name] = self.counters.launches.get(name, 0) + 1
        if plan.constrained_lanes:
            self.counters.constrained_max_inflight = max(self.counters.constrained_max_inflight, plan.outstanding)
            if plan.operation == C.OPERATION_DECODE and plan.constrained_lanes < len(plan.lanes):
                self.counters.mixed_grammar_decode_steps += 1
        if speculative:
            counters = self.counters
            offers, kept, emitted, sampled_ids = speculative_columns(rows)  # read once, no Completion built
            counters.speculative_rounds += 1
            counters.offered_drafts += sum(offers) - len(offers)
            counters.accepted_drafts += sum(kept)
            width = self.catalog.variant(plan.graph).width
            counters.rounds_by_width[width] = counters.rounds_by_width.get(width, 0) + 1
            offered_at, accepted_at = counters.offered_by_position, counters.accepted_by_position
            pooled = self.pooled
            for s, offer, accepted in zip(self._cohorts[plan.sequence], offers, kept, strict=True):
                if offer > 1:  # the lane's proposals 1..offer-1; the first `accepted` were kept
                    for k in range(1, offer):
                        offered_at[k] = offered_at.get(k, 0) + 1
                    for k in range(1, accepted + 1):
                        accepted_at[k] = accepted_at.get(k, 0) + 1
                    # a completed observation of the request's acceptance, and the pool's
                    if s.acceptance is None:
                        s.acceptance = AcceptanceEstimate()
                    s.acceptance.observe(offer - 1, accepted)
                    pooled.observe(offer - 1, accepted)
            if self.config.history_drafting:
                for s, lane, offer, accepted_drafts in zip(self._cohorts[plan.sequence], plan.lanes, offers, kept,
                                                           strict=True):
                    offered, accepted = copied_outcome(lane.copied, offer, accepted_drafts)
                    counters.copied_offered += offered
                    counters.copied_accepted += accepted
                    self.copied_choice.observe(s.sources, offered, accepted, offer - 1 - offered,
                                               accepted_drafts - accepted if accepted == offered else 0)
        elif isinstance(rows, CompletionRows):  # columns: no Completion is built
            emitted, sampled_ids = rows.values("emitted"), rows.values("sampled_id")
        else:
            emitted, sampled_ids = [r.emitted for r in rows], [r.sampled_id for r in rows]
        outcomes = RoundOutcomes()
        ids, tokens, counts = outcomes.request_ids, outcomes.tokens, outcomes.sampled  # appended in step
        page_tokens = self.config.page_tokens
        initialization = plan.operation == C.OPERATION_INITIALIZATION
        restoration = plan.operation == C.OPERATION_RESTORATION
        # The plan's requests in lane order, kept at submission (a request is forgotten only after the
        # fence of its last outstanding round, so every one is still here).
        sequences = self._cohorts.pop(plan.sequence)
        if plan.operation == C.OPERATION_SCORED_PREFILL:
            self._retire_scores(plan, sequences, scores, outcomes)
        retired = 0  # lanes whose round count this completion took back (an abort must not again)
        try:
            for s, lane, request_id, emits, sampled_id in zip(sequences, plan.lanes, plan.request_ids, emitted,
                                                              sampled_ids, strict=True):
                count = len(lane.tokens)  # the lane retires: its tokens are committed
                s.in_flight -= 1
                retired += 1
                s.submitted -= count
                if speculative:  # the pending token and the accepted proposals are committed
                    count = emits
                consumed = s.consumed = s.consumed + count
                if lane.samples:
                    s.unknown -= 1
                if s.cancelled or s.ended:
                    if restoration and s.publishing:  # its snapshot round is fenced: publish (unless cancelled)
                        row, s.snapshot_row, s.publishing = s.snapshot_row, None, False
                        self._snapshotting -= 1
                        if s.cancelled:  # the private publication candidate is discarded
                            self.rows.give(row)  # type: ignore[arg-type]
                        else:
                            self._publish_continuation(s, row)  # type: ignore[arg-type]
                        self._release(s)
                    elif s.in_flight == 0:
                        self._end(s)
                    continue
                if initialization:
                    s.initialized = True
                    continue
                if restoration:  # the round's fence has passed: its snapshots are published, its restores done
                    self._retire_restoration(s)
                    continue
                if speculative:  # every emitted id, in order (delivery ends the request at a stop among them);
                    # known before publication: the accepted ones are committed history
                    emitted_here, before = len(sampled_id), s.sampled
                    s.known.extend(sampled_id)
                    ids.extend([request_id] * emitted_here)
                    tokens.extend(sampled_id)
                    counts.extend(range(before + 1, before + emitted_here + 1))
                    s.sampled = before + emitted_here
                pages = s.pages
                published = len(pages.keys)  # type: ignore[union-attr]
                if (published + 1) * page_tokens <= consumed and published < len(pages.pages):  # type: ignore[union-attr]
                    pages.publish(s.known, consumed, content_of(s))  # type: ignore[union-attr]  # filled: key them once
                if speculative:
                    continue
                if emits:
                    s.known.append(sampled_id)
                    ids.append(request_id)
                    tokens.append(sampled_id)
                    counts.append(s.sampled + 1)
                    s.sampled += 1
        except BaseException:  # host code failed partway: `abort` ends the lanes, these ones retired
            self._partly_retired[plan.sequence] = retired
            raise
        self.counters.output_tokens += len(outcomes)
        return outcomes

    def _retire_restoration(self, s: SequenceState) -> None:
        """A validated RESTORATION lane: a snapshot lane's partial page is in its row, so the request is
        preempted now (its partial page returns, its checkpoints and row form its snapshot); a restore
        lane's row is in its private page, so the row returns and the request continues at its endpoint."""
        if s.snapshot_row is not None:
            row, s.snapshot_row = s.snapshot_row, None
            self._snapshotting -= 1
            self.counters.snapshots_published += 1
            self._preempt(s, row)
        elif s.restore_row is not None:  # its own snapshot's row returns; a published one is unpinned
            self.counters.continuation_hits += int(s.shared_restore)
            self._give_restore_row(s)
            self.counters.snapshots_restored += 1

    def _restoration_round(self, restoring: list[SequenceState]) -> RoundPlan:
        """One RESTORATION round: the victims whose partial page is due for a snapshot, then readmitted
        requests whose row is due for restoration, up to the largest RESTORATION variant."""
        limit = self.catalog.max_lanes(C.OPERATION_RESTORATION)
        lanes = (self._snapshot_due + restoring)[:limit]
        for s in lanes:
            if s in self._snapshot_due:
                self._snapshot_due.remove(s)
        variant = self.catalog.smallest(C.OPERATION_RESTORATION, lanes=len(lanes), tokens=0)
        assert variant is not None  # within the largest variant
        return self._submit(variant, [(s, 0) for s in lanes])

    def _owes_scores(self, s: SequenceState) -> bool:
        """A scoring request's next chunk starts at a position whose next prompt token is not scored
        yet (position p scores prompt token p + 1): it runs in SCORED_PREFILL rounds."""
        return s.consumed + s.submitted < len(s.request.generation.prompt_token_ids) - 1

    def _score_problem(self, top: int) -> str | None:
        width = self.config.prompt_score_width if self.catalog.has(C.OPERATION_SCORED_PREFILL) else 0
        return score_refusal(top, width)

    def _retire_scores(self, plan: RoundPlan, sequences: list[SequenceState], scores,
                       outcomes: RoundOutcomes) -> None:
        """The prompt scores each lane of a validated SCORED_PREFILL round owes its request: prompt
        tokens [consumed + 1, consumed + len] within the prompt, those not delivered before (a
        readmitted request recomputes scored positions; their scores went out once)."""
        row = 0
        for s, lane, request_id in zip(sequences, plan.lanes, plan.request_ids, strict=True):
            length = len(lane.tokens)
            top = s.request.prompt_logprobs
            if not (s.cancelled or s.ended) and top is not None:
                first = max(lane.consumed + 1, s.scored + 1)
                last = min(lane.consumed + length, len(s.request.generation.prompt_token_ids) - 1)
                if last >= first:
                    event = prompt_score_event(scores, row + first - lane.consumed - 1, first, last - first + 1, top)
                    outcomes.prompt_scores.append((request_id, event))
                    s.scored = last
            row += length

    def abort(self, plan: RoundPlan) -> list[str]:
        """The round failed (the executor raised, its completion was invalid, or host code failed while
        `complete` retired its lanes): its lanes' requests end; returns those the runtime must report
        as failed (cancelled ones are just released)."""
        if plan in self._outstanding:
            self._outstanding.remove(plan)
        self._cohorts.pop(plan.sequence, None)
        if self._round_started.pop(plan.sequence, None) is not None:
            self.served.failed(self._clock())  # a failed round is not a cost observation
        retired = self._partly_retired.pop(plan.sequence, 0)  # lanes `complete` retired before it failed
        failed = []
        for update in plan.page_table_updates:  # the device may not hold them: the slot's next round rewrites its row
            self.uploads.forget(update.slot)
        for index, (lane, request_id) in enumerate(zip(plan.lanes, plan.request_ids, strict=True)):
            s = self._all.get(request_id)
            if s is None:
                continue
            s.table_generation = s.table_entries = -1
            if index >= retired:
                s.in_flight -= 1
                s.submitted -= len(lane.tokens)
                s.unknown -= int(lane.samples)
            if not (s.cancelled or s.ended):
                s.ended = True
                failed.append(request_id)
            if s.in_flight == 0:
                self._release(s)
        return failed

    # ------------------------------------------------------------------------------------ internals

    def _second_frame_ready(self, s: SequenceState, second_frame: bool) -> bool:
        """A request already in flight joins the second frame only as a decode lane whose previous
        round was a decode (its pending token on the device), and never on a core with Engram tables:
        their rows are hashed on the host from the tokens a lane consumes (history inputs need
        completion feedback), so only requests with no round in flight fill the second frame there."""
        return (second_frame and not self.config.engram_history and s.remaining == 1
                and s.last_operation == C.OPERATION_DECODE
                and s.sampled + s.unknown < s.request.generation.max_tokens)

    def _speculates(self, s: SequenceState) -> bool:
        """A decode lane may run a speculative round: none of its rounds is outstanding (the host
        chooses its length from completed observations) and `_would_speculate`; a grammar-constrained
        lane also needs a copied proposal (without one it decodes plainly, its mask one token ahead)."""
        if s.in_flight or not self._would_speculate(s):
            return False
        if s.request.grammar is None:
            return True
        if s.history is None:
            s.history = HistoryIndex()
        return bool(s.history.propose(s.known, 1))

    def _would_speculate(self, s: SequenceState) -> bool:
        """A decode lane would run a speculative round once none of its rounds is outstanding: a width
        is configured, the request has no string stops (their host-stop barrier is width one), its
        pending token is the device's (sampled there, not fed after a readmission), a grammar that masks it has per-position masks for its copied proposals (history drafting,
        graphs taking CANDIDATE_GRAMMAR_MASKS), and its output limit and the context leave a token.
        Such a lane never joins the second frame: a plain DECODE there would keep one of its rounds
        outstanding at every scheduling point, so it would never speculate."""
        if (not self.config.speculative_width or not s.request.speculation or s.request.host_stop
                or s.sampled < s.plain_until):  # string stops: the host-stop barrier is width one
            return False
        if (s.request.constrained or s.request.grammar is not None) and not (
                s.request.grammar is not None and self._constrained_speculation):
            return False
        frontier = s.consumed + s.submitted
        return (frontier >= s.admitted_known and s.sampled + s.unknown < s.request.generation.max_tokens
                and frontier + 1 < self.config.context_tokens
                and self._first_speculative is not None
                and frontier + self._draft_passes <= self._table_tokens)  # the draft's passes have positions

    def _speculative_width(self, order: list[SequenceState]) -> int:
        """The width `order`'s lanes speculate at: the configured one, or under adaptive choice the
        program of the highest expected rate (0: plain DECODE), the configured width while costs are
        unknown or stale or acceptance unknown (`ProgramChoice.explores`). Every lane of `order` has
        no outstanding round: this is chosen from completed observations.

        The choice is the decode population's, not the cohort's alone: lanes in a plain stint are
        weighed with `order` (their estimates and rooms after it), since a cohort choosing otherwise
        than they did runs a round of its own beside theirs every step, and every lane waits for
        both (measured on an H100 at 256 requests, BENCHMARKS.md, issue #18: cohorts of new requests
        speculating beside lanes in plain stints ran more rounds than plain decoding or any fixed
        width, below all of them). Speculation chosen ends their stints: once their rounds in flight
        complete they join the next cohort. Plain decoding chosen gives `order` a stint."""
        width = self.config.speculative_width
        if self.choice is None:
            return width
        ready = set(map(id, order))
        # a lane in a stint whose rounds in flight end its output (or fill the context) has no room
        # left (`candidates` needs at least one token a lane): it is no longer the choice's
        stinted = [s for s in self._running if s.plain_until > s.sampled and id(s) not in ready
                   and not (s.cancelled or s.ended) and self._room(s) >= 1]
        population = order + stinted
        rooms = [self._room(s) for s in population]
        # None: acceptance unknown (the configured width observes it), or costs unknown or stale
        chosen = self.choice.decide(self.pooled, [s.acceptance for s in population], rooms)
        if chosen is None:
            self.counters.fallback_choices += 1
            return width
        if not chosen.speculative:
            # They decode plainly for their next stint as any decode lane does (under two frames,
            # pipelined in both), then wait for their rounds to complete and are chosen for again.
            self.counters.plain_choices += 1
            for s in order:
                s.plain_stint = min(2 * s.plain_stint, PLAIN_TOKENS_MAX) if s.plain_stint else PLAIN_TOKENS
                s.plain_until = s.sampled + s.plain_stint
                if s.acceptance is not None:  # nothing of it is observed meanwhile: its evidence ages too
                    s.acceptance.decay(self.choice.plain_decay(s.plain_stint))
            # Nothing is observed meanwhile: the pooled evidence ages, by one POOLED_DECAY for each
            # PLAIN_TOKENS the whole population decodes plainly (what a choice every PLAIN_TOKENS would
            # age it): the cohort's mean stint times its share of the population. Counted in full for
            # every cohort, 128 and 256 requests choosing in cohorts of a few aged it as fast as cohorts
            # came, down to no evidence: 6 to 14 fallback rounds of the configured width a run (H100,
            # BENCHMARKS.md, issue #18).
            stint = sum(s.plain_stint for s in order) / len(population)
            self.pooled.decay(self.choice.plain_decay(stint))
            return 0
        self.counters.explored_choices += chosen.explores
        for s in order:
            s.plain_stint = 0
        for s in stinted:  # speculation is the population's choice: their stints end here
            s.plain_until = s.sampled
            s.plain_stint = 0
        return chosen.width

    def _room(self, s: SequenceState) -> int:
        """Tokens a lane may still emit beyond its rounds in flight: its output limit and the context."""
        return min(s.request.generation.max_tokens - s.sampled - s.unknown, self.config.context_tokens - s.frontier - 1)

    def _speculative_round(self, order: list[SequenceState]) -> RoundPlan | None:
        """A SPECULATIVE round over `order`'s lanes at the configured or chosen width (None: the
        choice was plain decoding, or no lane's pages could be reserved): each lane's limit within the
        program's lane limit, its output limit and the context; its pages cover the draft's passes
        (they write from the pending token on, whatever the lane's length)."""
        width = self._speculative_width(order)
        if not width:
            return None
        first = self.catalog.speculative(width, lanes=1) if self.choice is not None else self._first_speculative
        assert first is not None  # `_speculates` admits lanes only with a speculative width configured
        page_tokens = self.config.page_tokens
        cohort: list[tuple[SequenceState, int]] = []
        limits: list[int] = []
        copied: list[tuple[int, ...]] | None = [] if self.config.history_drafting else None
        masks: list[tuple[tuple[int, ...], ...] | None] = []
        passes, lane_limit = first.draft_passes, first.lane_limit  # read once
        for s in order[:self.catalog.speculative_lanes(width)]:
            if s.slot is None:  # preempted while this cohort was formed
                continue
            reach = s.frontier + passes  # within the page table: `_speculates` checked it
            # at least 1: `_speculates` left the request an output token and the context a position
            limit = min(lane_limit, self._room(s))
            if reach > len(s.pages.pages) * page_tokens and not self._reserve(s, reach, keep=cohort):  # type: ignore[union-attr]
                break
            lane_masks = None
            if copied is not None:  # the lane's own tokens, all known: none of its rounds is outstanding
                if s.history is None:
                    s.history = HistoryIndex()
                proposal = s.history.propose(s.known, min(limit - 1, first.drafts), drafted=s.request.grammar is None)
                if proposal and s.request.grammar is None and not self.copied_choice.copies(s.sources):
                    proposal = ()  # its learned draft has done better than its copies: the draft proposes
                    self.copied_choice.skipped()  # nothing is observed of copies meanwhile: the pool ages
                if s.request.grammar is not None and first.grammar_masks:
                    # Only the copied run the grammar allows, each target row under its position's mask:
                    # the host knows no mask for a position past it, so the lane's limit stops there.
                    # Its grammar consumed every known token: delivery advanced it before this round.
                    proposal, lane_masks = constrained_proposal(s.request.grammar, proposal,
                                                                lane_fields(s, self.config.eos_ids)[3])
                    limit = min(limit, len(proposal) + 1)
                elif s.request.grammar is not None:
                    # a program without per-position masks (one token wide): the lane's own mask, the
                    # grammar's next one, holds for its one row
                    proposal, limit = (), 1
                copied.append(proposal)
            cohort.append((s, 1))
            limits.append(limit)
            masks.append(lane_masks)
        if not cohort:
            return None
        variant = self.catalog.speculative(width, lanes=len(cohort))
        assert variant is not None
        return self._submit(variant, cohort, limits, copied, masks)

    def _leaves_room(self, s: SequenceState) -> bool:
        """Prefill lanes alone share a MIXED round only where the first one's rest of the prompt would
        not fill the largest PREFILL round by itself: otherwise the other lanes would only add slivers
        to a round the one-lane PREFILL graph (the cheaper program: its attention needs no per-row
        pass) runs as well."""
        capacity = self.catalog.token_limits(C.OPERATION_PREFILL)
        return len(capacity) < 2 or s.remaining < capacity[1]

    def _cohort(self, operation: int, order: list[SequenceState]) -> list[tuple[SequenceState, int]]:
        cohort: list[tuple[SequenceState, int]] = []  # its sequences are never preempted for a later lane
        lanes_limit = self.catalog.max_lanes(operation)
        page_tokens = self.config.page_tokens
        capacity = self.catalog.token_limits(operation)  # [k]: most tokens a round of k lanes holds
        tokens = 0
        for s in order:
            if s.slot is None:  # preempted while this cohort was formed
                continue
            lanes = len(cohort)
            if lanes >= lanes_limit:
                break
            budget = capacity[lanes + 1] - tokens
            if budget < 1:
                break
            frontier = s.consumed + s.submitted
            chunk = len(s.known) + s.unknown - frontier
            if chunk > budget:
                chunk = budget
            if s.images is not None and s.images.pending:  # never past an image not encoded by its end
                room = s.images.room(frontier, encodes=operation == C.OPERATION_PREFILL)
                if room is not None and room < chunk:
                    chunk = room
                if chunk < 1:
                    continue
            if (frontier + chunk > len(s.pages.pages) * page_tokens  # type: ignore[union-attr]  # else covered
                    and not self._reserve(s, frontier + chunk, keep=cohort)):
                break
            cohort.append((s, chunk))
            tokens += chunk
        return cohort

    def _submit(self, variant: GraphVariant, cohort: list[tuple[SequenceState, int]],
                limits: list[int] | None = None, copied: list[tuple[int, ...]] | None = None,
                masks: list[tuple[tuple[int, ...], ...] | None] | None = None) -> RoundPlan:
        self._sequence += 1
        self._round_started[self._sequence] = self._schedule_started
        lanes, updates, sequences = [], [], []
        constrained = 0
        operation = variant.operation
        initialization = operation == C.OPERATION_INITIALIZATION
        restoration = operation == C.OPERATION_RESTORATION
        delta = self.uploads.delta if variant.page_table else None  # a graph without a page table uploads none
        device_pending = self.catalog.device_pending
        eos_ids = self.config.eos_ids
        history = self.config.engram_history
        speculative = limits is not None
        limit, proposal, lane_masks = 0, (), None  # what a lane of any other round carries
        for s, chunk in cohort:
            if speculative:
                # a SPECULATIVE lane's limit and copied proposals; a constrained one's masks are its
                # per-position ones: its lane mask allows every token
                i = len(lanes)
                limit = limits[i]  # type: ignore[index]
                proposal = copied[i] if copied is not None else ()
                lane_masks = masks[i] if masks is not None else None
            if restoration:
                lane = restoration_lane(s, eos_ids)
            elif (chunk == 1 and s.lane_fields is not None and not initialization and s.request.grammar is None
                  and s.images is None):
                lane = decode_lane(s, device_pending, limit, proposal, history)  # most lanes of most rounds
            else:
                lane = build_lane(s, chunk, initialization, device_pending, eos_ids, lane_mask=lane_masks is None,
                                  speculative_limit=limit, copied=proposal, candidate_masks=lane_masks,
                                  history=history)
            if s.images is not None and not (initialization or restoration):
                encodes = operation == C.OPERATION_PREFILL and s.images.pending
                lane = dataclasses.replace(lane, image_context=s.images.context,
                                           image=s.images.encode() if encodes else None)
            lanes.append(lane)
            sequences.append(s)
            if delta is not None and (s.table_entries != len(lane.page_ids) or s.table_generation != lane.generation):
                start, entries = delta(lane.slot, lane.generation, lane.page_ids)
                s.table_generation, s.table_entries = lane.generation, len(lane.page_ids)
                if entries or start == 0:
                    updates.append(PageTableUpdate(lane.slot, start, entries))
            if s.request.constrained:
                constrained += 1
            s.in_flight += 1
            s.submitted += chunk
            if lane.samples:
                s.unknown += 1
            s.last_operation = operation
        frame = self._next_frame
        if self.config.frames > 1:
            if any(held.frame == frame for held in self._outstanding):  # an aborted round left its turn unused
                frame ^= 1
            self._next_frame = frame ^ 1
        plan = RoundPlan(sequence=self._sequence, frame=frame, graph=variant.name, operation=operation,
                         lanes=tuple(lanes), request_ids=tuple([s.request.request_id for s in sequences]),
                         page_table_updates=tuple(updates), constrained_lanes=constrained,
                         outstanding=len(self._outstanding) + 1, page_copies=self.cache.take_copies())
        self._outstanding.append(plan)
        self._cohorts[plan.sequence] = sequences
        return plan
