"""Level 3, end to end (host side): one workload through both full runtimes, compared per request.

Each runtime schedules on its own: the reference runtime (`helios.reference.load_runtime`: the
`SequentialRuntime` over the sequential `ReferenceEngine`, every context fully reserved, no prefix
cache), and production's `BatchingRuntime` (continuous batching, page cache, prefix reuse,
preemption) over its executor.
Both receive the same prepared requests (the server's parsing and preparation of each body, token
observation on) and run them concurrently. Per request, in this order, the first difference is the
request's divergence:

    outcome        finished, failed or rejected (and the failure message)
    token_ids      every sampled id, EOS and stop-crossing tokens included, exactly; where they first
                   differ, the reference's draw after the common prefix decides (`conformance.draw`):
                   a margin within the tie tolerance is a numeric tie (nothing after it is
                   compared), else a divergence
    finish_reason  eos, length, stop (the Termination value)
    stop_position  for a stop: the number of sampled tokens when it matched
    usage          prompt_tokens, output_tokens
    prompt_scores  a request asking for them: the prompt tokens they cover, exactly; each token's
                   log-probability within the score tolerance (the dtype's tie margin, against max(1, |reference|));
                   its alternatives' ids rank by rank,
                   where two differ only as a numeric tie (their log-probabilities within the
                   tolerance of each other, nothing after them compared), and their log-probabilities
    text           the visible text: every released piece, the final flush included
    tool_calls     for a chat request: the tool calls its output pipeline parses from the pieces
                   (name and arguments; call ids are random)

`reused_prompt_tokens` is not compared: only production has a prefix cache (it is kept, for the
coverage table). A request with `after` is submitted once the named request has finished and the
runtime released it (the fence of its last round, a publication round included).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from conformance.draw import is_draw_tie, sampling_site
from conformance.report import CaseResult, Divergence
from conformance.workload import Workload
from helios.core.source import CoreSource
from helios.runtime.events import Failed, Finished, Rejected, TokenEvent
from helios.runtime.interface import ModelRuntime, PreparedRequest
from helios.runtime.request import GenerationRequest
from helios.runtime.scores import PromptScoreEvent, core_prompt_score_width

DEFAULT_TIMEOUT_S = 900.0


@dataclass(frozen=True, slots=True)
class RequestResult:
    """What one runtime delivered for one request."""

    outcome: str  # "finished", "failed", "rejected" or "timeout"
    finish_reason: str | None  # the Termination value of a finished request
    token_ids: tuple[int, ...]  # observed sampled ids, in order
    text: str  # visible text: every piece released, the final flush included
    prompt_tokens: int
    output_tokens: int
    message: str = ""  # the failure or rejection message
    reused_prompt_tokens: int = 0  # prompt positions the prefix cache served (production only)
    tool_calls: tuple[tuple[str, str], ...] = ()  # (name, arguments) the output pipeline parsed (chat)
    prompt_scores: tuple[PromptScoreEvent, ...] = ()  # a request asking for prompt scores: its score events


def _text(pieces: Sequence[object]) -> str:
    return "".join(getattr(piece, "text", str(piece)) for piece in pieces)


def _tool_calls(pipeline: Any, pieces: Sequence[object]) -> tuple[tuple[str, str], ...]:
    from helios.frontend.pipeline import OutputAccumulator

    accumulator = OutputAccumulator()
    accumulator.add(pipeline.feed(pieces))
    accumulator.add(pipeline.finish())
    return tuple((call.name, call.arguments) for call in accumulator.result().tool_calls)


async def _collect(stream: Any, pipeline: Any = None) -> RequestResult:
    tokens: list[int] = []
    text: list[str] = []
    pieces: list[object] = []
    scores: list[PromptScoreEvent] = []
    async for event in stream:
        if isinstance(event, PromptScoreEvent):
            scores.append(event)
        elif isinstance(event, TokenEvent):
            tokens.append(event.token_id)
            text.append(_text(event.pieces))
            pieces.extend(event.pieces)
        elif isinstance(event, Finished):
            text.append(_text(event.pieces))
            pieces.extend(event.pieces)
            calls = _tool_calls(pipeline, pieces) if pipeline is not None else ()
            return RequestResult("finished", event.termination.value, tuple(tokens), "".join(text),
                                 event.prompt_tokens, event.output_tokens,
                                 reused_prompt_tokens=event.reused_prompt_tokens, tool_calls=calls,
                                 prompt_scores=tuple(scores))
        elif isinstance(event, Failed):
            return RequestResult("failed", None, tuple(tokens), "".join(text), 0, len(tokens), event.message)
        elif isinstance(event, Rejected):
            return RequestResult("rejected", None, (), "", 0, 0, event.reason)
    return RequestResult("failed", None, tuple(tokens), "".join(text), 0, len(tokens), "the stream ended early")


async def _released(runtime: ModelRuntime, request_id: str) -> None:
    """Until a batching runtime's scheduler holds `request_id` no more: its last round is fenced and
    what it publishes there (its partial last page, a continuation) is published. A request ended
    by its output limit or EOS keeps its slot past its terminal event for that publication round, so
    a request submitted `after` it would otherwise race the publication it exists to hit. A runtime
    without a scheduler (the sequential reference) publishes nothing: no wait."""
    holds = getattr(getattr(runtime, "scheduler", None), "holds", None)
    while holds is not None and holds(request_id):
        await asyncio.sleep(0.002)


def drive(runtime: ModelRuntime, requests: Sequence[PreparedRequest], *,
          timeout_s: float = DEFAULT_TIMEOUT_S, after: Sequence[int | None] | None = None,
          pipelines: Sequence[Any] | None = None) -> list[RequestResult]:
    """Start `runtime`, submit every request at once (a request with `after[i]` once request
    `after[i]` has finished and the runtime released it), collect each result, shut the runtime
    down. `pipelines[i]`: the chat request's output pipeline, which parses its tool calls."""
    waits = list(after) if after is not None else [None] * len(requests)
    parsers = list(pipelines) if pipelines is not None else [None] * len(requests)

    async def main() -> list[RequestResult]:
        runtime.start()
        try:
            done = [asyncio.Event() for _ in requests]

            async def one(index: int, request: PreparedRequest) -> RequestResult:
                if waits[index] is not None:
                    await done[waits[index]].wait()
                    await _released(runtime, requests[waits[index]].request_id)
                try:
                    return await _collect(runtime.submit(request), parsers[index])
                finally:
                    done[index].set()

            try:
                return list(await asyncio.wait_for(asyncio.gather(*(one(i, r) for i, r in enumerate(requests))),
                                                   timeout_s))
            except TimeoutError:
                return [RequestResult("timeout", None, (), "", 0, 0, f"no terminal event within {timeout_s:.0f} s")
                        for _ in requests]
        finally:
            runtime.shutdown()

    return asyncio.run(main())


@dataclass(frozen=True, slots=True)
class PreparedCopy:
    """One runtime's preparation of a workload: the requests, each chat request's output pipeline
    (None for a completion) and each request's `after` as an index."""

    requests: list[PreparedRequest]
    pipelines: list[Any]
    after: list[int | None]


def preparer_for(core: CoreSource) -> Any:
    """The server's `Preparer` for `core` (its vocabulary geometry, so grammar masks fit)."""
    from helios.frontend.bootstrap import Bootstrap
    from helios.frontend.preparation import Preparer

    serving = core.contract
    vocabulary = serving.model.vocabulary
    return Preparer(Bootstrap.from_core(core), served_id=serving.served_id, aliases=tuple(serving.aliases),
                    context_tokens=serving.context_tokens, sampled_tokens=vocabulary.sampled_tokens or None,
                    mask_words=vocabulary.mask_words or None,
                    prompt_score_width=core_prompt_score_width(serving, core.manifest),
                    vision=serving.model.vision)


def prepare_workload(core: CoreSource, workload: Workload, copies: int = 2, *,
                     preparer: Any = None) -> list[PreparedCopy]:
    """`copies` independent preparations of every request (each runtime needs its own stateful
    output filter, grammar and pipeline), with token observation on and one shared generation (one
    seed) per request. A request with `output_filter` false gets none."""
    from helios.frontend.openai_request import parse_chat_request, parse_completion_request

    preparer = preparer or preparer_for(core)
    names = [request.name for request in workload.requests]
    after = [None if r.after is None else names.index(r.after) for r in workload.requests]
    out = [PreparedCopy([], [], list(after)) for _ in range(copies)]
    for request in workload.requests:
        first: PreparedRequest | None = None
        for copy in out:
            request_id = f"{workload.name}/{request.name}"
            pipeline = None
            if request.chat:
                chat = preparer.prepare_chat(parse_chat_request(dict(request.body)), request_id)
                prepared, pipeline = chat.runtime_request, chat.pipeline
            else:
                prepared = preparer.prepare_completion(parse_completion_request(dict(request.body)),
                                                       request_id).runtime_request
            prepared = replace(prepared, observe_tokens=True)
            if not request.output_filter:
                prepared = replace(prepared, output_filter=None)
            if first is None:
                first = prepared
            else:
                prepared = replace(prepared, generation=first.generation)
            copy.requests.append(prepared)
            copy.pipelines.append(pipeline)
    return out


def prepare_requests(core: CoreSource, workload: Workload, copies: int = 2) -> list[list[PreparedRequest]]:
    """`copies` independent preparations of every request (see `prepare_workload`): the requests only."""
    return [copy.requests for copy in prepare_workload(core, workload, copies)]


def drive_copy(runtime: ModelRuntime, copy: PreparedCopy, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> list[RequestResult]:
    """`drive` one prepared copy of a workload (its order and its pipelines)."""
    return drive(runtime, copy.requests, timeout_s=timeout_s, after=copy.after, pipelines=copy.pipelines)


def reference_runtime(core: CoreSource, workload: Workload, *, history_drafting: bool = False) -> ModelRuntime:
    """The reference runtime (its own factory, as the commands build it) with the workload's slots
    (`history_drafting`: its speculative rounds carry proposals copied from each request's tokens)."""
    from helios.reference import load_runtime
    from helios.runtime.limits import AdmissionLimits
    from helios.runtime.options import RuntimeOptions

    active = min(workload.max_active, core.contract.max_concurrency)
    limits = AdmissionLimits(max_active=active, queue_capacity=max(len(workload.requests), 1))
    return load_runtime(core, RuntimeOptions(limits, history_drafting=history_drafting))


TieCheck = Callable[[GenerationRequest, Sequence[int], int, int], tuple[bool, float | None]]


def reference_tie_check(core: CoreSource, dtype: str) -> TieCheck:
    """(tie, margin) for ids that first differ after `prefix`: the reference's draw of the next
    position, given the prompt and the common prefix (slot 0 of a fresh sequential engine)."""
    from helios.reference.engine import ReferenceEngine

    site = sampling_site(core)
    engine = ReferenceEngine.load(core, keep=site.inputs if site else ())

    def check(generation: GenerationRequest, prefix: Sequence[int], reference_id: int,
              production_id: int) -> tuple[bool, float | None]:
        if site is None:
            return False, None
        # NOTE: the prefix joins the prompt, so the prompt histogram (penalties) would count it;
        # the draw is re-run from the kept inputs with the request's own histogram instead.
        request = GenerationRequest(tuple(generation.prompt_token_ids) + tuple(prefix), max_tokens=1,
                                    sampling=generation.sampling, ignore_eos=True)
        list(engine.generate(request))
        draw = site.row(engine.kept[-1], 0)
        if draw is None:
            return False, None
        if draw.histogram is not None:
            counts = np.zeros_like(draw.histogram)
            ids = np.asarray(generation.prompt_token_ids, dtype=np.int64)
            np.add.at(counts, ids[ids < counts.shape[0]], 1)
            draw = replace(draw, histogram=counts)
        return is_draw_tie(draw, reference_id, production_id, dtype)

    return check


def compare_request(case: str, generation: GenerationRequest, reference: RequestResult, production: RequestResult,
                    tie_check: TieCheck | None, lane: int, score_tolerance: float = 1e-4) -> CaseResult:
    def diverged(field: str, ref: object, prod: object, *, round_: int | None = None, margin: float | None = None,
                 detail: str = "") -> CaseResult:
        return CaseResult(case, "divergence", Divergence(case, field, ref, prod, round=round_, lane=lane,
                                                         margin=margin, detail=detail))

    if reference.outcome != production.outcome:
        return diverged("outcome", reference.outcome, production.outcome,
                        detail=f"reference {reference.outcome} {reference.message}; production {production.outcome} "
                               f"{production.message}".strip())
    ref_ids, prod_ids = reference.token_ids, production.token_ids
    if ref_ids != prod_ids:
        k = next((i for i, (a, b) in enumerate(zip(ref_ids, prod_ids, strict=False)) if a != b), None)
        if k is None:  # one is a prefix of the other: they ended at different points
            k = min(len(ref_ids), len(prod_ids))
            return diverged("token_ids", list(ref_ids[k:k + 4]), list(prod_ids[k:k + 4]), round_=k,
                            detail=f"token {k}: one runtime ended, the other went on")
        tie, margin = tie_check(generation, prod_ids[:k], ref_ids[k], prod_ids[k]) if tie_check else (False, None)
        item = Divergence(case, "token_ids", ref_ids[k], prod_ids[k], round=k, lane=lane, margin=margin,
                          detail=f"token {k}: sampled ids differ")
        if tie:
            return CaseResult(case, "numeric tie", None, (item,))
        return CaseResult(case, "divergence", item)
    if reference.finish_reason != production.finish_reason:
        return diverged("finish_reason", reference.finish_reason, production.finish_reason)
    if reference.finish_reason == "stop" and reference.output_tokens != production.output_tokens:
        return diverged("stop_position", reference.output_tokens, production.output_tokens)
    for name in ("prompt_tokens", "output_tokens"):
        if getattr(reference, name) != getattr(production, name):
            return diverged(f"usage.{name}", getattr(reference, name), getattr(production, name))
    scores = _compare_scores(reference.prompt_scores, production.prompt_scores, score_tolerance)
    if scores is not None:
        field, ref, prod, detail, tie = scores
        if not tie:
            return diverged(field, ref, prod, detail=detail)
        tied = Divergence(case, field, ref, prod, lane=lane, detail=detail)
    else:
        tied = None
    if reference.text != production.text:
        k = next((i for i, (a, b) in enumerate(zip(reference.text, production.text, strict=False)) if a != b),
                 min(len(reference.text), len(production.text)))
        return diverged("text", reference.text, production.text,
                        detail=f"visible text differs from character {k}")
    if reference.tool_calls != production.tool_calls:
        return diverged("tool_calls", [list(c) for c in reference.tool_calls], [list(c) for c in production.tool_calls],
                        detail="the parsed tool calls differ")
    if tied is not None:
        return CaseResult(case, "numeric tie", None, (tied,))
    return CaseResult(case, "pass")


def _compare_scores(reference: Sequence[PromptScoreEvent], production: Sequence[PromptScoreEvent],
                    tolerance: float) -> tuple[str, object, object, str, bool] | None:
    """The first difference of two runtimes' prompt scores, (field, reference, production, detail,
    numeric tie), or None (see the module docstring)."""
    def flat(events: Sequence[PromptScoreEvent]) -> list[tuple[int, float, tuple[tuple[int, float], ...]]]:
        return [(e.first + i, lp, top) for e in events for i, (lp, top) in enumerate(zip(e.logprobs, e.top,
                                                                                          strict=True))]

    def close(a: float, b: float, slack: float = 1.0) -> bool:
        return abs(a - b) <= slack * tolerance * max(1.0, abs(a))

    ref, prod = flat(reference), flat(production)
    if [t for t, _, _ in ref] != [t for t, _, _ in prod]:
        return ("prompt_scores.tokens", [t for t, _, _ in ref][:8], [t for t, _, _ in prod][:8],
                "the runtimes scored different prompt tokens", False)
    for (token, ref_lp, ref_top), (_, prod_lp, prod_top) in zip(ref, prod, strict=True):
        if not close(ref_lp, prod_lp):
            return (f"prompt_scores[{token}].logprob", ref_lp, prod_lp, f"prompt token {token}'s log-probability", False)
        for rank, ((ref_id, ref_value), (prod_id, prod_value)) in enumerate(zip(ref_top, prod_top, strict=True)):
            if not close(ref_value, prod_value):
                return (f"prompt_scores[{token}].top[{rank}]", ref_value, prod_value,
                        f"prompt token {token}'s alternative {rank}: log-probabilities differ", False)
            if ref_id != prod_id:  # a tie within the tolerance ranks either way; nothing after it is compared
                tie = any(i == prod_id and close(v, ref_value, 2.0) for i, v in ref_top)
                return (f"prompt_scores[{token}].top[{rank}]", ref_id, prod_id,
                        f"prompt token {token}'s alternative {rank}: ids differ", tie)
    return None


def compare_workload(workload: Workload, generations: Sequence[GenerationRequest],
                     reference: Sequence[RequestResult], production: Sequence[RequestResult],
                     tie_check: TieCheck | None, score_tolerance: float = 1e-4) -> list[CaseResult]:
    return [compare_request(f"{workload.name}/{request.name}", generation, ref, prod, tie_check, index,
                            score_tolerance)
            for index, (request, generation, ref, prod) in enumerate(
                zip(workload.requests, generations, reference, production, strict=True))]
