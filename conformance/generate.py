"""Workloads derived from a core's contract (host side, NumPy only): what `helios conform` runs when
no workload file is given.

    geometry = Geometry.of(core)                 # page tokens, prefill capacities, context, window, ...
    workloads = generated_workloads(core)        # ("geometry", "pressure", ...), fitted to that geometry

Every request is sized from the prepared geometry, never from a fixed file, so every core meets the
mechanisms the suite exists to check (the coverage table, `coverage.py`, then says which ones a run
actually reached):

  geometry  one workload, two request slots, every page:
    chunked         a prompt longer than the largest PREFILL (and MIXED) chunk, and longer than the
                    sliding window where the core has one: chunked prefill and a crossed window
    reuse           submitted after `chunked` has finished, its prompt the first full page of
                    `chunked`'s plus two more ids: the prefix cache serves that page; no output filter
                    (its sampled ids are observed only). Where the context holds no chunked prompt,
                    a `prefix` request of a page plus two ids goes first instead
    token-stop, sequence-stop, string-stop
                    one greedy prompt whose first tokens a reference pass learns (the stream does
                    not depend on stops): stop ids, a stop sequence and a stop string taken from
                    that stream, so each stop fires within the first tokens
    eos-<id>        for every EOS id of the core: a seed under which the reference's first draw is
                    that id (searched on the reference's own logits and Philox stream), so the request
                    ends with that EOS at its first token
    scored          where the core has SCORED_PREFILL graphs: a greedy prompt of `chunked`'s length
                    with echo, logprobs and max_tokens 0, so every prompt token's score (and its top
                    alternatives) is compared across scored chunks
    grammar         a chat request with a json_schema response format (a grammar mask every round)
    tool            where the core has a tool syntax: a chat request forced to call a registered
                    function (`tool_choice` naming it); the seed under which the reference's call is
                    shortest
    copying         where the core has SPECULATIVE graphs: a greedy prompt stating one short run of
                    ids three times, the first of a few whose reference stream repeats a pair of ids
                    of its history within the output, so a run with history drafting copies proposals
                    (and every run verifies speculative rounds)
  pressure  two requests and two cache pages: the older one's decode needs the page the younger
            holds, so production preempts it and readmits it later (the shape is checked on the
            reference's batching run before it is kept)
  snapshot  where the core has RESTORATION graphs: two requests on five pages; the older's growth
            preempts the younger with its endpoint inside a page, whose partial page is snapshotted,
            released and restored at readmission, nothing recomputed (checked the same way)
  images    where the core has image inputs (docs/vision.md): greedy chat requests with a PNG (made
            here, at the preparation's image size) each: image A beside a text-only request, then
            the same text with image B (its prefix pages before the image are reused, its image's
            are not: their keys hold the image's digest), then A again (its image's pages reused too)
  tiers     where the core reuses prefixes: one request at a time on three pages and a host tier of
            eight; a second turn extending the first turn's partial last page restores it from its
            published continuation row (a mid-page hit, where the core has RESTORATION graphs), and
            a re-sent two-page prompt, evicted by a filler, readmits its checkpoints from the host
            tier (checked the same way)

Prompts are token ids (their lengths are exact on any tokenizer), drawn from ids that are neither EOS
ids nor template tokens. Where a request's point is a mechanism reached after some draws, its prompt
(or seed) is the first of a few whose reference draws are clear of a numeric tie in the core's
precision (`_Draws`): on a bf16 core a tie would end the end-to-end comparison of that request
before the mechanism it exists for. The learning passes run on the reference only (NumPy): a few short
generations on a tiny core.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from conformance.workload import Workload, WorkloadRequest
from helios.contract.enums import HistoryKind, Operation, ReasoningParser, ToolParser
from helios.core.source import CoreSource
from helios.runtime.scores import prompt_score_width

EOS_TEMPERATURE = 2.0  # the flattest draw the API allows: an EOS id is likeliest to be drawn
# The EOS requests' sampling, every filter off: a core's default top-k, top-p or min-p would keep an
# unlikely EOS id out of the draw (request values win over the core's defaults).
EOS_SAMPLING = {"temperature": EOS_TEMPERATURE, "top_p": 1.0, "top_k": 0, "min_p": 0.0}
EOS_SEEDS = 20000  # seeds tried per prompt for each EOS id
EOS_CANDIDATES = 4  # seeds that draw the EOS id, of which the first clear of a numeric tie is kept
PROBE_SEEDS = (0, 1, 2, 3)  # seeds tried for the grammar and tool requests (the shortest is kept)
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9}},
          "required": ["a"], "additionalProperties": False}  # fmt: skip
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}


@dataclass(frozen=True, slots=True)
class Geometry:
    """What the generated workloads are fitted to, read from the core's `PreparedContract`."""

    page_tokens: int
    chunk_tokens: int  # the largest token capacity of a PREFILL or MIXED graph (the longest chunk)
    context_tokens: int
    window_tokens: int | None  # the smallest sliding window, None without one
    slots: int  # request slots (max concurrency)
    eos_ids: tuple[int, ...]
    tool_syntax: bool
    reasoning_syntax: bool
    chat: bool  # the core carries a chat template (grammar and tool requests are chat requests)
    prompt_ids: tuple[int, ...]  # ids prompts are drawn from: in the vocabulary, no EOS, no template token
    prompt_score_width: int = 0  # K of the core's scored prefill (0: no SCORED_PREFILL graphs)
    snapshots: bool = False  # RESTORATION graphs and continuation storage (preemption snapshots, restores)
    recurrent: bool = False  # a RECURRENT history region: no prefix is reused (docs/recurrent.md)
    image_size: int = 0  # the image preparation's image size (0: the core takes no images)
    speculative: bool = False  # SPECULATIVE graphs: learned speculation (history drafting needs it too)

    @classmethod
    def of(cls, core: CoreSource) -> Geometry:
        from helios.contract import PreparedContract

        contract = PreparedContract.decode(core.contract, core.manifest)
        chunks = [g.packed_token_capacity for g in contract.graphs
                  if g.operation in (Operation.PREFILL, Operation.MIXED)]
        windows = [h.window_tokens for h in contract.cache.histories
                   if h.kind == HistoryKind.SLIDING_WINDOW and h.window_tokens > 0]
        frontend = contract.frontend
        from helios.frontend.bootstrap import Bootstrap

        bootstrap = Bootstrap.from_core(core)
        vocabulary = min(contract.input_vocabulary.input_tokens or contract.vocabulary.sampled_tokens,
                         contract.vocabulary.sampled_tokens, bootstrap.vocab_size)  # ids the tokenizer knows
        excluded = set(frontend.eos_token_ids) | {token_id for _, token_id in frontend.template_tokens}
        ids = tuple(i for i in range(min(vocabulary, 4096)) if i not in excluded)
        chat = bool(bootstrap.chat_template)
        return cls(page_tokens=contract.cache.page_tokens, chunk_tokens=max(chunks, default=contract.prefill_tokens),
                   context_tokens=contract.context_tokens, window_tokens=min(windows) if windows else None,
                   slots=contract.max_concurrency, eos_ids=tuple(frontend.eos_token_ids),
                   tool_syntax=frontend.tool_parser not in (ToolParser.NONE, ToolParser.UNSPECIFIED),
                   reasoning_syntax=frontend.reasoning_parser not in (ReasoningParser.NONE, ReasoningParser.UNSPECIFIED),
                   chat=chat, prompt_ids=ids, prompt_score_width=prompt_score_width(contract),
                   snapshots=(contract.snapshot_capacity > 0 and any(g.operation == Operation.RESTORATION
                                                                     for g in contract.graphs)),
                   recurrent=any(h.kind == HistoryKind.RECURRENT for h in contract.cache.histories),
                   image_size=frontend.image_settings.image_size if contract.vision.feature_slots and chat else 0,
                   speculative=any(g.operation == Operation.SPECULATIVE for g in contract.graphs))

    def prompt(self, length: int, salt: int = 0) -> list[int]:
        """`length` deterministic ids (a fixed walk through `prompt_ids`; `salt` picks another walk)."""
        n = len(self.prompt_ids)
        return [self.prompt_ids[(7 + 31 * salt + 13 * i + (i * i) % 5) % n] for i in range(length)]

    # ------------------------------------------------------------------ what the core can reach

    @property
    def chunked_length(self) -> int:
        """The prompt of `chunked`: longer than every chunk and the window, and at least a page plus two."""
        crossing = self.window_tokens + 2 if self.window_crossable else 0
        return max(self.chunk_tokens + 2, crossing, self.page_tokens + 2)

    @property
    def window_crossable(self) -> bool:
        return self.window_tokens is not None and self.window_tokens + 2 + 2 <= self.context_tokens

    def unsupported(self, *, history_drafting: bool = False) -> dict[str, str]:
        """Mechanism -> why this core (or a run without `history_drafting`) cannot reach it: the
        coverage table's "not supported" rows."""
        from conformance import coverage as c

        out: dict[str, str] = {}
        if not self.speculative:
            out[c.SPECULATIVE] = out[c.COPIED] = "not supported by the core (no SPECULATIVE graphs)"
        elif not history_drafting:
            out[c.COPIED] = "not supported by the core in a run without history drafting"
        if self.window_tokens is None:
            out[c.WINDOW] = "not supported by the core (no sliding window)"
        elif not self.window_crossable:
            out[c.WINDOW] = "not supported by the core (the window spans the context)"
        if self.chunk_tokens + 2 + 2 > self.context_tokens:
            out[c.CHUNKED] = "not supported by the core (the context is no longer than a chunk)"
        if self.page_tokens + 2 + 2 > self.context_tokens:
            out[c.REUSE] = "not supported by the core (the context holds no full page and more)"
        elif self.recurrent:
            out[c.REUSE] = "not supported by the core (recurrent state: pages hold no state at their ends)"
        if c.REUSE in out:  # both serve a prefix the cache published
            out[c.MIDPAGE] = out[c.HOST] = out[c.REUSE]
        else:
            if not self.snapshots:
                out[c.MIDPAGE] = "not supported by the core (no RESTORATION graphs or continuation storage)"
            elif self.page_tokens < 3 or self.page_tokens + 6 > self.context_tokens:
                out[c.MIDPAGE] = "not supported by the core (the context holds no page, a partial page and more)"
            if 2 * self.page_tokens + 2 > self.context_tokens:
                out[c.HOST] = "not supported by the core (the context holds no two full pages and more)"
        if self.slots < 2:
            out[c.PREEMPTION] = "not supported by the core (one request slot)"
            out[c.RESTORE] = out[c.PREEMPTION]
        elif not self.snapshots:
            out[c.RESTORE] = "not supported by the core (no RESTORATION graphs or continuation storage)"
        if not self.tool_syntax:
            out[c.TOOL] = "not supported by the core (no tool syntax)"
        if not self.prompt_score_width:
            out[c.SCORED] = "not supported by the core (no SCORED_PREFILL graphs)"
        if not self.chat:
            out[c.GRAMMAR] = "not supported by the core (no chat template)"
            out[c.TOOL] = out.get(c.TOOL, "not supported by the core (no chat template)")
        return out


def _request(name: str, body: dict, **workload_keys: Any) -> WorkloadRequest:
    return WorkloadRequest(name, body, **workload_keys)


def generated_workloads(core: CoreSource, geometry: Geometry | None = None) -> tuple[Workload, ...]:
    """The default workloads of `core` (see the module docstring)."""
    geometry = geometry or Geometry.of(core)
    unsupported = geometry.unsupported()
    from conformance import coverage as c

    context = geometry.context_tokens
    requests: list[WorkloadRequest] = []
    # The first request's prompt is chunked where the core allows it (and crosses the window), and at
    # least a page plus two ids where it allows reuse, so `reuse` finds a published page after it.
    # Each greedy prompt is the first of a few whose draws are clear of numeric ties (`_Draws`).
    draws = _Draws(core)
    first = None
    if c.CHUNKED not in unsupported or c.WINDOW not in unsupported:
        first = "chunked", min(geometry.chunked_length, context - 2)
    elif c.REUSE not in unsupported:
        first = "prefix", geometry.page_tokens + 2
    if first is not None:
        name, length = first
        prompt = _clear_prompt(draws, [geometry.prompt(length, salt=salt) for salt in range(GREEDY_CANDIDATES)])
        requests.append(_request(name, {"prompt": prompt, "max_tokens": 2, "temperature": 0}))
        # On a recurrent core the shared prefix must be recomputed, not reused: the same request checks it.
        if c.REUSE not in unsupported or geometry.recurrent:
            shared = _clear_prompt(draws, [prompt[: geometry.page_tokens] + geometry.prompt(2, salt=1 + salt)
                                           for salt in range(GREEDY_CANDIDATES)])
            requests.append(_request("reuse", {"prompt": shared, "max_tokens": 2, "temperature": 0},
                                     after=name, output_filter=False))
    requests.extend(_stop_requests(core, geometry, draws))
    requests.extend(_eos_requests(core, geometry, draws))
    if c.SCORED not in unsupported:  # a prompt of more than one chunk, every token scored (echo, max_tokens 0)
        prompt = geometry.prompt(min(geometry.chunked_length, context - 2), salt=5)
        requests.append(_request("scored", {"prompt": prompt, "echo": True, "max_tokens": 0, "temperature": 0,
                                            "logprobs": min(3, geometry.prompt_score_width)}))
    if c.GRAMMAR not in unsupported:
        requests.extend(_shortest(core, "grammar", {
            "messages": [{"role": "user", "content": "a?"}], "max_tokens": 12,
            "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}}},
            needs_call=False))
    if c.TOOL not in unsupported:
        requests.extend(_shortest(core, "tool", {
            "messages": [{"role": "user", "content": "f?"}], "max_tokens": 48, "tools": [TOOL],
            "tool_choice": {"type": "function", "function": {"name": "f"}}}, needs_call=True))
    if c.SPECULATIVE not in unsupported:
        requests.append(_copying_request(core, geometry, draws))
    workloads = [Workload("geometry", tuple(requests), max_active=min(2, geometry.slots),
                          queue_capacity=len(requests),
                          description="fitted to the core: chunked prefill, prefix reuse, window, stops, "
                                      "EOS ids, scored prefill, grammar, tool call, with and without output "
                                      "filter")]
    if c.PREEMPTION not in unsupported:
        workloads.append(_pressure(core, geometry))
    if c.RESTORE not in unsupported:
        snapshot = _snapshot(core, geometry)
        if snapshot is not None:
            workloads.append(snapshot)
    if geometry.image_size:
        workloads.append(_images(geometry))
    if c.MIDPAGE not in unsupported or c.HOST not in unsupported:
        tiers = _tiers(core, geometry, draws, midpage=c.MIDPAGE not in unsupported, host=c.HOST not in unsupported)
        if tiers is not None:
            workloads.append(tiers)
    return tuple(workloads)


def png_data_url(size: int, seed: int) -> str:
    """A `data:` URL of a deterministic random RGB PNG of `size` x `size` pixels."""
    import base64
    import io

    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _images(geometry: Geometry) -> Workload:
    """The `images` workload (module docstring)."""
    a, b = (png_data_url(geometry.image_size, seed) for seed in (1, 2))

    def body(url: str) -> dict:
        return {"messages": [{"role": "user", "content": [{"type": "text", "text": "look: "},
                                                          {"type": "image_url", "image_url": {"url": url}},
                                                          {"type": "text", "text": " what?"}]}],
                "max_tokens": 3, "temperature": 0}

    text = {"messages": [{"role": "user", "content": "look: what?"}], "max_tokens": 3, "temperature": 0}
    requests = (_request("image-a", body(a)), _request("text", text),  # batched beside image-a's rounds
                _request("image-b", body(b), after="image-a"), _request("image-a-again", body(a), after="image-b"))
    return Workload("images", requests, max_active=min(2, geometry.slots), queue_capacity=len(requests),
                    description="chat requests with images: distinct images never share a page, equal ones do")


# ---------------------------------------------------------------------------------------- learning passes

def _reference_results(core: CoreSource, workload: Workload) -> list[Any]:
    """The reference runtime's results of `workload` (the learning pass)."""
    from conformance.e2e import drive_copy, prepare_workload, reference_runtime

    (copy,) = prepare_workload(core, workload, copies=1)
    return drive_copy(reference_runtime(core, workload), copy)


class _Draws:
    """The reference's draws of a request, kept to judge them against the core's precision: a draw
    within the tie tolerance of a neighbour would make the two runtimes' comparison stop at a
    numeric tie there (bf16 cores), and the mechanism the request exists for would go unchecked."""

    def __init__(self, core: CoreSource) -> None:
        from conformance.audit import core_dtype
        from conformance.draw import sampling_site
        from helios.reference.engine import ReferenceEngine

        self.core = core
        self.site = sampling_site(core)
        self.dtype = core_dtype(core.manifest)
        self.engine = ReferenceEngine.load(core, keep=self.site.inputs) if self.site is not None else None

    def robust(self, body: dict) -> bool:
        """Whether the reference's draws of the completion request `body`, prepared as conform prepares
        it (the core's sampling defaults, its prompt tokens), are each clear of a numeric tie with
        their nearest competitors (the neighbouring ids, and the runner-up of a greedy row)."""
        if self.engine is None:
            return True
        tokens, rows = self.draws(body)
        return all(self.clear(row, token) for row, token in zip(rows, tokens, strict=True))

    def draws(self, body: dict) -> tuple[list[int], list[Any]]:
        """The reference's tokens of the completion request `body`, prepared as conform prepares it
        (the core's sampling defaults, its prompt tokens), and each token's draw inputs."""
        from conformance.e2e import prepare_workload

        assert self.engine is not None and self.site is not None
        (copy,) = prepare_workload(self.core, Workload("probe", (_request("probe", body),)), copies=1)
        generation = replace(copy.requests[0].generation, ignore_eos=True)
        tokens = list(self.engine.generate(generation))
        kept = self.engine.kept[len(self.engine.kept) - len(tokens):]
        return tokens, [self.site.row(round_kept, 0) for round_kept in kept]

    def clear(self, draw: Any, token: int) -> bool:
        """Whether the draw of `token` is no numeric tie (conformance/draw.py) with any likely rival."""
        from conformance.draw import is_draw_tie, tie_limit

        if draw is None:
            return True
        z = draw.filtered(draw.logits).astype(np.float64)
        if draw.greedy:  # the margin of a greedy row is half its winning gap (conformance/draw.py)
            rest = np.delete(z, token)
            return rest.size == 0 or (z[token] - rest.max()) / 2 > tie_limit(draw, self.dtype)
        # The likeliest other ids (a sampler's cumulative order need not be the ids' order) and the
        # neighbouring ids (where it is).
        z[token] = -np.inf
        rivals = {token - 1, token + 1, *np.argsort(-z, kind="stable")[:RIVALS].tolist()}
        vocabulary = draw.logits.shape[0]
        return not any(is_draw_tie(draw, token, int(rival), self.dtype)[0] for rival in rivals
                       if 0 <= rival < vocabulary and rival != token)


CANDIDATES = 16  # prompts tried for the stop requests, whose greedy draws must be clear of numeric ties
RIVALS = 8  # the likeliest other ids a draw is judged against
GREEDY_CANDIDATES = 4  # prompts tried for a greedy one (a chunked prompt is long: fewer)


def _clear_prompt(draws: _Draws, prompts: list[list[int]], tokens: int = 2) -> list[int]:
    """The first prompt whose first `tokens` greedy draws are clear of numeric ties (else the first)."""
    body = {"max_tokens": tokens, "temperature": 0}
    return next((p for p in prompts if draws.robust({**body, "prompt": p})), prompts[0])


def _stop_requests(core: CoreSource, geometry: Geometry, draws: _Draws) -> list[WorkloadRequest]:
    """Token, sequence and string stops taken from the reference's own greedy stream of one prompt:
    the first of a few prompts whose draws are clear of numeric ties and whose text holds a printable
    character after its first one (the string stop)."""
    from helios.frontend.bootstrap import Bootstrap

    known = Bootstrap.from_core(core).vocab_size  # stop ids must be ids the tokenizer knows
    chosen = None
    for salt in range(CANDIDATES):
        base = {"prompt": geometry.prompt(3, salt=2 + salt), "max_tokens": 3, "temperature": 0}
        if not draws.robust(base):
            continue
        probe = Workload("probe", (_request("probe", {**base, "ignore_eos": True}),))
        (result,) = _reference_results(core, probe)
        stop = next((ch for ch in result.text[1:] if ch.strip() and ch != "\ufffd"), None)
        if len(result.token_ids) >= 2 and max(result.token_ids[:2]) < known and (stop is not None or chosen is None):
            chosen = base, result.token_ids, stop
            if stop is not None:
                break
    if chosen is None:
        return []
    base, tokens, stop = chosen
    out = [_request("token-stop", {**base, "stop_token_ids": [tokens[1]]}),
           _request("sequence-stop", {**base, "stop_token_sequences": [[tokens[0], tokens[1]]]})]
    if stop is not None:
        out.append(_request("string-stop", {**base, "stop": [stop]}))
    return out


COPYING_RUN = 4  # ids in the run the copying request's prompt states three times
COPYING_TOKENS = 16  # its output, at most: room for its stream to repeat a pair of ids


def _copying_request(core: CoreSource, geometry: Geometry, draws: _Draws) -> WorkloadRequest:
    """`copying` (module docstring): the first of a few prompts whose reference stream (as served:
    greedy, EOS ending it) would have history drafting propose before its last token, matching as an
    unconstrained lane beside a learned draft does (`DRAFTED_MIN_NGRAM` ids), and whose draws are
    clear of numeric ties; else the first prompt (the coverage table then says whether a run copied)."""
    from helios.runtime.history_drafting import HistoryIndex

    prompt_length = COPYING_RUN * 3
    tokens = max(1, min(COPYING_TOKENS, geometry.context_tokens - prompt_length - 2))
    bodies = [{"prompt": geometry.prompt(COPYING_RUN, salt=20 + salt) * 3, "max_tokens": tokens, "temperature": 0}
              for salt in range(GREEDY_CANDIDATES)]
    for body in bodies:
        (result,) = _reference_results(core, Workload("probe", (_request("probe", body),)))
        history, index = list(body["prompt"]), HistoryIndex()
        proposes = False
        for token in result.token_ids[:-1]:  # a proposal needs a token after it to verify
            history.append(token)
            if index.propose(history, 1, drafted=True):
                proposes = True
                break
        if proposes and draws.robust(body):
            return _request("copying", body)
    return _request("copying", bodies[0])


def _eos_requests(core: CoreSource, geometry: Geometry, draws: _Draws) -> list[WorkloadRequest]:
    """One request per EOS id whose first draw, on the reference, is that id (clear of a numeric tie
    where a seed gives one)."""
    engine = draws.engine if draws.site is not None and draws.site.op == "sample" else None
    out = []
    for eos in geometry.eos_ids:
        found: tuple[list[int], int] | None = None
        for salt in range(3 if engine is not None else 0):
            prompt = geometry.prompt(3, salt=10 + salt)
            _, (draw,) = draws.draws({"prompt": prompt, "max_tokens": 1, **EOS_SAMPLING, "seed": 1})
            if draw is None:
                break
            matching = (s for s in range(1, EOS_SEEDS) if replace(draw, seed=s).draw(draw.logits) == eos)
            seeds = list(itertools.islice(matching, EOS_CANDIDATES))  # stops at the first few that draw it
            seed = next((s for s in seeds if draws.clear(replace(draw, seed=s), eos)), seeds[0] if seeds else None)
            if seed is not None:
                found = (prompt, seed)
                break
        prompt, seed = found or (geometry.prompt(3, salt=10), 1)
        out.append(_request(f"eos-{eos}", {"prompt": prompt, "max_tokens": 2, **EOS_SAMPLING, "seed": seed}))
    return out


def _shortest(core: CoreSource, name: str, body: dict, *, needs_call: bool) -> list[WorkloadRequest]:
    """The chat request `body` under the seed whose reference run finishes soonest (and, with
    `needs_call`, parses a tool call); the first seed when none does; none when the core cannot
    prepare it (e.g. its template renders a prompt longer than the context): the coverage table
    then shows the mechanism not reached."""
    from conformance.e2e import preparer_for
    from helios.errors import HeliosError
    from helios.frontend.openai_request import parse_chat_request

    try:  # the output limit fits what the rendered prompt leaves of the context
        probe = parse_chat_request({**body, "seed": 0, "max_tokens": 1})  # the rendered prompt's length only
        prompt = preparer_for(core).prepare_chat(probe, "probe").prompt_token_ids
    except HeliosError:
        return []
    body = {**body, "max_tokens": max(1, min(body["max_tokens"], core.contract.context_tokens - len(prompt)))}
    candidates = [_request(f"{name}-{seed}", {**body, "temperature": 1.0, "seed": seed}) for seed in PROBE_SEEDS]
    try:
        results = _reference_results(core, Workload("probe", tuple(candidates), max_active=1))
    except HeliosError:
        return []
    best, best_length = candidates[0], None
    for candidate, result in zip(candidates, results, strict=True):
        if result.outcome != "finished" or (needs_call and not result.tool_calls):
            continue
        if best_length is None or len(result.token_ids) < best_length:
            best, best_length = candidate, len(result.token_ids)
    return [replace(best, name=name)]


def _pressure(core: CoreSource, geometry: Geometry) -> Workload:
    """Two requests on two pages: the older one's second decode needs the page the younger holds.
    Candidates are tried on the reference's batching run (the production scheduler over the
    reference executor); the first that preempts and readmits is kept."""
    page = geometry.page_tokens
    shapes = [(max(1, page - 1), max(1, page - 1), 2, 3), (page, max(1, page - 1), 2, 3),
              (max(1, page - 1), max(1, page - 1), 3, page + 3)]
    first: Workload | None = None
    for a, b, pages, growth in shapes:
        if a + growth > pages * page or a + growth > geometry.context_tokens:
            continue
        workload = Workload("pressure", (
            _request("older", {"prompt": geometry.prompt(a, salt=20), "max_tokens": growth, "temperature": 0,
                               "ignore_eos": True}),
            _request("younger", {"prompt": geometry.prompt(b, salt=21), "max_tokens": 2, "temperature": 0.8,
                                 "seed": 5, "ignore_eos": True})),
            max_active=2, queue_capacity=2, pages=pages,
            description="two cache pages: the older request's growth preempts the younger, which is readmitted")
        first = first or workload
        if _preempts(core, workload):
            return workload
    assert first is not None
    return first


def _snapshot(core: CoreSource, geometry: Geometry) -> Workload | None:
    """Two requests on five pages, each reaching three: the younger takes its third page first, so the
    older's growth preempts it with its endpoint inside a page; its partial page is snapshotted,
    released and restored at readmission, and it resumes with nothing recomputed. A greedy older and a
    seeded younger; the first shape whose reference batching run restores is kept (None: none does)."""
    page = geometry.page_tokens
    for older, younger in ((max(1, page - 1), page + 2), (1, page + 1), (max(1, page - 2), page + 3)):
        growth = 3 * page - older + 1  # each consumes 3 * page positions: three pages
        young_growth = 3 * page - younger + 1
        if young_growth < 2 or older + growth > geometry.context_tokens or younger > geometry.chunk_tokens:
            continue
        workload = Workload("snapshot", (
            _request("older", {"prompt": geometry.prompt(older, salt=22), "max_tokens": growth, "temperature": 0,
                               "ignore_eos": True}),
            _request("younger", {"prompt": geometry.prompt(younger, salt=23), "max_tokens": young_growth,
                                 "temperature": 0.8, "seed": 3, "ignore_eos": True})),
            max_active=2, queue_capacity=2, pages=5,
            description="five cache pages: the older request's growth preempts the younger mid-page; its "
                        "partial page is snapshotted, released and restored, nothing recomputed")
        counters = _batching_counters(core, workload)
        if counters is not None and counters.snapshots_restored > 0 and counters.recomputed_tokens == 0:
            return workload
    return None


TIER_PAGES = 3  # device pages of the `tiers` workload: one two-page prompt's pages, so the next evicts them
TIER_HOST_PAGES = 8  # its host tier: every checkpoint the workload evicts


def _tiers(core: CoreSource, geometry: Geometry, draws: _Draws, *, midpage: bool, host: bool) -> Workload | None:
    """Prefixes served from the storage tiers past the device's published pages, one request at a time
    on three cache pages (each request `after` the previous, so it sees what that one published at
    its last fence):

      turn-1, turn-2  a greedy prompt of a page and one id, two tokens: its endpoint, a page and two,
                      falls inside its second page, which is published as a continuation at its
                      fence; turn-2 (seeded) re-sends turn-1's prompt and tokens (learned on the
                      reference) and one id more: the first page is a prefix hit, the partial one
                      a mid-page hit restored from its continuation row, the prefill starting at
                      the endpoint
      long, filler, resent
                      a greedy prompt of two pages and one id, then another as long: the filler
                      needs every device page, so long's two checkpoints are evicted into the host
                      tier; resent repeats long, and its prefix hit readmits both from the host
      turn-2-again    turn-2 once more: the later publications took turn-1's continuation row, so
                      the continuation moved to the host tier, and the hit copies it from there
                      straight into the request's private page

    Kept where the reference's batching run (the production scheduler over the reference executor,
    its host tier NumPy arrays) reaches what it exists for (None: it reaches neither)."""
    page = geometry.page_tokens
    requests: list[WorkloadRequest] = []
    if midpage:  # the first prompt whose draws are clear of ties and ids a prompt may carry
        from helios.frontend.bootstrap import Bootstrap

        known = Bootstrap.from_core(core).vocab_size
        for salt in range(CANDIDATES):
            body = {"prompt": geometry.prompt(page + 1, salt=40 + salt), "max_tokens": 2, "temperature": 0,
                    "ignore_eos": True}
            if not draws.robust(body):
                continue
            (result,) = _reference_results(core, Workload("probe", (_request("probe", body),)))
            if len(result.token_ids) == 2 and max(result.token_ids) < known:
                second = [*body["prompt"], *result.token_ids, *geometry.prompt(1, salt=31)]
                requests += [_request("turn-1", body),
                             _request("turn-2", {"prompt": second, "max_tokens": 2, "temperature": 0.8, "seed": 3,
                                                 "ignore_eos": True}, after="turn-1")]
                break
    if host:
        long = _clear_prompt(draws, [geometry.prompt(2 * page + 1, salt=32 + salt)
                                     for salt in range(GREEDY_CANDIDATES)], tokens=1)
        body = {"prompt": long, "max_tokens": 1, "temperature": 0, "ignore_eos": True}
        chain = [("long", body), ("filler", {**body, "prompt": geometry.prompt(2 * page + 1, salt=36)}),
                 ("resent", body)]
        if midpage and len(requests) == 2:  # turn-2 again: turn-1's continuation, evicted from its row since
            chain.append(("turn-2-again", requests[1].body))  # by later publications, is in the host tier
        for name, request in chain:
            requests.append(_request(name, request, after=requests[-1].name if requests else None))
    workload = Workload("tiers", tuple(requests), max_active=1, queue_capacity=len(requests), pages=TIER_PAGES,
                        host_pages=TIER_HOST_PAGES,
                        description="three cache pages, one request at a time: a prompt extending a finished "
                                    "request's partial last page restores it from its continuation row; a "
                                    "re-sent prompt readmits its evicted checkpoints from the host tier")
    runtime = _batching_run(core, workload)
    if runtime is None:
        return None
    hits, readmitted = runtime.scheduler.counters.continuation_hits, runtime.scheduler.cache.host.readmitted
    return workload if (midpage and hits) or (host and readmitted) else None


def _preempts(core: CoreSource, workload: Workload) -> bool:
    counters = _batching_counters(core, workload)
    return counters is not None and counters.preemptions > 0 and counters.readmissions > 0


def _batching_counters(core: CoreSource, workload: Workload):
    """The scheduler counters of `workload` on the reference's batching run (the production scheduler
    over the reference executor), None unless every request finished."""
    runtime = _batching_run(core, workload)
    return None if runtime is None else runtime.scheduler.counters


def _batching_run(core: CoreSource, workload: Workload):
    """The reference's batching runtime (the production scheduler over the reference executor, with
    the workload's pages and host tier) once it has run `workload`, None unless every request finished."""
    from conformance.e2e import drive_copy, prepare_workload
    from helios.contract import PreparedContract
    from helios.engine.worker import BatchingRuntime
    from helios.reference.executor import ReferenceExecutor
    from helios.runtime.limits import AdmissionLimits

    assert workload.pages is not None
    executor = ReferenceExecutor.load(core, pages=workload.pages, frames=max(1, core.manifest.transport.frames),
                                      host_pages=workload.host_pages or 0)
    contract = PreparedContract.decode(core.contract, core.manifest)
    limits = AdmissionLimits(max_active=workload.max_active, queue_capacity=max(2, len(workload.requests)))
    runtime = BatchingRuntime.for_executor(executor, contract, limits, pages=workload.pages)
    (copy,) = prepare_workload(core, workload, copies=1)
    results = drive_copy(runtime, copy, timeout_s=120)
    return runtime if all(r.outcome == "finished" for r in results) else None

