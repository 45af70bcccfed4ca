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
    text           the visible text: every released piece, the final flush included

`reused_prompt_tokens` is not compared: only production has a prefix cache.
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


def _text(pieces: Sequence[object]) -> str:
    return "".join(getattr(piece, "text", str(piece)) for piece in pieces)


async def _collect(stream: Any) -> RequestResult:
    tokens: list[int] = []
    text: list[str] = []
    async for event in stream:
        if isinstance(event, TokenEvent):
            tokens.append(event.token_id)
            text.append(_text(event.pieces))
        elif isinstance(event, Finished):
            text.append(_text(event.pieces))
            return RequestResult("finished", event.termination.value, tuple(tokens), "".join(text),
                                 event.prompt_tokens, event.output_tokens)
        elif isinstance(event, Failed):
            return RequestResult("failed", None, tuple(tokens), "".join(text), 0, len(tokens), event.message)
        elif isinstance(event, Rejected):
            return RequestResult("rejected", None, (), "", 0, 0, event.reason)
    return RequestResult("failed", None, tuple(tokens), "".join(text), 0, len(tokens), "the stream ended early")


def drive(runtime: ModelRuntime, requests: Sequence[PreparedRequest], *,
          timeout_s: float = DEFAULT_TIMEOUT_S) -> list[RequestResult]:
    """Start `runtime`, submit every request at once, collect each result, shut the runtime down."""

    async def main() -> list[RequestResult]:
        runtime.start()
        try:
            streams = [runtime.submit(request) for request in requests]
            try:
                return list(await asyncio.wait_for(asyncio.gather(*(_collect(s) for s in streams)), timeout_s))
            except TimeoutError:
                return [RequestResult("timeout", None, (), "", 0, 0, f"no terminal event within {timeout_s:.0f} s")
                        for _ in requests]
        finally:
            runtime.shutdown()

    return asyncio.run(main())


def prepare_requests(core: CoreSource, workload: Workload, copies: int = 2) -> list[list[PreparedRequest]]:
    """`copies` independent preparations of every request (each runtime needs its own stateful
    output filter), with token observation on and one shared generation (one seed) per request."""
    from helios.frontend.bootstrap import Bootstrap
    from helios.frontend.openai_request import parse_completion_request
    from helios.frontend.preparation import Preparer

    serving = core.contract
    preparer = Preparer(Bootstrap.from_core(core), served_id=serving.served_id, aliases=tuple(serving.aliases),
                        context_tokens=serving.context_tokens)
    out: list[list[PreparedRequest]] = [[] for _ in range(copies)]
    for request in workload.requests:
        first: PreparedRequest | None = None
        for copy in out:
            prepared = preparer.prepare_completion(parse_completion_request(dict(request.body)),
                                                   f"{workload.name}/{request.name}").runtime_request
            prepared = replace(prepared, observe_tokens=True)
            if first is None:
                first = prepared
            else:
                prepared = replace(prepared, generation=first.generation)
            copy.append(prepared)
    return out


def reference_runtime(core: CoreSource, workload: Workload) -> ModelRuntime:
    """The reference runtime (its own factory, as the commands build it) with the workload's slots."""
    from helios.reference import load_runtime
    from helios.runtime.limits import AdmissionLimits
    from helios.runtime.options import RuntimeOptions

    active = min(workload.max_active, core.contract.max_concurrency)
    limits = AdmissionLimits(max_active=active, queue_capacity=max(len(workload.requests), 1))
    return load_runtime(core, RuntimeOptions(limits))


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
                    tie_check: TieCheck | None, lane: int) -> CaseResult:
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
    if reference.text != production.text:
        k = next((i for i, (a, b) in enumerate(zip(reference.text, production.text, strict=False)) if a != b),
                 min(len(reference.text), len(production.text)))
        return diverged("text", reference.text, production.text,
                        detail=f"visible text differs from character {k}")
    return CaseResult(case, "pass")


def compare_workload(workload: Workload, generations: Sequence[GenerationRequest],
                     reference: Sequence[RequestResult], production: Sequence[RequestResult],
                     tie_check: TieCheck | None) -> list[CaseResult]:
    return [compare_request(f"{workload.name}/{request.name}", generation, ref, prod, tie_check, index)
            for index, (request, generation, ref, prod) in enumerate(
                zip(workload.requests, generations, reference, production, strict=True))]
