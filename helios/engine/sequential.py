"""The sequential model worker (host side): a `ModelRuntime` over any engine that turns a
`GenerationRequest` into a stream of sampled token ids (the reference runtime's worker).

Owns: `TokenEngine` (the engine seam: `generate(request) -> Iterator[int]`, EOS included; closing
the iterator cancels and releases its resources) and `SequentialRuntime`.

One worker thread owns the engine. Each loop it moves submitted requests from the ingress channel
into the pending deque (each holds at most `queue_capacity`; a full channel makes the server's
submitters wait, never refuses them), starts pending requests while fewer than `max_active` generate, then
runs one round: one token from every active request, in admission order. After each token it

    checks the id lies in the vocabulary -> reads the observation clock (timed requests only)
      -> `RequestProgress.accept` (grammar, EOS, output filter, output limit: progress.py) -> events

before that request's next round is submitted: the host-stop barrier (width one, one outstanding
round) holds for every request. The batching worker (worker.py) keeps the same per-token rules
(`RequestProgress`) over one cohort submission per round.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from helios.engine.progress import GrammarViolated, RequestProgress
from helios.runtime.events import Event, Failed, Rejected, Termination
from helios.runtime.interface import (
    DuplicateRequestId,
    EventStream,
    PreparedRequest,
    RuntimeMetrics,
    ThreadedModelRuntime,
)
from helios.runtime.limits import AdmissionLimits
from helios.runtime.request import GenerationRequest
from helios.runtime.scores import score_refusal


class TokenEngine(Protocol):
    def generate(self, request: GenerationRequest, *, slot: int) -> Iterator[int]:
        """Sampled ids of `request` in request slot `slot` (distinct among concurrent requests),
        EOS included; may raise one of the runtime's `rejections` before the first id. A
        constrained request is started with `grammar_mask=`, a callable the engine calls before each
        sampling round for that round's GRAMMAR_MASK words, and `grammar=`, the matcher itself
        (advanced by the worker with every id before the next is asked for), from whose forks an
        engine that speculates takes the per-position masks of copied proposals; a request that
        opted out of speculation with `speculation=False`."""
        ...


@dataclass(slots=True)
class _Active:
    request: PreparedRequest
    stream: EventStream
    progress: RequestProgress
    tokens: Iterator[int] | None = None
    slot: int | None = None
    cancelled: bool = False


@dataclass(frozen=True, slots=True)
class SequentialResidency:
    """What the sequential worker holds at one moment (a copy). Idle, it holds no request and every
    slot is free once."""

    slots: int  # request slots (max_active)
    free_slots: tuple[int, ...]  # the free list as held
    requests: tuple[str, ...]  # every request known: queued, pending, active, not yet finished
    active: int
    pending: int  # in the ingress channel and the pending deque


@dataclass(slots=True)
class _Counters:
    submitted: int = 0
    started: int = 0
    rejected: int = 0
    failed: int = 0
    finished: dict[str, int] = field(default_factory=lambda: {t.value: 0 for t in Termination})
    prompt_tokens: int = 0
    output_tokens: int = 0
    launches: dict[str, int] = field(default_factory=lambda: {"prefill": 0, "decode": 0})
    mixed_grammar_decode_steps: int = 0  # decode submissions with constrained and unconstrained lanes
    constrained_max_inflight: int = 0  # outstanding rounds right after a constrained submission


def _mixed(constrained_lanes: list[bool]) -> bool:
    """A submission whose lanes include both constrained and unconstrained requests."""
    return any(constrained_lanes) and not all(constrained_lanes)


class SequentialRuntime(ThreadedModelRuntime):
    """The reference runtime's worker, and the shape every runtime's worker keeps."""

    def __init__(
        self,
        engine: TokenEngine,
        limits: AdmissionLimits,
        *,
        context_tokens: int,
        vocab_size: int,
        input_vocab_size: int | None = None,
        capacity: Mapping[str, int] | None = None,
        available: Callable[[], Mapping[str, int]] | None = None,
        rejections: tuple[type[BaseException], ...] = (),
        eos_token_ids: tuple[int, ...] = (),
        prompt_score_width: int = 0,
        startup_seconds: Mapping[str, float] | None = None,
    ) -> None:
        super().__init__(limits, worker_name="helios-model-worker")
        self._startup_seconds = dict(startup_seconds or {})  # the engine's load, phase -> seconds
        self._prompt_score_width = prompt_score_width  # K of the engine's scored prefill (0: none)
        self._engine = engine
        self._eos_token_ids = tuple(eos_token_ids)  # the core's: where a request naming none ends
        self._context_tokens = context_tokens
        self._vocab_size = vocab_size  # sampled ids lie in [0, vocab_size)
        self._input_vocab_size = input_vocab_size or vocab_size  # prompt ids lie in [0, input_vocab_size)
        self._rejections = rejections  # engine errors that mean "scheduler admission rejection"
        self._free_slots = list(range(limits.max_active - 1, -1, -1))
        self._capacity = dict(capacity or {})
        self._available = available  # the engine's free resources (e.g. cache pages), read at scrape time
        self._ingress: collections.deque[_Active] = collections.deque()
        self._pending: collections.deque[_Active] = collections.deque()
        self._active: list[_Active] = []
        self._known: dict[str, _Active] = {}
        self._counters = _Counters()

    # -- lifecycle -------------------------------------------------------------------------------

    def _stopping(self) -> None:
        for entry in self._known.values():
            entry.cancelled = True

    # -- submission ------------------------------------------------------------------------------

    def _admission_check(self, request: PreparedRequest) -> str | None:
        generation = request.generation
        needed = len(generation.prompt_token_ids) + generation.max_tokens
        if needed > self._context_tokens:
            return (
                f"prompt ({len(generation.prompt_token_ids)} tokens) plus max_tokens ({generation.max_tokens}) "
                f"exceeds the served context of {self._context_tokens} tokens"
            )
        if any(t >= self._input_vocab_size for t in generation.prompt_token_ids):
            return f"a prompt token is outside the input vocabulary of {self._input_vocab_size}"
        if request.prompt_logprobs is not None:
            return score_refusal(request.prompt_logprobs, self._prompt_score_width)
        return None

    def _ingress_full(self) -> bool:
        return len(self._ingress) >= max(self.limits.queue_capacity, 1)

    def _count_rejection(self) -> None:
        with self._lock:
            self._counters.submitted += 1
            self._counters.rejected += 1

    def _enqueue(self, request: PreparedRequest, stream: EventStream) -> None:
        with self._lock:
            if request.request_id in self._known:
                raise DuplicateRequestId(f"request id {request.request_id!r} is already submitted")
            entry = _Active(request, stream, RequestProgress(request, stream, self._eos_token_ids))
            self._known[request.request_id] = entry
            self._ingress.append(entry)
            self._counters.submitted += 1
            self._lock.notify_all()

    def cancel(self, request_id: str) -> None:
        with self._lock:
            entry = self._known.get(request_id)
            if entry is not None:
                entry.cancelled = True
                self._lock.notify_all()

    # -- reporting -------------------------------------------------------------------------------

    def metrics(self) -> RuntimeMetrics:
        with self._lock:
            c = self._counters
            capacity = {
                "max_active": self.limits.max_active,
                "queue_capacity": self.limits.queue_capacity,
                "context_tokens": self._context_tokens,
                **self._capacity,
            }
            return RuntimeMetrics(
                requests_submitted=c.submitted,
                requests_started=c.started,
                requests_rejected=c.rejected,
                requests_finished=dict(c.finished),
                requests_failed=c.failed,
                requests_active=len(self._active),
                requests_pending=len(self._pending) + len(self._ingress),
                prompt_tokens=c.prompt_tokens,
                output_tokens=c.output_tokens,
                graph_launches=dict(c.launches),
                **self._speculative_metrics(),
                served_round_costs=self._served_costs(),
                mixed_grammar_decode_steps=c.mixed_grammar_decode_steps,
                constrained_max_inflight=c.constrained_max_inflight,
                capacity=capacity,
                available=dict(self._available()) if self._available is not None else {},
                startup_seconds=dict(self._startup_seconds),
            )

    def _speculative_metrics(self) -> dict:
        """The engine's speculative rounds and drafts, when it speculates (`speculative_counts`)."""
        counts = getattr(self._engine, "speculative_counts", None)
        if not counts:
            return {}
        out = {"speculative_rounds": counts["rounds"], "offered_drafts": counts["offered"],
               "accepted_drafts": counts["accepted"], "copied_offered": counts["copied_offered"],
               "copied_accepted": counts["copied_accepted"], "plain_choices": counts.get("plain_choices", 0),
               "fallback_choices": counts.get("fallback_choices", 0),
               "explored_choices": counts.get("explored_choices", 0)}
        positions = getattr(self._engine, "position_counts", None)
        if positions:
            out.update(offered_by_position=dict(positions["offered"]), accepted_by_position=dict(positions["accepted"]),
                       speculative_rounds_by_width=dict(positions["rounds_by_width"]))
        choice = getattr(self._engine, "choice", None)
        if choice is not None and choice.costs is not None:
            out["round_costs"] = choice.costs.entries
        return out

    def _served_costs(self) -> tuple:
        """The engine's served rounds per graph, when it keeps them (`served`, `catalog`: ServedCosts)."""
        served, catalog = getattr(self._engine, "served", None), getattr(self._engine, "catalog", None)
        return served.entries(catalog) if served is not None and catalog is not None else ()

    def residency(self) -> SequentialResidency:
        """A snapshot of the requests and slots held now (the engine's pages: `metrics().available`)."""
        with self._lock:
            return SequentialResidency(slots=self.limits.max_active, free_slots=tuple(self._free_slots),
                                       requests=tuple(sorted(self._known)), active=len(self._active),
                                       pending=len(self._pending) + len(self._ingress))

    # -- the worker thread -----------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._lock:
                while self._status == "ok" and not (self._ingress or self._pending or self._active):
                    self._lock.wait()
                stopping = self._status != "ok"
                self._take_ingress()
                for entry in [e for e in self._pending if e.cancelled]:
                    self._pending.remove(entry)
                    self._finish(entry, Termination.CANCELLED)
                while self._pending and len(self._active) < self.limits.max_active:
                    entry = self._pending.popleft()
                    if not self._start(entry):
                        break
                self._take_ingress()  # into the room the started requests left
                cohort = list(self._active)
            if stopping and not cohort:
                return
            for entry in cohort:
                self._round(entry)

    def _take_ingress(self) -> None:
        """Under the lock: move submitted requests into the pending deque while it has room (each
        holds at most `queue_capacity`), and wake submitters waiting for ingress room."""
        capacity = max(self.limits.queue_capacity, 1)
        moved = False
        while self._ingress and len(self._pending) < capacity:
            self._pending.append(self._ingress.popleft())
            moved = True
        if moved:
            self._ingress_drained()

    def _start(self, entry: _Active) -> bool:
        """Give a pending request a slot and start its generation (under the lock). An engine
        rejection while other requests run is a temporary shortage: the request waits at the head of
        the deque until one finishes. With nothing else running it can never fit: rejected."""
        entry.slot = self._free_slots.pop()
        try:
            grammar = entry.request.grammar
            extra: dict = {}
            if grammar is not None:  # NOTE: the engine asks for the mask when it packs each sampling round
                extra.update(grammar_mask=grammar.mask, grammar=grammar)
            # the request opted out of speculation, or has string stops (the host-stop barrier is width
            # one): it decodes plainly
            if not entry.request.speculation or entry.request.host_stop:
                extra["speculation"] = False
            if entry.request.prompt_logprobs is not None:  # its scores reach the stream before its first token
                stream = entry.stream
                extra.update(prompt_logprobs=entry.request.prompt_logprobs, on_scores=stream.put)
            tokens = self._engine.generate(entry.request.generation, slot=entry.slot, **extra)
            entry.tokens = iter(tokens)
        except self._rejections as error:
            self._free_slots.append(entry.slot)
            entry.slot = None
            if self._active:
                self._pending.appendleft(entry)
                return False
            self._forget(entry)
            self._counters.rejected += 1
            entry.stream.put(Rejected(str(error)))
            return True
        except Exception as error:  # any engine failure is this request's execution failure
            self._free_slots.append(entry.slot)
            entry.slot = None
            self._forget(entry)
            self._counters.failed += 1
            entry.stream.put(Failed(f"model execution failed: {type(error).__name__}: {error}"))
            return True
        self._active.append(entry)
        self._counters.started += 1
        self._counters.prompt_tokens += len(entry.request.generation.prompt_token_ids)
        return True

    def _round(self, entry: _Active) -> None:
        """One round of one request: a token, checked, observed, filtered, delivered."""
        if entry.cancelled:
            self._release(entry)
            self._finish(entry, Termination.CANCELLED)
            return
        assert entry.tokens is not None
        progress = entry.progress
        operation = "prefill" if progress.sampled == 0 else "decode"
        try:
            token = next(entry.tokens)
        except StopIteration:
            # the engine ends a generation early only when the context is full: an output limit
            ended: tuple[Termination, tuple[object, ...]] | None = (Termination.LENGTH, progress.flush())
        except Exception as error:  # any engine failure is this request's execution failure
            self._fail(entry, f"model execution failed: {type(error).__name__}: {error}")
            return
        else:
            with self._lock:
                self._counters.launches[operation] += 1
                self._counters.output_tokens += 1
                # each round submits this one lane and waits for its completion before the next:
                # one outstanding round, and a decode never mixes constrained and unconstrained lanes
                if entry.request.grammar is not None:
                    self._counters.constrained_max_inflight = max(self._counters.constrained_max_inflight, 1)
                if operation == "decode" and _mixed([entry.request.grammar is not None]):
                    self._counters.mixed_grammar_decode_steps += 1
            if not isinstance(token, int) or not 0 <= token < self._vocab_size:
                self._fail(entry, f"the engine sampled id {token!r}, outside the vocabulary of {self._vocab_size}")
                return
            # NOTE: read right after the id is checked, before stops and parsing; never for unobserved requests
            timestamp = self.clock.now_ns() if progress.timed else None
            try:
                ended = progress.accept(token, timestamp, _put)
            except GrammarViolated as error:  # the mask was not honoured: an execution fault of this request
                self._fail(entry, f"model execution failed: {error}")
                return
            except Exception as error:  # decoding failures are output errors (HTTP 500)
                self._fail(entry, f"output decoding failed: {type(error).__name__}: {error}")
                return
        if ended is not None:
            self._release(entry)
            self._finish(entry, *ended)

    def _release(self, entry: _Active) -> None:
        """Close the engine's generation: it frees the request's slot and pages."""
        tokens, entry.tokens = entry.tokens, None
        if tokens is not None and hasattr(tokens, "close"):
            try:
                tokens.close()
            except Exception:  # releasing must not fail the worker
                pass
        if entry.slot is not None:
            with self._lock:
                self._free_slots.append(entry.slot)
            entry.slot = None

    def _finish(self, entry: _Active, termination: Termination, pieces: tuple[object, ...] = ()) -> None:
        with self._lock:
            self._forget(entry)
            self._counters.finished[termination.value] += 1
        entry.stream.put(entry.progress.finished(termination, pieces))

    def _fail(self, entry: _Active, message: str) -> None:
        self._release(entry)
        with self._lock:
            self._forget(entry)
            self._counters.failed += 1
        entry.stream.put(Failed(message))

    def _forget(self, entry: _Active) -> None:
        if entry in self._active:
            self._active.remove(entry)
        self._known.pop(entry.request.request_id, None)


def _put(stream: EventStream, event: Event) -> None:
    stream.put(event)
