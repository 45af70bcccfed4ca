"""The sequential reference engine (host side, NumPy only): the executable specification of serving.

    engine = ReferenceEngine.load(core)                  # an opened core or a PreparedCore
    for token in engine.generate(request): ...           # sampled ids, EOS included, then stop

Owns running one request at a time through a core's captured programs exactly as its contract
declares: INITIALIZATION at admission, PREFILL chunks (each in the smallest token capacity that
holds it), then one-token DECODE rounds. Every round is one plan on the `ReferenceExecutor`
(executor.py: pack with the shared packer, interpret the program) whose completion rows are checked
by the one validator, `helios.runtime.completion.validate_round` (status, submission sequence,
generation echo, emitted count, consumed endpoint, sampled id within the vocabulary, no draft
cursor, reserved field -1), before a token is accepted.

Cache planes get `pages` pages at load (default: enough for one request's whole context). Admission
reserves a request's pages before its first id; closing or dropping its stream cancels it and
returns them. Lanes are addressed by physical request slot: a lane's completion row is its slot's
row. Requests in distinct slots may interleave (a worker pulling one token from each in turn); every
round still runs one lane alone.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator, Sequence

from helios.contract import PreparedContract, StartupOptions
from helios.core.source import CoreSource
from helios.engine.catalog import GraphCatalog
from helios.engine.feature_slots import FeatureSlots
from helios.engine.program_choice import (
    AcceptanceEstimate,
    CopiedChoice,
    ProgramChoice,
    ProposalSources,
    ServedCosts,
)
from helios.errors import HeliosError
from helios.proto import contract_pb2, manifest_pb2
from helios.reference.cache import PageAllocator, pages_for
from helios.reference.executor import EngineLoadError, LoadedGraph, ReferenceExecutor
from helios.runtime.completion import Completion, CompletionInvalid, SpeculativeRound, validate_round
from helios.runtime.engram import history_tokens
from helios.runtime.history_drafting import HistoryIndex, copied_outcome
from helios.runtime.images import AdmittedImages
from helios.runtime.interface import GrammarMatcher
from helios.runtime.packing import LaneInput
from helios.runtime.proposal_masks import constrained_proposal
from helios.runtime.request import GenerationRequest
from helios.runtime.rounds import single_round
from helios.runtime.scores import (
    PromptScoreEvent,
    prompt_score_event,
    prompt_score_width,
    score_refusal,
    validate_prompt_scores,
)
from helios.runtime.startup import PhaseClock, StartupPhase

C, M = contract_pb2, manifest_pb2

__all__ = ["AdmissionRejected", "Completion", "CompletionInvalid", "EngineLoadError", "ReferenceEngine"]


class AdmissionRejected(HeliosError):
    """The request lies outside the core's prepared capacities or vocabulary."""


class ReferenceEngine:
    """Runs requests sequentially over a core's programs with NumPy."""

    def __init__(self, serving: contract_pb2.ServingContract, manifest: manifest_pb2.ExecutionManifest,
                 prepared: PreparedContract, executor: ReferenceExecutor, *,
                 speculative_width: int | None = None, history_drafting: bool = False,
                 adaptive_speculation: bool = False, clock: Callable[[], float] = time.monotonic) -> None:
        self.serving = serving
        self.manifest = manifest
        self.contract = prepared  # the PreparedContract
        self.executor = executor
        self.startup: tuple[StartupPhase, ...] = executor.startup  # the load's phases (`load`: verify, weights, cache, tuning)
        self.graphs = executor.graphs
        self.buffers = executor.buffers
        self.allocator = PageAllocator(executor.pages)
        self.kept = executor.kept  # per round of the last request: copies of the `keep` tensors
        self.kept_graphs = executor.kept_graphs  # the graph of each kept round
        # Engram tables (docs/engram.md): the known tokens each lane carries before its first
        self.engram_history = history_tokens(serving)
        self._generations = [0] * prepared.max_concurrency
        self._active_slots: set[int] = set()
        # Image feature slots (docs/vision.md): each request slot's images take slots of the feature store
        vision = serving.model.vision
        self.images_per_request = vision.feature_slots
        self.feature_slots = FeatureSlots(prepared.max_concurrency * vision.feature_slots)
        self._slot_rows = vision.features_per_window
        self._sequence = 0
        self._by_operation: dict[int, list[LoadedGraph]] = {}
        for graph in self.graphs.values():
            self._by_operation.setdefault(graph.operation, []).append(graph)
        for operation in (C.OPERATION_INITIALIZATION, C.OPERATION_PREFILL, C.OPERATION_DECODE):
            if operation not in self._by_operation:
                raise EngineLoadError(f"the core has no {C.Operation.Name(operation)} graph")
        for group in self._by_operation.values():
            group.sort(key=lambda g: (g.packed_token_capacity, g.batch_capacity))
        # Speculation: each round of a decoding request runs the one-lane SPECULATIVE graph of the
        # selected width (None: plain decoding, also on a speculative core).
        # SPECULATIVE rounds so far: proposals offered and accepted, and of them the copied ones
        self.speculative_counts = {"rounds": 0, "offered": 0, "accepted": 0, "copied_offered": 0,
                                   "copied_accepted": 0, "plain_choices": 0, "fallback_choices": 0,
                                   "explored_choices": 0}
        # per draft position k (lanes offered proposal k, lanes that accepted it) and rounds per width W
        self.position_counts: dict[str, dict[int, int]] = {"offered": {}, "accepted": {}, "rounds_by_width": {}}
        self._speculative_checks = {g.name: SpeculativeRound.of(g) for g in prepared.graphs
                                    if g.speculative is not None}  # what every SPECULATIVE graph's rows answer to
        self.speculative: LoadedGraph | None = None
        if speculative_width is not None:
            widths = sorted({g.speculative.verify_tokens for g in prepared.graphs if g.speculative is not None})
            if speculative_width not in widths:
                raise EngineLoadError(f"speculative width {speculative_width} is not captured by the core "
                                      f"(captured widths: {widths or 'none'})")
            chosen = min((g for g in prepared.graphs if g.speculative is not None
                          and g.speculative.verify_tokens == speculative_width), key=lambda g: g.batch_capacity)
            self.speculative = self.graphs[chosen.name]
            self._speculative_graph = chosen
        # Served rounds' wall time of every graph (helios/engine/program_choice.py, ServedCosts), as
        # the batching scheduler keeps it: a round from its forming to its validated completion.
        self.catalog = GraphCatalog.from_graphs(prepared.graphs)
        self.served = ServedCosts()
        self._clock = clock
        # Adaptive choice (helios/engine/program_choice.py): each round of a decoding request runs
        # DECODE or the one-lane SPECULATIVE graph of the width of the highest expected rate, from the
        # executor's measured round costs, refreshed by the served rounds' wall time, and the request's
        # observed acceptance; `speculative_width` is the fallback while costs are unknown.
        self.choice: ProgramChoice | None = None
        self.pooled = AcceptanceEstimate()  # acceptance pooled over every completed speculative round
        self._one_lane = {}  # W -> the one-lane SPECULATIVE graph contract of that width
        for g in sorted((g for g in prepared.graphs if g.speculative is not None), key=lambda g: g.batch_capacity):
            self._one_lane.setdefault(g.speculative.verify_tokens, g)
        if adaptive_speculation and self.speculative is not None:
            # the one-lane graphs a round of this engine runs: DECODE and each width's SPECULATIVE
            one_lane = [min((g for g in prepared.graphs if g.operation == C.OPERATION_DECODE),
                            key=lambda g: (g.batch_capacity, g.packed_token_capacity)).name,
                        *(g.name for g in self._one_lane.values())]
            self.choice = ProgramChoice(self.catalog, executor.round_costs(one_lane), served=self.served)
        # a grammar-constrained request speculates over its copied proposals only, under their
        # per-position grammar masks: with history drafting, where every program drawing proposals that
        # a round may run takes them (a round of one that does not decodes the request plainly)
        programs = [] if self.speculative is None else [self._speculative_graph, *self._one_lane.values()]
        self._grammar_masks = history_drafting and bool(programs) and all(
            _takes_masks(g) for g in programs if g.speculative.draft_tokens > 0)
        # History drafting: the speculative rounds also carry proposals copied from the request's tokens
        # (load-time selection checked the graphs take them: PreparedContract.select); an unconstrained
        # request takes its copied run or its learned draft's proposals as the batching scheduler does
        # (CopiedChoice)
        self.history_drafting = history_drafting
        self.copied_choice = CopiedChoice()
        if history_drafting:
            prepared.select(StartupOptions(speculative_width=speculative_width or 1, history_drafting=True))
    # ------------------------------------------------------------------------------------------ load

    @classmethod
    def load(cls, core: CoreSource, *, pages: int | None = None, keep: Sequence[str] = (),
             speculative_width: int | None = None, history_drafting: bool = False,
             adaptive_speculation: bool = False) -> ReferenceEngine:
        """Load `core` (anything with `.contract`, `.manifest` and `.read(id)`); `keep` names program
        tensors (e.g. "logits") whose values are copied into `kept` after every round;
        `speculative_width` decodes with the core's SPECULATIVE graphs of that width, and
        `history_drafting` adds proposals copied from each request's own tokens to those rounds, and
        `adaptive_speculation` chooses each round's program from measured costs (`speculative_width`
        is then the fallback)."""
        serving, manifest = core.contract, core.manifest
        clock = PhaseClock()
        with clock.phase("verify"):
            prepared = PreparedContract.decode(serving, manifest)
        if pages is None:
            pages = pages_for(prepared.context_tokens, prepared.cache.page_tokens)
        executor = ReferenceExecutor.load(core, pages=pages, keep=keep)
        engine = cls(serving, manifest, prepared, executor, speculative_width=speculative_width,
                     history_drafting=history_drafting, adaptive_speculation=adaptive_speculation)
        # the contract's decode and the executor's verify phase are one phase
        decode = clock.phases[0].seconds
        engine.startup = tuple(StartupPhase(p.name, p.seconds + decode) if p.name == "verify" else p
                               for p in executor.startup)
        return engine

    # ------------------------------------------------------------------------------------------ rounds

    def run_round(self, graph_name: str, lanes: Sequence[LaneInput], *,
                  started: float | None = None) -> Sequence[Completion]:
        """One round of `lanes` in `graph_name` on the executor, its rows validated; its wall time from
        `started` (the clock when the round was formed; default now) to its validation is a served
        round of the graph (`served`)."""
        if started is None:
            started = self._clock()
        # The transport numbers every submission, one that fails before the program runs included, so
        # the next rounds' completions still answer the sequence they were numbered with.
        self._sequence += 1
        graph = self.graphs.get(graph_name)
        if graph is None:
            raise EngineLoadError(f"graph {graph_name!r} is not loaded (loaded: {sorted(self.graphs)})")
        plan = single_round(graph_name, graph.operation, lanes, sequence=self._sequence)
        try:
            self.executor.submit(plan)
            rows = self.executor.collect(plan)
            self.validate_round(graph_name, plan.lanes, rows)
        except BaseException:
            self.served.failed(self._clock())  # a failed round is not a cost observation
            raise
        self.served.completed(graph_name, started, self._clock())
        return rows

    def validate_round(self, graph_name: str, lanes: Sequence[LaneInput], rows: Sequence[Completion]) -> None:
        """Reject completion rows that disagree with the round they answer, before any token is accepted
        (the shared rules of helios.runtime.completion: status, sequence, generation echo, emitted,
        consumed endpoint within the lane's pages, no draft cursor, reserved -1, sampled id in range)."""
        check = self._speculative_checks.get(graph_name)
        validate_round(graph_name, lanes, rows, sequence=self._sequence,
                       sampled_tokens=self.contract.vocabulary.sampled_tokens,
                       page_tokens=self.contract.cache.page_tokens, frame=0, speculative=check)

    def graph_for(self, operation: int, *, tokens: int, lanes: int = 1) -> LoadedGraph:
        """The smallest graph of `operation` holding `lanes` lanes and `tokens` tokens (else the largest)."""
        candidates = [g for g in self._by_operation.get(operation, []) if g.batch_capacity >= lanes]
        if not candidates:
            raise AdmissionRejected(f"no {C.Operation.Name(operation)} graph holds {lanes} lanes")
        fitting = [g for g in candidates if g.packed_token_capacity >= tokens]
        return fitting[0] if fitting else candidates[-1]

    # ------------------------------------------------------------------------------------------ requests

    def _admit(self, request: GenerationRequest) -> None:
        limit = self.contract.input_vocabulary.input_tokens
        bad = [t for t in request.prompt_token_ids if t >= limit]
        if bad:
            raise AdmissionRejected(f"prompt token {bad[0]} lies outside the input vocabulary [0, {limit})")
        if len(request.prompt_token_ids) >= self.contract.context_tokens:
            raise AdmissionRejected(f"the prompt's {len(request.prompt_token_ids)} tokens leave no room in the "
                                    f"context of {self.contract.context_tokens} tokens")
        reach = self._reach(request)
        needed = pages_for(reach, self.contract.cache.page_tokens)
        if needed > self.allocator.free:
            raise AdmissionRejected(f"the request reaches {reach} tokens: {needed} pages, "
                                    f"{self.allocator.free} of the cache's {self.allocator.pages} are free")

    def _reach(self, request: GenerationRequest) -> int:
        """The positions a request's pages must hold: prompt and output within the context, plus, under
        speculation, the draft passes of a round past its last token (they write the draft's history
        from the pending token on)."""
        reach = min(len(request.prompt_token_ids) + request.max_tokens, self.contract.context_tokens)
        if self.speculative is not None:
            reach = min(reach + self._draft_passes(), self.contract.cache.page_tokens
                        * pages_for(self.contract.context_tokens, self.contract.cache.page_tokens))
        return reach

    def _draft_passes(self) -> int:
        """Positions the draft writes from a lane's pending token on: the selected width's graph's, or
        under adaptive choice the most of any width's."""
        graphs = self._one_lane.values() if self.choice is not None else (self._speculative_graph,)
        return max(max(g.speculative.draft_tokens, min(g.speculative.draft_tokens + 1, g.speculative.verify_tokens))
                   for g in graphs)

    def _program(self, acceptance: AcceptanceEstimate, room: int):
        """The speculative graph contract a round of a request runs (None: plain DECODE): the
        selected width's, or under adaptive choice the one of the highest expected rate (the fallback
        width's while costs or acceptance are unknown)."""
        if self.choice is None:
            return self._speculative_graph
        # the batching scheduler's decision (ProgramChoice.decide); None: acceptance unknown, or costs
        # unknown or stale, so the configured width runs
        chosen = self.choice.decide(self.pooled, [acceptance], [room])
        if chosen is None:
            self.speculative_counts["fallback_choices"] += 1
            return self._speculative_graph
        if not chosen.speculative:
            self.speculative_counts["plain_choices"] += 1
            # a one-token stint (it chooses again after this token): nothing is observed meanwhile, the
            # pooled evidence and the request's own age as the scheduler's do for each token of a stint
            self.pooled.decay(self.choice.plain_decay(1))
            acceptance.decay(self.choice.plain_decay(1))
            return None
        self.speculative_counts["explored_choices"] += chosen.explores
        return self._one_lane[chosen.width]

    def generate(self, request: GenerationRequest, *, slot: int = 0,
                 grammar_mask: Callable[[], Sequence[int]] | None = None, grammar: GrammarMatcher | None = None,
                 prompt_logprobs: int | None = None,
                 on_scores: Callable[[PromptScoreEvent], None] | None = None,
                 speculation: bool = True) -> Iterator[int]:
        """Sampled ids one at a time: stops after an EOS id (yielded) or at max_tokens.

        Admission happens here, before the first id: the request's pages (prompt + max_tokens, within
        the context) are reserved, or AdmissionRejected is raised. Closing the returned iterator (or
        exhausting it) cancels the request and returns its pages; requests in distinct slots may
        interleave, each round still runs alone. With `grammar_mask`, each sampling round's
        GRAMMAR_MASK row is what it returns when that round is packed (the caller advances its grammar
        with every yielded id before asking for the next). With `grammar` (the request's matcher, the
        caller advancing it the same way) the mask is `grammar.mask()`, and under history drafting the
        request also speculates over its copied proposals, each target row under its position's mask
        (computed on a fork of `grammar`). With `prompt_logprobs` (alternatives a
        token), the prompt runs through SCORED_PREFILL graphs and `on_scores` receives each round's
        validated `PromptScoreEvent` before the first id is yielded. With `speculation` False (the
        request opted out) it decodes plainly on a speculative engine."""
        self._admit(request)
        if prompt_logprobs is not None:
            refusal = score_refusal(prompt_logprobs, prompt_score_width(self.contract))
            if refusal is not None:
                raise AdmissionRejected(refusal)
        if not 0 <= slot < self.contract.max_concurrency:
            raise AdmissionRejected(f"slot {slot} outside the core's {self.contract.max_concurrency} slots")
        if slot in self._active_slots:
            raise AdmissionRejected(f"slot {slot} already holds a request")
        images = None
        if request.images:
            if len(request.images) > self.images_per_request:
                raise AdmissionRejected(f"{len(request.images)} images exceed the core's {self.images_per_request} "
                                        "image feature slots a request")
            if prompt_logprobs is not None:
                raise AdmissionRejected("prompt scores of a prompt with images are not served")
            # the slot is free, so its share of the feature store is too
            store_slots = self.feature_slots.allocate(slot, len(request.images))
            assert store_slots is not None
            images = AdmittedImages(request.images, store_slots, self._slot_rows, len(request.prompt_token_ids), 0)
        try:
            pages = self.allocator.allocate(pages_for(self._reach(request), self.contract.cache.page_tokens))
        except BaseException:
            self.feature_slots.release(slot)
            raise
        self._active_slots.add(slot)
        self._generations[slot] += 1
        self.kept.clear()
        self.kept_graphs.clear()

        def release() -> None:
            self.allocator.release(pages)
            self.feature_slots.release(slot)
            self._active_slots.discard(slot)

        scoring = None if prompt_logprobs is None else (prompt_logprobs, on_scores or (lambda event: None))
        if grammar is not None and grammar_mask is None:
            grammar_mask = grammar.mask
        rounds = self._rounds(request, slot, self._generations[slot], tuple(pages), grammar_mask, scoring,
                              speculation, grammar, images)
        return _Generation(rounds, release)

    def _rounds(self, request: GenerationRequest, slot: int, generation: int, pages: tuple[int, ...],
                grammar_mask: Callable[[], Sequence[int]] | None = None,
                scoring: tuple[int, Callable[[PromptScoreEvent], None]] | None = None,
                speculation: bool = True, grammar: GrammarMatcher | None = None,
                images: AdmittedImages | None = None) -> Iterator[int]:
        eos = set(request.eos_token_ids or self.contract.frontend.eos_token_ids)
        prompt = tuple(request.prompt_token_ids)

        def lane(consumed: int, tokens: tuple[int, ...], prompt_in_round: int, samples: bool,
                 limit: int = 0, copied: tuple[int, ...] = (),
                 masks: tuple[tuple[int, ...], ...] | None = None) -> LaneInput:
            # a lane with per-position masks (a constrained speculative lane) allows every token in its
            # lane mask: each target row is masked by its position's
            masked = grammar_mask is not None and samples and masks is None
            before = tuple(history[max(0, consumed - self.engram_history):consumed]) if self.engram_history else ()
            return LaneInput(slot=slot, generation=generation, consumed=consumed, tokens=tokens,
                             prompt_tokens_in_round=prompt_in_round, samples=samples, page_ids=pages,
                             seed=request.sampling.seed, sampling=request.sampling, output_limit=request.max_tokens,
                             eos_ids=tuple(sorted(eos)), prompt_token_ids=prompt,
                             grammar_mask=tuple(grammar_mask()) if masked else None,  # type: ignore[misc]
                             speculative_limit=limit, copied=copied, candidate_masks=masks, history=before)

        history = list(prompt)  # the prompt, then every emitted token (history drafting's source)
        index = HistoryIndex() if self.history_drafting else None
        acceptance = AcceptanceEstimate()  # the request's completed speculative rounds (adaptive choice)
        sources = ProposalSources()  # its copied proposals' acceptance and its learned draft's (history drafting)
        init = self._by_operation[C.OPERATION_INITIALIZATION][0]
        self.run_round(init.name, [lane(0, (), 0, False)])
        consumed, emitted = 0, 0
        pending: int | None = None
        while consumed < len(prompt):
            remaining = len(prompt) - consumed
            # a chunk scoring prompt tokens (position p scores token p + 1) runs a SCORED_PREFILL graph
            scored = scoring is not None and consumed < len(prompt) - 1
            operation = C.OPERATION_SCORED_PREFILL if scored else C.OPERATION_PREFILL
            graph = self.graph_for(operation, tokens=remaining)
            size = min(remaining, graph.packed_token_capacity)
            image_fields = {}
            if images is not None:  # each PREFILL round encodes the next image; no chunk passes one not encoded
                room = images.room(consumed, encodes=images.pending)
                size = size if room is None else min(size, room)
                image_fields = {"image_context": images.context,
                                "image": images.encode() if images.pending else None}
            chunk = prompt[consumed: consumed + size]
            last = consumed + len(chunk) == len(prompt)
            round_lane = lane(consumed, chunk, len(chunk), last)
            if image_fields:
                round_lane = dataclasses.replace(round_lane, **image_fields)
            rows = self.run_round(graph.name, [round_lane])
            (row,) = rows
            if scored:
                assert scoring is not None
                scores = getattr(rows, "scores", None)
                validate_prompt_scores(graph.name, scores, len(chunk), self.contract.vocabulary.sampled_tokens)
                count = min(len(chunk), len(prompt) - 1 - consumed)
                scoring[1](prompt_score_event(scores, 0, consumed + 1, count, scoring[0]))  # type: ignore[arg-type]
            consumed += len(chunk)
            if last:
                pending = row.sampled_id
        while pending is not None:
            yield pending
            formed = self._clock()  # the next round is formed from here (served wall time)
            history.append(pending)
            emitted += 1
            if (pending in eos and not request.ignore_eos) or emitted >= request.max_tokens:
                return
            if consumed + 1 >= self.contract.context_tokens:
                return  # the context is full: the next token would have no position
            constrained = grammar_mask is not None
            limit = 0
            if speculation:
                limit = self._speculative_limit(request, emitted, consumed, len(pages),
                                                constrained and not (grammar is not None and self._grammar_masks))
            program = self._program(acceptance, limit) if limit else None
            masks = None
            if program is not None:
                spec = program.speculative
                limit = min(limit, spec.lane_token_limit)
                copied = (index.propose(history, min(limit - 1, spec.draft_tokens), drafted=not constrained)
                          if index is not None else ())
                if copied and not constrained and not self.copied_choice.copies(sources):
                    copied = ()  # its learned draft has done better than its copies: the draft proposes
                    self.copied_choice.skipped()
                if constrained:  # the copied run its grammar allows, each row under its position's mask
                    assert grammar is not None  # the caller advanced it with every yielded id
                    copied, masks = constrained_proposal(grammar, copied, eos)
                    limit = min(limit, len(copied) + 1)
                    if not copied or not _takes_masks(program):  # nothing to verify: decode plainly
                        program = None
            if program is not None:
                (row,) = self.run_round(program.name, [lane(consumed, (pending,), 0, True, limit, copied, masks)],
                                        started=formed)
                counts = self.speculative_counts
                counts["rounds"] += 1
                counts["offered"] += row.offer - 1
                counts["accepted"] += row.accepted_drafts
                positions = self.position_counts
                by_width = positions["rounds_by_width"]
                by_width[spec.verify_tokens] = by_width.get(spec.verify_tokens, 0) + 1
                for k in range(1, row.offer):
                    positions["offered"][k] = positions["offered"].get(k, 0) + 1
                    if k <= row.accepted_drafts:
                        positions["accepted"][k] = positions["accepted"].get(k, 0) + 1
                if row.offer > 1:
                    acceptance.observe(row.offer - 1, row.accepted_drafts)
                    self.pooled.observe(row.offer - 1, row.accepted_drafts)
                offered, accepted_copied = copied_outcome(copied, row.offer, row.accepted_drafts)
                counts["copied_offered"] += offered
                counts["copied_accepted"] += accepted_copied
                if self.history_drafting:
                    self.copied_choice.observe(sources, offered, accepted_copied, row.offer - 1 - offered,
                                               row.accepted_drafts - accepted_copied
                                               if accepted_copied == offered else 0)
                consumed += row.emitted  # the pending token and the accepted proposals
                *accepted, pending = row.tokens()
                for token in accepted:  # stops and the output limit hold inside an accepted run
                    yield token
                    history.append(token)
                    emitted += 1
                    if (token in eos and not request.ignore_eos) or emitted >= request.max_tokens:
                        return
                continue
            graph = self.graph_for(C.OPERATION_DECODE, tokens=1)
            (row,) = self.run_round(graph.name, [lane(consumed, (pending,), 0, True)], started=formed)
            consumed += 1
            pending = row.sampled_id

    def _speculative_limit(self, request: GenerationRequest, emitted: int, consumed: int, pages: int,
                           constrained: bool) -> int:
        """The target rows a speculative round may offer the request (0: decode plainly): within the
        program's lane limit, the output limit (every row may emit a token), the context (the last
        emitted token needs a position) and the pages (the draft passes write from the pending token
        on). A grammar-constrained request without per-position masks (`constrained`) decodes plainly:
        its mask is known one token ahead only."""
        if self.speculative is None or constrained:
            return 0
        if consumed + self._draft_passes() > pages * self.contract.cache.page_tokens:
            return 0
        room = min(request.max_tokens - emitted, self.contract.context_tokens - consumed - 1)
        if self.choice is not None:  # each width's lane limit applies once the program is chosen
            return max(0, room)
        return max(0, min(self._speculative_graph.speculative.lane_token_limit, room))


def _takes_masks(graph) -> bool:
    """Whether a speculative graph binds per-position grammar masks (CANDIDATE_GRAMMAR_MASKS)."""
    return any(b.source == C.VALUE_SOURCE_CANDIDATE_GRAMMAR_MASKS for b in graph.value_bindings)


class _Generation(Iterator[int]):
    """A request's token stream that returns its resources exactly once: when exhausted, when a
    round fails, when closed, or when dropped without being started."""

    def __init__(self, tokens: Iterator[int], release: Callable[[], None]) -> None:
        self._tokens = tokens
        self._release: Callable[[], None] | None = release

    def __iter__(self) -> _Generation:
        return self

    def __next__(self) -> int:
        if self._release is None:
            raise StopIteration
        try:
            return next(self._tokens)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        release, self._release = self._release, None
        if release is not None:
            self._tokens.close()  # type: ignore[attr-defined]
            release()

    def __del__(self) -> None:
        self.close()
