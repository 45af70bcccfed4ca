"""The coverage table (host side, NumPy only): which mechanisms each level actually exercised.

    observed = Observed()
    observed.trace(records, audited_rounds, counters)          # per workload, what the trace level audited
    observed.e2e(workload, copy, results, verdicts, records, counters)
    table = observed.coverage(levels, unsupported, eos_ids, required=True)

Observed from what ran, never from what a workload intended:

  mechanism        trace level (audited rounds)                    e2e level (requests that passed)
  chunked prefill  a lane whose prompt chunk is not the prompt's    the same, on a lane of the request
                   last
  prefix reuse     a slot generation's first chunk starting past    production's Finished.reused_prompt_tokens > 0
                   reused prompt positions (consumed > 0)
  preemption       the scheduler's preemptions and readmissions     the same, every request of the workload passed
                   (runtime.scheduler.counters), the whole trace
                   audited
  snapshot restore a restore lane (a RESTORATION round)              the same, every request passed, snapshots restored
  mid-page hit     a restore lane reading a continuation row that   the same, on a lane of the request
                   a snapshot lane of another prompt wrote (a
                   published partial page)
  host readmission a round carrying a host-tier readmission (the    the same, on a lane of the request reading the page
                   readmitted page audited, then read)
  window crossing  a lane reaching past the sliding window          prompt plus output past the window
  eos <id>         a row that sampled <id> with <id> among the      finish reason eos on <id>
                   lane's EOS ids
  token stop       -                                                finish reason stop on one of stop_token_ids
  sequence stop    -                                                finish reason stop, the ids ending in a stop sequence
  string stop      -                                                finish reason stop otherwise (a stop string)
  grammar          a sampling lane with a grammar mask (or the      a grammar-constrained request that finished
                   per-position masks of its copied proposals)
  speculative      a sampling lane of a SPECULATIVE round (its      the same, on a lane of the request
  round            offer, acceptance and emitted ids audited)
  copied proposal  a speculative lane carrying proposals copied     the same, on a lane of the request
                   from its request's tokens (history drafting)
  tool call        -                                                a tool call its output pipeline parsed
  output filter    -                                                a request with an output filter that released text
  no output filter -                                                a token-observed request without an output filter
  scored prefill   -                                                a request whose prompt scores both runtimes gave alike

("-": a host mechanism the trace does not carry.) A mechanism is `exercised`, `not reached`, `not
observed at this level` or, for the whole row, `not supported by the core` (why, from the geometry).
A supported mechanism that no level observing it reached makes the run `incomplete`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

CHUNKED, REUSE, PREEMPTION, WINDOW = "chunked prefill", "prefix reuse", "preemption", "window crossing"
TOKEN_STOP, SEQUENCE_STOP, STRING_STOP = "token stop", "sequence stop", "string stop"
GRAMMAR, TOOL, FILTERED, UNFILTERED = "grammar", "tool call", "output filter", "no output filter"
SCORED = "scored prefill"
RESTORE = "snapshot restore"  # a preempted request's partial page snapshotted, restored and resumed
MIDPAGE = "mid-page hit"  # a prefix ending inside a page served from a published continuation row
HOST = "host readmission"  # a prefix page evicted to the host tier, readmitted on a hit
SPECULATIVE = "speculative round"  # a lane's proposals verified on the device (learned or copied)
COPIED = "copied proposal"  # a speculative lane's proposals copied from its own tokens (history drafting)
MECHANISMS = (CHUNKED, REUSE, PREEMPTION, RESTORE, MIDPAGE, HOST, WINDOW, TOKEN_STOP, SEQUENCE_STOP, STRING_STOP,
              GRAMMAR, TOOL, FILTERED, UNFILTERED, SCORED, SPECULATIVE, COPIED)  # the EOS rows ("eos <id>", one per EOS id) follow WINDOW
# what a request's own lanes show the e2e level (the rest of `_lane_mechanisms` it reads from the result)
LANE_E2E = frozenset({CHUNKED, SPECULATIVE, COPIED})
# NOTE: the trace audit compares a scored round's completion rows, not its prompt scores: scores are
# compared end to end only.
HOST_ONLY = frozenset({TOKEN_STOP, SEQUENCE_STOP, STRING_STOP, TOOL, FILTERED, UNFILTERED, SCORED})
WORKLOAD_LEVELS = ("trace", "e2e")

EXERCISED, NOT_REACHED, NOT_OBSERVED = "exercised", "not reached", "not observed at this level"
NOT_SUPPORTED = "not supported by the core"


def eos_mechanism(token_id: int) -> str:
    return f"eos {token_id}"


def observable(mechanism: str, level: str) -> bool:
    return not (level == "trace" and mechanism in HOST_ONLY)


def _lane_mechanisms(lanes: Iterable[Any], rows: Iterable[Any], window: int | None) -> set[str]:
    """What lanes (each with its completion row) exercised on the device."""
    out: set[str] = set()
    for lane, row in zip(lanes, rows, strict=False):
        prompt = len(lane.prompt_token_ids)
        if lane.prompt_tokens_in_round and lane.consumed + lane.prompt_tokens_in_round < prompt:
            out.add(CHUNKED)
        if window is not None and lane.tokens and lane.consumed + len(lane.tokens) > window:
            out.add(WINDOW)
        if (lane.grammar_mask is not None or lane.candidate_masks is not None) and lane.samples:
            out.add(GRAMMAR)
        if row.emitted and lane.samples and row.sampled_id in lane.eos_ids:
            out.add(eos_mechanism(int(row.sampled_id)))
        if lane.samples and row.offer >= 0:  # only a SPECULATIVE graph's rows carry an offer
            out.add(SPECULATIVE)
            if lane.copied:
                out.add(COPIED)
    return out


def _reuse_lanes(records: Iterable[Any]) -> list[Any]:
    """The lanes that opened a slot generation past reused prompt positions (the prefix cache)."""
    seen: set[tuple[int, int]] = set()
    out = []
    for record in records:
        for lane in record.lanes:
            if not lane.tokens:
                continue  # an initialization lane
            key = (lane.slot, lane.generation)
            if key in seen:
                continue
            seen.add(key)
            if 0 < lane.consumed and lane.prompt_tokens_in_round:
                out.append(lane)
    return out


def _continuation_hits(records: Iterable[Any]) -> list[Any]:
    """The restore lanes that read a published continuation: a row last written by a snapshot lane of
    another prompt (a preempted request's own snapshot is restored into a lane of its own prompt)."""
    writers: dict[int, tuple[int, ...]] = {}  # continuation row -> the prompt of the lane that last wrote it
    out = []
    for record in records:
        for lane in record.lanes:
            if lane.restore_source >= 0:
                writer = writers.get(lane.restore_source)
                if writer is not None and writer != tuple(lane.prompt_token_ids):
                    out.append(lane)
        for lane in record.lanes:  # never the row a lane of the same round restores from: a restore pins it
            if lane.snapshot_destination >= 0:
                writers[lane.snapshot_destination] = tuple(lane.prompt_token_ids)
    return out


def _readmitting_lanes(records: Sequence[Any]) -> list[Any]:
    """For every host-tier readmission, the first lane at or after its round whose pages hold the
    readmitted page (the request the page was readmitted for)."""
    out = []
    for index, record in enumerate(records):
        for copy in record.copies:
            if not copy.readmit:
                continue
            lane = next((lane for later in records[index:] for lane in later.lanes if copy.page in lane.page_ids),
                        None)
            if lane is not None:
                out.append(lane)
    return out


@dataclass(frozen=True, slots=True)
class CoverageRow:
    mechanism: str
    states: Mapping[str, str]  # level -> EXERCISED, NOT_REACHED, NOT_OBSERVED or NOT_SUPPORTED
    note: str = ""  # why the core does not support it

    @property
    def supported(self) -> bool:
        return not self.note

    def missing(self) -> bool:
        """Supported, observable at a level that ran, and reached at none of them."""
        observing = [state for state in self.states.values() if state != NOT_OBSERVED]
        return self.supported and bool(observing) and EXERCISED not in observing

    def as_json(self) -> dict:
        return {"mechanism": self.mechanism, "supported": self.supported, "note": self.note, **self.states}


@dataclass(frozen=True, slots=True)
class Coverage:
    """The table: one row per mechanism, a column per workload level run; `required`: whether a
    missing mechanism makes the verdict `incomplete` (the generated workloads, or when asked)."""

    levels: tuple[str, ...]
    rows: tuple[CoverageRow, ...]
    required: bool = True

    @property
    def missing(self) -> tuple[str, ...]:
        return tuple(row.mechanism for row in self.rows if row.missing())

    def state(self, mechanism: str, level: str) -> str:
        for row in self.rows:
            if row.mechanism == mechanism:
                return row.states.get(level, NOT_OBSERVED)
        raise KeyError(mechanism)

    def as_json(self) -> dict:
        return {"required": self.required, "levels": list(self.levels), "missing": list(self.missing),
                "rows": [row.as_json() for row in self.rows]}

    def table(self) -> list[str]:
        """The table's lines: a row per mechanism, a column per level ("-": not observed there)."""
        head = ("mechanism", *self.levels)
        cells = {row.mechanism: tuple("-" if row.states[level] == NOT_OBSERVED else row.states[level]
                                      for level in self.levels) for row in self.rows if row.supported}
        widths = [max(len(row.mechanism) for row in self.rows) if self.rows else len(head[0])]
        widths += [max([len(head[i + 1]), *(len(c[i]) for c in cells.values())]) for i in range(len(self.levels))]
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(head, widths, strict=True)).rstrip()]
        for row in self.rows:
            rest = cells[row.mechanism] if row.supported else (row.note,)
            lines.append("  ".join([row.mechanism.ljust(widths[0]),
                                    *(cell.ljust(w) for cell, w in zip(rest, widths[1:], strict=False))]).rstrip())
        return lines


@dataclass(slots=True)
class Observed:
    """What the run exercised, level by level, filled per workload as it runs."""

    seen: dict[str, set[str]] = field(default_factory=lambda: {level: set() for level in WORKLOAD_LEVELS})
    window: int | None = None  # the core's smallest sliding window

    def trace(self, records: Sequence[Any], audited: int | None, counters: Any) -> None:
        """`records` of one workload; `audited`: rounds the audit passed (None: all of them)."""
        passed = records if audited is None else records[:audited]
        seen = self.seen["trace"]
        for record in passed:
            seen |= _lane_mechanisms(record.lanes, record.rows, self.window)
        if _reuse_lanes(passed):
            seen.add(REUSE)
        if audited is None and counters is not None and counters.preemptions and counters.readmissions:
            seen.add(PREEMPTION)
        if any(lane.restore_source >= 0 for record in passed for lane in record.lanes):
            seen.add(RESTORE)  # a restore lane's page was audited, and every round after it
        if _continuation_hits(passed):
            seen.add(MIDPAGE)
        if _readmitting_lanes(passed):
            seen.add(HOST)  # the readmitted page's content was audited, and the rounds reading it

    def e2e(self, workload: Any, prepared: Sequence[Any], results: Sequence[Any], verdicts: Sequence[str],
            records: Sequence[Any], counters: Any) -> None:
        """One workload's compared requests: `prepared[i]` (production's PreparedRequest), `results[i]`
        (production's RequestResult), `verdicts[i]` (its e2e case); `records`: production's trace."""
        seen = self.seen["e2e"]
        by_prompt: dict[tuple[int, ...], list[Any]] = {}
        for record in records:
            for lane, row in zip(record.lanes, record.rows, strict=False):
                by_prompt.setdefault(tuple(lane.prompt_token_ids), []).append((lane, row))
        hits = {tuple(lane.prompt_token_ids) for lane in _continuation_hits(records)}
        readmitted = {tuple(lane.prompt_token_ids) for lane in _readmitting_lanes(records)}
        for request, item, result, verdict in zip(workload.requests, prepared, results, verdicts, strict=True):
            if verdict != "pass" or result.outcome != "finished":
                continue
            prompt = tuple(item.generation.prompt_token_ids)
            lanes = by_prompt.get(prompt, [])
            device = _lane_mechanisms([lane for lane, _ in lanes], [row for _, row in lanes], self.window)
            seen |= device & LANE_E2E
            if prompt in hits:
                seen.add(MIDPAGE)
            if prompt in readmitted:
                seen.add(HOST)
            if result.reused_prompt_tokens > 0:
                seen.add(REUSE)
            if self.window is not None and result.prompt_tokens + result.output_tokens - 1 > self.window:
                seen.add(WINDOW)
            seen |= self._ending(request.body, item, result)
            if item.grammar is not None:
                seen.add(GRAMMAR)
            if result.tool_calls:
                seen.add(TOOL)
            if item.output_filter is not None and result.text:
                seen.add(FILTERED)
            if item.output_filter is None and result.token_ids:
                seen.add(UNFILTERED)
            if result.prompt_scores:
                seen.add(SCORED)
        if (counters is not None and counters.preemptions and counters.readmissions
                and all(v == "pass" for v in verdicts)):
            seen.add(PREEMPTION)
            if getattr(counters, "snapshots_restored", 0):
                seen.add(RESTORE)

    @staticmethod
    def _ending(body: Mapping[str, Any], item: Any, result: Any) -> set[str]:
        ids = result.token_ids
        if result.finish_reason == "eos" and ids and ids[-1] in item.generation.eos_token_ids:
            return {eos_mechanism(int(ids[-1]))}
        if result.finish_reason != "stop" or not ids:
            return set()
        out = set()
        if ids[-1] in (body.get("stop_token_ids") or ()):
            out.add(TOKEN_STOP)
        if any(list(ids[-len(s):]) == list(s) for s in (body.get("stop_token_sequences") or ()) if s):
            out.add(SEQUENCE_STOP)
        if not out and body.get("stop"):
            out.add(STRING_STOP)
        return out

    def coverage(self, levels: Sequence[str], unsupported: Mapping[str, str], eos_ids: Sequence[int], *,
                 required: bool) -> Coverage:
        run = tuple(level for level in WORKLOAD_LEVELS if level in levels)
        after = MECHANISMS.index(WINDOW) + 1
        names = [*MECHANISMS[:after], *(eos_mechanism(e) for e in eos_ids), *MECHANISMS[after:]]
        rows = []
        for name in names:
            note = unsupported.get(name, "")
            states = {level: (NOT_OBSERVED if not observable(name, level) else
                              NOT_SUPPORTED if note else EXERCISED if name in self.seen[level] else NOT_REACHED)
                      for level in run}
            rows.append(CoverageRow(name, states, note))
        return Coverage(run, tuple(rows), required)
