"""Where each request lives while the scheduler holds it (host side, no torch): `RequestResidency`,
the base of `Scheduler` (scheduler.py) that owns intake, request slots and pages.

    queued (pending deque, bounded) -> admitted (a slot, pages, a slot generation) -> running
      -> preempted (pages and slot returned; readmitted ahead of new requests) -> ...
      -> released at the fence of its last outstanding round (ended, cancelled or failed)

Admission takes the readmission list first, then the pending deque, while slots are free; it looks
the request's known tokens up in the prefix cache and keeps a page of growth for each running
request.

Pages. A lane's pages must cover its chunk before it is submitted. When pages run short the
scheduler evicts unreferenced cached pages (page_cache.py), then preempts the most recently admitted
request that is not in flight (its pages return, its published prefix stays cached) and readmits it
later ahead of new requests; the oldest request can always proceed, so a request that fits the
cache alone never fails for a temporary shortage.

Images (docs/vision.md). A request with images takes feature slots (feature_slots.py) with its
request slot and returns them with it; its admission's `AdmittedImages` (helios.runtime.images)
counts the images its reused prefix holds as encoded. Its page keys mix in its images' digests, a
reused prefix is cut back so it ends inside no image span, and it matches and publishes no
continuation.

`residency()` is a read-only snapshot of all of it (`Residency`): what conformance's resource
accounting reads once a workload has ended.

scheduler.py re-exports `QueueFull`, `UnknownRequest`, `DuplicateRequest` and `SchedulerCounters`.
"""

from __future__ import annotations

import bisect
import collections
from dataclasses import dataclass, field

from helios.engine.config import SchedulerConfig, SchedulerRequest
from helios.engine.feature_slots import FeatureSlots
from helios.engine.page_cache import CacheGauges, PageCache, PagesShort, PrefixMatch, SequencePages, pages_for
from helios.engine.sequence import SequenceState, content_of
from helios.engine.snapshots import ContinuationRows, Snapshot
from helios.errors import HeliosError
from helios.runtime.images import AdmittedImages, prefix_boundary


class QueueFull(HeliosError):
    """The pending admission deque holds queue_capacity requests already."""


class UnknownRequest(HeliosError):
    """A request id the scheduler does not hold."""


class DuplicateRequest(HeliosError):
    """A request id the scheduler already holds."""


@dataclass(slots=True)
class SchedulerCounters:
    started: int = 0  # first admissions
    readmissions: int = 0
    preemptions: int = 0
    launches: dict[str, int] = field(default_factory=dict)  # operation name -> rounds completed
    prefix_lookups: int = 0
    reused_tokens: int = 0  # positions served by the prefix cache, readmissions included
    mixed_grammar_decode_steps: int = 0
    constrained_max_inflight: int = 0
    prompt_tokens: int = 0
    output_tokens: int = 0
    speculative_rounds: int = 0  # SPECULATIVE rounds completed
    offered_drafts: int = 0  # proposals offered for verification (each lane's offer less its pending row)
    accepted_drafts: int = 0  # proposals accepted
    copied_offered: int = 0  # of the offered proposals, those copied from the request's history
    copied_accepted: int = 0  # of the accepted proposals, the copied ones
    # per draft position k (1-based): lanes offered a proposal at k, and lanes whose proposal k was accepted
    offered_by_position: dict[int, int] = field(default_factory=dict)
    accepted_by_position: dict[int, int] = field(default_factory=dict)
    rounds_by_width: dict[int, int] = field(default_factory=dict)  # W -> SPECULATIVE rounds completed
    plain_choices: int = 0  # cohorts ready to speculate for which the choice ran plain DECODE instead
    fallback_choices: int = 0  # speculative rounds formed at the fallback width (costs unknown or stale)
    explored_choices: int = 0  # speculative rounds of a wider program chosen to be measured (never served)
    snapshots_published: int = 0  # continuation snapshots published (their RESTORATION round's fence passed)
    snapshots_restored: int = 0  # continuation snapshots restored into a private page (after the fence)
    snapshots_evicted: int = 0  # snapshots given up under page pressure (their request then recomputes)
    recomputed_tokens: int = 0  # positions a readmitted request consumes again (consumed before its preemption)
    continuation_hits: int = 0  # published continuations restored into an admitted request's page (at the fence)
    continuations_offloaded: int = 0  # published continuations evicted for their row, moved to the host tier
    continuations_readmitted: int = 0  # of the hits, those copied from the host tier into the request's page


@dataclass(frozen=True, slots=True)
class Residency:
    """What a scheduler holds at one moment (a copy: reading it changes nothing). Idle, it holds no
    request, every slot is free once, no page is referenced and no round is outstanding."""

    slots: int  # request slots (max_active)
    free_slots: tuple[int, ...]  # the free list as held (a slot listed twice is a bookkeeping error)
    requests: tuple[str, ...]  # every request held: queued, running, readmitting, or awaiting its fence
    pending: int  # in the pending deque
    readmitting: int  # preempted, waiting for readmission
    running: int  # holding a slot
    feedback: int  # running requests counted as needing completion feedback
    pages: CacheGauges
    referenced_pages: dict[int, int]  # page -> references held
    outstanding: tuple[int, ...] = ()  # sequences of the rounds submitted and not completed
    cohorts: tuple[int, ...] = ()  # sequences whose lanes' requests are still kept for retirement
    continuation_rows: int = 0  # continuation rows holding (or being written with) a request's snapshot
    snapshots: int = 0  # preempted requests holding a snapshot
    published_continuations: int = 0  # rows holding a published continuation (reusable, evictable)


class RequestResidency:
    """Intake, slots and pages of the requests a `Scheduler` holds; see the module docstring."""

    def __init__(self, config: SchedulerConfig, cache: PageCache) -> None:
        self.config = config
        self.cache = cache
        self.counters = SchedulerCounters()
        self._tickets = 0
        self._pending: collections.deque[SequenceState] = collections.deque()  # new requests, bounded
        self._readmit: list[SequenceState] = []  # preempted requests, by order (ahead of new ones)
        self._running: list[SequenceState] = []  # holding a slot, by order
        self._feedback = 0  # running requests that need completion feedback (string stops, grammars)
        self._all: dict[str, SequenceState] = {}
        self._free_slots = list(range(config.max_active - 1, -1, -1))
        self._slot_generations = [0] * config.max_active
        self._released: list[str] = []  # cancelled requests whose resources came back
        # Snapshots (snapshots.py): the continuation rows, and whether preemption snapshots at all (the
        # scheduler turns it on when a RESTORATION graph is selected and the storage has rows).
        self.rows = ContinuationRows(config.snapshot_rows)
        self.rows.evicted = self._offload_continuation  # an evicted continuation moves to the host tier
        self.snapshots = False
        self._snapshot_due: list[SequenceState] = []  # victims whose snapshot round is still to submit
        self._snapshotting = 0  # victims whose partial page is being snapshotted (due or in flight)
        # Image feature slots (docs/vision.md): every request slot's share of the feature store, taken
        # at admission and returned with the request slot (an admission encodes its images again).
        self.feature_slots = FeatureSlots(config.max_active * config.image_feature_slots)

    # ------------------------------------------------------------------------------------ intake

    def admission_check(self, request: SchedulerRequest) -> str | None:
        """Why this request can never run on this core and cache, or None."""
        prompt = request.generation.prompt_token_ids
        generation = request.generation
        if len(prompt) + generation.max_tokens > self.config.context_tokens:
            return (f"prompt ({len(prompt)} tokens) plus max_tokens ({generation.max_tokens}) exceeds the served "
                    f"context of {self.config.context_tokens} tokens")
        if any(t >= self.config.input_tokens for t in prompt):
            return f"a prompt token is outside the input vocabulary of {self.config.input_tokens}"
        if request.prompt_logprobs is not None:
            problem = self._score_problem(request.prompt_logprobs)
            if problem is not None:
                return problem
        images = len(generation.images)
        if images > self.config.image_feature_slots:
            return (f"{images} images exceed the core's {self.config.image_feature_slots} image feature slots "
                    "a request")
        if images and request.prompt_logprobs is not None:
            return "prompt scores of a prompt with images are not served"
        # The last sampled token is never consumed: positions [0, prompt + max_tokens - 1) need pages.
        need = pages_for(len(prompt) + generation.max_tokens - 1, self.config.page_tokens)
        if need > self.cache.pages:
            return f"the request needs {need} cache pages; the cache holds {self.cache.pages}"
        return None

    def _score_problem(self, top: int) -> str | None:
        """Why prompt scores with `top` alternatives a token cannot be served here, or None (the
        scheduler, which knows its graphs, answers; residency alone serves none)."""
        return "this scheduler runs no SCORED_PREFILL rounds (prompt scores)"

    def add(self, request: SchedulerRequest) -> None:
        """Queue a request for admission (check `admission_check` first)."""
        if request.request_id in self._all:
            raise DuplicateRequest(f"request {request.request_id!r} is already scheduled")
        if len(self._pending) >= self.config.queue_capacity:
            raise QueueFull(f"the pending admission deque is full ({self.config.queue_capacity} requests)")
        self._tickets += 1
        sequence = SequenceState(request, self._tickets, list(request.generation.prompt_token_ids))
        self._all[request.request_id] = sequence
        self._pending.append(sequence)

    def cancel(self, request_id: str) -> None:
        """Suppress the request's output; its slot and pages return at the fence of its last
        outstanding round (then it is listed by `released`)."""
        s = self._all.get(request_id)
        if s is None or s.cancelled:
            return
        s.cancelled = True
        if s.in_flight == 0:
            self._release(s)

    def finish(self, request_id: str, *, publish: bool = False) -> None:
        """The runtime ended the request (EOS, stop, output limit, failure): stop scheduling it. With
        `publish` (it ended by EOS or its output limit: no matched stop, no failure) a partial last page
        is published as a continuation after its fence, where rows allow (snapshots.py)."""
        s = self._all.get(request_id)
        if s is None:
            raise UnknownRequest(f"request {request_id!r} is not scheduled")
        s.ended = True
        s.publish = publish
        if s.in_flight == 0:
            self._end(s)

    def _end(self, s: SequenceState) -> None:
        """An ended request's last round is fenced: publish its partial page (a RESTORATION round with
        its snapshot lane is due; it is released at that round's fence) or release it now."""
        if not self._publishes(s):
            self._release(s)

    def _publishes(self, s: SequenceState) -> bool:
        page_tokens = self.config.page_tokens
        # NOTE: a continuation row is matched by its tokens alone, so a request with images (whose
        # sentinels are equal for every image) publishes none
        if not (self.snapshots and s.publish and self.cache.prefix_reuse and not s.cancelled and s.initialized
                and not s.request.generation.images
                and s.pages is not None and s.slot is not None and s.snapshot_row is None and s.restore_row is None
                and s.consumed % page_tokens and s.consumed <= len(s.known)
                and s.consumed // page_tokens < len(s.pages.pages)):
            return False
        row = self.rows.take()
        if row is None:
            return False
        s.snapshot_row, s.publishing = row, True
        self._snapshot_due.append(s)
        self._snapshotting += 1
        return True

    def _publish_continuation(self, s: SequenceState, row: int) -> None:
        """The snapshot round of an ended request is fenced: its row holds its partial page; publish it
        under its complete pages' chain key and the partial page's tokens."""
        assert s.pages is not None
        page_tokens = self.config.page_tokens
        s.pages.publish(s.known, s.consumed, content_of(s))  # keyed already, at their fences
        count = s.consumed // page_tokens
        parent = s.pages.keys[count - 1] if count else b""
        tokens = s.known[count * page_tokens:s.consumed]
        if self.rows.publish(row, parent, tokens):
            self.counters.snapshots_published += 1
            if self.cache.host.pages:  # a copy the host tier held is stale now: the row is the continuation
                self.cache.host.discard(self.cache.continuation_key(parent, tokens))

    def _offload_continuation(self, entry) -> None:
        """`entry`, a published continuation evicted for its row, moves to the host tier where it has pages."""
        if self.cache.offload_continuation(entry.row, entry.parent, entry.tokens):
            self.counters.continuations_offloaded += 1

    def released(self) -> list[str]:
        """Cancelled requests whose resources have come back since the last call."""
        out, self._released = self._released, []
        return out

    def holds(self, request_id: str) -> bool:
        """The scheduler still knows the request (queued, running, or waiting for its last fence)."""
        return request_id in self._all

    def reused_prompt_tokens(self, request_id: str) -> int:
        s = self._all.get(request_id)
        return 0 if s is None else s.reused_prompt_tokens

    # ------------------------------------------------------------------------------------ state

    @property
    def pending(self) -> int:
        return len(self._pending) + len(self._readmit)

    def residency(self) -> Residency:
        """A snapshot of the requests, slots and pages held now (see `Residency`)."""
        return Residency(slots=self.config.max_active, free_slots=tuple(self._free_slots),
                         requests=tuple(sorted(self._all)), pending=len(self._pending),
                         readmitting=len(self._readmit), running=len(self._running), feedback=self._feedback,
                         pages=self.cache.gauges(), referenced_pages=self.cache.referenced(),
                         continuation_rows=self.rows.in_use - self.rows.published_rows,
                         snapshots=sum(1 for v in self._readmit if v.snapshot is not None),
                         published_continuations=self.rows.published_rows)

    @property
    def active(self) -> int:
        return len(self._running)

    # ------------------------------------------------------------------------------------ slots and pages

    def _admit(self) -> None:
        while self._free_slots and (self._readmit or self._pending):
            s = self._readmit[0] if self._readmit else self._pending[0]
            snapshot = s.snapshot
            hit = host_hit = None
            if snapshot is not None:  # its checkpoints are held: no lookup
                pages = SequencePages.adopt(self.cache, snapshot.pages, snapshot.keys)
                reused = len(snapshot.pages) * self.config.page_tokens
            else:
                limit = len(s.known) - 1
                if (s.request.prompt_logprobs is not None
                        and s.scored < len(s.request.generation.prompt_token_ids) - 1):
                    limit = min(limit, s.scored)  # positions whose scores are still owed are recomputed, scored
                images = s.request.generation.images
                match = self.cache.lookup(s.known, limit=limit, content=content_of(s))
                if images:
                    match = self._atomic_spans(match, images)
                pages = SequencePages(self.cache, match)
                reused = match.tokens
                # a published continuation of the matched pages that the known tokens extend: in a row, or
                # evicted from its row into the host tier (continuation rows are matched by tokens alone,
                # so a request with images takes none)
                parent = match.keys[-1] if match.keys else b""
                if self.snapshots and self.rows.published_rows and not images:
                    hit = self.rows.match(parent, s.known, match.tokens, limit)
                if hit is None and self.snapshots and self.cache.host.pages and not images:
                    host_hit = self.cache.host_continuation(parent, s.known, match.tokens, limit)
            # Room for the whole known history, plus a page of growth for each running request.
            need = pages.shortfall(len(s.known) + 1)
            headroom = len(self._running)
            if self._running and need + headroom > self.cache.available:
                if snapshot is None:
                    pages.release()
                    if hit is not None:
                        self.rows.unpin(hit.row)
                return  # a snapshot keeps its checkpoints' references while it waits
            store_slots = ()
            if s.request.generation.images:
                taken = self.feature_slots.allocate(s.order, len(s.request.generation.images))
                if taken is None:  # they come back with another request's slot
                    if snapshot is None:
                        pages.release()
                        if hit is not None:
                            self.rows.unpin(hit.row)
                    return
                store_slots = taken
            consumed = reused
            if snapshot is not None:
                s.snapshot = None
                consumed = self._restore_into(s, pages, snapshot)
            elif hit is not None:
                restored = self._restore_continuation(s, pages, hit.row, reused + len(hit.tokens))
                consumed = reused = restored
            elif host_hit is not None:
                consumed = reused = self._readmit_continuation(pages, *host_hit)
            if self._readmit and self._readmit[0] is s:
                self._readmit.pop(0)
                self.counters.readmissions += 1
                self.counters.recomputed_tokens += max(s.preempted_at - consumed, 0)
            else:
                self._pending.popleft()
                self.counters.started += 1
                self.counters.prompt_tokens += len(s.request.generation.prompt_token_ids)
                s.reused_prompt_tokens = min(reused, len(s.request.generation.prompt_token_ids))
            if snapshot is None:
                self.counters.prefix_lookups += 1
            self.counters.reused_tokens += reused  # a snapshot's checkpoints too (served, not recomputed)
            s.slot = self._free_slots.pop()
            # A slot's generations count per slot: what the device holds of another slot's row says
            # nothing of this one's, so the first round here rewrites the whole row.
            s.table_generation = s.table_entries = -1
            self._slot_generations[s.slot] += 1
            s.generation = self._slot_generations[s.slot]
            s.pages, s.consumed, s.initialized, s.admitted = pages, consumed, False, True
            s.admitted_known = len(s.known)
            if store_slots:
                s.images = AdmittedImages(s.request.generation.images, store_slots, self.config.image_slot_rows,
                                          len(s.request.generation.prompt_token_ids), consumed)
            self._run(s)

    def _atomic_spans(self, match: PrefixMatch, images) -> PrefixMatch:
        """The matched prefix cut to its longest page-aligned part that splits no image span (spans are
        atomic: a reused prefix never ends inside one); the pages past it are released."""
        page_tokens = self.config.page_tokens
        tokens = match.tokens
        while prefix_boundary(images, tokens) < tokens:
            tokens = prefix_boundary(images, tokens) // page_tokens * page_tokens
        count = tokens // page_tokens
        if count == len(match.pages):
            return match
        self.cache.release(match.pages[count:])
        return PrefixMatch(match.pages[:count], match.keys[:count], tokens)

    def _restore_into(self, s: SequenceState, pages: SequencePages, snapshot: Snapshot) -> int:
        """Where a readmitted request with `snapshot` resumes: its endpoint when the snapshot has no
        continuation row, or when a private page for the partial one can be had (the row is then
        restored into it by a RESTORATION round before the request continues); else the end of its
        checkpoints (the partial page is recomputed, counted)."""
        checkpoints = len(snapshot.pages) * self.config.page_tokens
        if snapshot.row is None:
            return snapshot.endpoint
        try:
            pages.reserve(snapshot.endpoint + 1)
        except PagesShort:
            self.rows.give(snapshot.row)
            if self.config.recurrent_state:  # the state is in the row alone: recompute from position 0
                pages.release()
                return 0
            return checkpoints
        s.restore_row = snapshot.row
        return snapshot.endpoint

    def _restore_continuation(self, s: SequenceState, pages: SequencePages, row: int, endpoint: int) -> int:
        """Where an admitted request matching the published continuation in `row` starts: `endpoint`
        when a private page for it can be had (a RESTORATION round restores the row into it first),
        else the end of its matched pages (the row is unpinned)."""
        start = pages.reserved_tokens
        try:
            pages.reserve(endpoint + 1)
        except PagesShort:
            self.rows.unpin(row)
            return start
        s.restore_row, s.shared_restore = row, True
        return endpoint

    def _readmit_continuation(self, pages: SequencePages, key: bytes, endpoint: int) -> int:
        """Where an admitted request matching the host tier's continuation `key` starts: `endpoint` when
        a private page for it can be had (the host page is copied straight into it before the next
        round: a host page is a page record of every cache plane, so no RESTORATION round runs), else
        the end of its matched pages (the entry stays in the tier)."""
        start = pages.reserved_tokens
        host_page = self.cache.host.take(key)  # out of the tier first: the reservation's offloads cannot evict it
        try:
            pages.reserve(endpoint + 1)
        except PagesShort:
            self.cache.host.untake(key, host_page)
            return start
        self.cache.readmit_into(pages.pages[endpoint // self.config.page_tokens], host_page)
        self.counters.continuation_hits += 1
        self.counters.continuations_readmitted += 1
        return endpoint

    def _give_restore_row(self, s: SequenceState) -> None:
        """The row `s` was to restore from goes back: its own snapshot's row to the storage, a published
        continuation's pin released."""
        assert s.restore_row is not None
        if s.shared_restore:
            self.rows.unpin(s.restore_row)
        else:
            self.rows.give(s.restore_row)
        s.restore_row, s.shared_restore = None, False

    def _reserve(self, s: SequenceState, tokens: int, keep: list[tuple[SequenceState, int]]) -> bool:
        """Pages for positions [0, tokens) of `s`, preempting younger idle requests (not in the cohort
        being formed, `keep`) if needed, then giving up younger preempted requests' snapshots."""
        assert s.pages is not None
        if tokens <= len(s.pages.pages) * self.config.page_tokens:
            return True  # the pages held already cover the chunk (every decode step but one a page)
        checked = False
        members: set[int] | None = None  # id() of keep's sequences, built only when pages run short
        while True:
            try:
                s.pages.reserve(tokens)
                return True
            except PagesShort:
                if self._snapshotting:
                    return False  # a preemption awaits its snapshot round's fence: its pages come back then
                if members is None:
                    members = {id(v) for v, _ in keep}
                victims = [v for v in self._running if v.order > s.order and v.in_flight == 0
                           and id(v) not in members and v is not s]
                held = [v for v in self._readmit if v.snapshot is not None and v.order > s.order]
                if not victims and not held:
                    return False
                if not checked:  # preempting them all must make room, else none is preempted for nothing
                    holders = [v.pages.pages for v in victims if v.pages] + [v.snapshot.pages for v in held]
                    room = self.cache.available + self.cache.freed_by(holders)
                    if room < s.pages.shortfall(tokens):
                        return False
                    checked = True
                if victims:
                    if self._preempt_youngest(max(victims, key=lambda v: v.order)):
                        return False  # its snapshot round goes first; this lane waits for the fence
                else:
                    self._evict_snapshot(max(held, key=lambda v: v.order))

    def _preempt_youngest(self, v: SequenceState) -> bool:
        """Preempt `v`; True when its partial page must first be snapshotted into a continuation row
        (its RESTORATION round is due, and its pages return at that round's fence)."""
        assert v.pages is not None
        if v.restore_row is not None and v.shared_restore:  # a published continuation, not restored yet
            self._give_restore_row(v)
            self._preempt(v)
            return False
        if v.restore_row is not None:  # not restored yet: the row still holds its partial page
            row, v.restore_row = v.restore_row, None
            self._preempt(v, row)
            return False
        if self.snapshots and (v.consumed % self.config.page_tokens or self.config.recurrent_state):
            row = self.rows.take()
            if row is not None:
                v.snapshot_row = row
                self._snapshot_due.append(v)
                self._snapshotting += 1
                return True
        self._preempt(v)
        return False

    def _preempt(self, s: SequenceState, row: int | None = None) -> None:
        """Release the request's slot and pages (with snapshots: keep its checkpoints and the
        continuation `row` holding its partial page, if any) and queue it for readmission."""
        assert s.pages is not None and s.slot is not None
        s.preempted_at = s.consumed
        if self.snapshots and (row is not None or not self.config.recurrent_state):
            page_tokens = self.config.page_tokens
            s.pages.publish(s.known, s.consumed, content_of(s))  # the complete pages are keyed: immutable checkpoints
            count = s.consumed // page_tokens
            kept, keys = s.pages.keep(count)
            endpoint = s.consumed if row is not None else count * page_tokens
            s.snapshot = Snapshot(endpoint, kept, keys, row)
        else:
            s.pages.release()
        self._free_slot(s)
        s.pages, s.consumed, s.submitted, s.unknown, s.initialized = None, 0, 0, 0, False
        self._stop_running(s)
        bisect.insort(self._readmit, s, key=lambda v: v.order)
        self.counters.preemptions += 1

    def _evict_snapshot(self, s: SequenceState) -> None:
        """Give up a waiting request's snapshot: its checkpoints go to the cache (matchable until
        evicted), its row back to the storage; its readmission recomputes what it cannot match."""
        snapshot = s.snapshot
        assert snapshot is not None
        s.snapshot = None
        self.cache.release(snapshot.pages)
        if snapshot.row is not None:
            self.rows.give(snapshot.row)
        self.counters.snapshots_evicted += 1

    def _run(self, s: SequenceState) -> None:
        bisect.insort(self._running, s, key=lambda v: v.order)
        self._feedback += int(s.request.needs_feedback)

    def _stop_running(self, s: SequenceState) -> None:
        self._running.remove(s)
        self._feedback -= int(s.request.needs_feedback)

    def _free_slot(self, s: SequenceState) -> None:
        if s.images is not None:  # its feature slots go with its request slot
            self.feature_slots.release(s.order)
            s.images = None
        if s.slot is not None:
            self._free_slots.append(s.slot)
            self._free_slots.sort(reverse=True)
            s.slot = None

    def _release(self, s: SequenceState) -> None:
        """Return the request's slot, pages, snapshot and rows and forget it (the fence has passed)."""
        if s.snapshot_row is not None:  # preemption cancelled with it (the request ended, or the round failed)
            self.rows.give(s.snapshot_row)
            s.snapshot_row = None
            self._snapshotting -= 1
            if s in self._snapshot_due:
                self._snapshot_due.remove(s)
        if s.restore_row is not None:
            self._give_restore_row(s)
        s.publishing = False
        if s.snapshot is not None:
            self.cache.release(s.snapshot.pages)
            if s.snapshot.row is not None:
                self.rows.give(s.snapshot.row)
            s.snapshot = None
        if s.pages is not None:
            s.pages.release()
            s.pages = None
        self._free_slot(s)
        if s in self._running:
            self._stop_running(s)
        if s in self._readmit:
            self._readmit.remove(s)
        if not s.admitted and s in self._pending:  # (an admitted one left the deque: no scan of a long queue)
            self._pending.remove(s)
        self._all.pop(s.request.request_id, None)
        if s.cancelled:
            self._released.append(s.request.request_id)
