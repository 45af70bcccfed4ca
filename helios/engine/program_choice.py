"""Speculative program choice from measured costs (host side, no torch): which program the decode
lanes ready to speculate run next, DECODE or SPECULATIVE of some width W, chosen from completed
observations before that program generates proposals.

    choice = ProgramChoice(catalog, costs, lifetime=None, served=ServedCosts())
    best = choice.choose(acceptances, rooms)      # a Candidate, or None: costs unknown or stale
    copies = CopiedChoice().copies(sources)       # history drafting: copies or the learned draft
    memory = ChoiceMemory()                       # what a scheduler learns: served costs, pooled acceptance

Acceptance. Each request keeps an `AcceptanceEstimate` of a (the probability that its draft's next
proposal is accepted, the same at every position): a completed speculative lane that was offered d
proposals and accepted k of them observed k acceptances and, when k < d, one rejection (verification
stops at the first). The estimate is the posterior mean (accepted + w * prior) / (accepted +
rejected + w) of a Beta prior whose weight w is PRIOR_ROUNDS rounds of the prior's own draft: a
draft of acceptance p is rejected once for every p / (1 - p) proposals it has accepted, so
PRIOR_ROUNDS rounds of it are w = PRIOR_ROUNDS / (1 - p) observations (`prior_weight`, at most
PRIOR_WEIGHT_LIMIT). The prior is the acceptance pooled over every completed lane of the scheduler
(itself starting from a uniform prior, mean 1/2), so a new request starts from what the draft has
done so far and its own rounds take over after a few. Rounds, not a fixed count: with a fixed four,
one round rejected at its first proposal gave 4 p / 5 = 0.66 at p = 0.82, below W8's break-even
against plain decoding at one request (a fixed two had sent requests of about 50 tokens, 7 W8
rounds, to plain decoding after one or two early rejections: BENCHMARKS.md, issue #18); two rounds
of the pooled draft give the four of before at p = 1/2 and 11 at p = 0.82 (one immediate rejection:
0.75). Measured after the change on an H100, the copying workload at one request still ran one or
two plain stints in a run of 32 requests (longer runs of rejections). A request whose draft really
accepts poorly (a = 0.3 among requests pooled at 0.82) is sent to plain decoding after three or four
rounds. While plain decoding is chosen nothing new is observed, so the pooled counts decay (by
POOLED_DECAY for each PLAIN_TOKENS tokens of the plain stint chosen, `plain_decay`: the scheduler's
stints start at PLAIN_TOKENS, the sequential engine chooses again after each plain token) back
toward the uniform prior, and the request's own counts alike toward the pooled mean: a draft judged
poor, on earlier requests or on a request's first rounds, is tried again once the evidence has aged,
instead of never. While the pooled evidence is under EXPLORATION_EVIDENCE observations (a fresh
runtime, or evidence aged that far), acceptance is unknown and no rate can be expected: the lanes
run the configured width (`explores`), as with unknown costs, and their completed round is the
observation the choice then rests on. Without this a uniform prior that makes plain decoding win
would never be tested, however well the draft accepts; with it, a poor draft costs one round at the
configured width after each ~15 plain stints' worth of aging.

Expected tokens. A lane whose next round offers it `limit` target rows (the pending token and
limit - 1 proposals) emits sum_{k=0}^{limit-1} a^k tokens in expectation: the pending token always,
proposal k only if the k before it were accepted. A DECODE lane emits 1. Where the program's P rows
cannot hold every lane's limit (a confidence program), rows go one at a time to the lane whose next
row has the highest survival probability a^len, as the device allocates (the largest sum).

Choice. For the cohort (lanes in scheduling order), each candidate is the smallest variant of its
program holding as many of the cohort's lanes as it can: DECODE, and SPECULATIVE at each selected
width W; its rate is its expected emitted tokens over its measured round cost. The choice is the
candidate of the highest rate (or a wider program not yet measured: "Unmeasured wider programs"
below); plain decoding wins ties, so speculation is never chosen where its expected rate is below
(or equal to) plain decoding's. Lane limits stay the largest the contract
allows (min(D + 1, W), the output and context left): a captured round costs the same whatever its
lanes' limits, and expected tokens grow with every row, so no lower limit raises a round's rate.

Costs from served rounds. The table measured at load times each graph's replay on the device
alone; a served round also costs the host's work for it (scheduling, packing, validation, delivery),
and a speculative lane waits for its round's completion before its next one (no second frame), so
its rounds overlap nothing while plain decoding's are pipelined. Both runtimes' engines therefore
keep every completed round's wall time in `ServedCosts` (the choice's `served`, also exported as
metrics): the time from the previous completion (or from the round's scheduling, after an idle
worker) to its own, which in steady state is what the round cost
the serving loop, overlap included (measured on an H200, the 10.6M demo pair at 128 requests: plain
decode rounds took 5.5 ms of wall time and W2 rounds 7.5 ms; BENCHMARKS.md, issue #18). Once a graph
has OBSERVED_ROUNDS observations its cost is their moving average (weight OBSERVED_WEIGHT for the
newest); until then it costs its table entry, calibrated by its program's other graphs.

Calibrated table costs. Served rounds do not cost their table entries in one proportion: the host's
share, the frames' overlap and rounds of other kinds completing in a round's interval differ by
program. Measured on an H100 with the demo pair (BENCHMARKS.md, issue #18), a graph's served cost
was 1.9 to 5.7 times its table entry for DECODE, about 1.5 for W2, 1.0 to 1.2 for W4 and 0.54 to
0.86 for W8: against raw table entries an unserved W8 graph looked almost twice as slow as it
serves while the W4 graph beside it was served, and was never chosen to be measured (the adaptive
choice at 128 requests ran W4 at 0.90 of W8's rate). So a graph without a served cost of its own
costs its table entry times the served/table ratio of the served graph of its operation and width
nearest it in lanes (`calibration`; its raw entry where none is served): a graph not yet served
looks as its program serves, is chosen when that makes it best, and is then measured.

Stale served costs expire. A graph's served cost is refreshed only while it is chosen, so one
inflated observation (a collector pause, a page fault, an admission burst landing in its interval)
could keep a program unchosen for the rest of a run, its cost never measured again: the choice would
ratchet down to narrower widths and stay there. Two rules keep the estimate honest. Once a graph
has OBSERVED_ROUNDS observations, an observation counts at most SPIKE_LIMIT times its current
estimate (the pause is real time, but not this graph's round). And a graph not served for
STALE_ROUNDS served rounds of other graphs has its observations forgotten: it costs its (calibrated)
table entry again, is chosen when that makes it best and is measured anew, as a graph never served
is. A program that really is slower is re-measured at longer and longer intervals: each time a
graph's observations are forgotten its next expiry waits twice as long, up to STALE_LIMIT rounds,
and a graph served while it has a served cost of its own (chosen on its measured cost) waits
STALE_ROUNDS again. With a fixed interval, the demo pair at one request on an H100 re-measured W2
and W4 in 12 rounds each of about 600, W8 chosen in the rest (BENCHMARKS.md, issue #18): rounds of a
third and three fifths of W8's tokens at acceptance 0.9, about 1% of the rate in every run however
long; backed off, a slower program costs OBSERVED_ROUNDS rounds per doubling interval, a share that
vanishes as a server runs. Aging the estimate toward an optimistic floor instead would retry it far
more often (the table is far below served costs where the host's share is large, and the fastest
interval of pipelined rounds can be near zero). A forgotten graph is calibrated by its program's
other graphs' observations while theirs are not forgotten, and never by its own forgotten ones.

Unmeasured wider programs. A program none of whose graphs has a served cost costs its raw table
entry, and the table overstates what wide programs serve at (above): measured on an H100 with the
demo pair at 32 requests (BENCHMARKS.md, issue #18), W4's 32-lane graph served at 1.50 ms against
its table's 1.23 and W8's at 1.13 ms against 2.08; W8's table entry ranked it level with W4, so the
choice ran W4 in 88 and 91 rounds of two runs' 95 and 99, W8 unserved and never measured (0.78 and
0.84 of fixed W8's rate in the same repeats). So when a candidate wider than the best (more expected
tokens) is unmeasured and its table rate is above plain decoding's, it is chosen (`exploration`)
until its own rounds or its program's calibrate it: at most OBSERVED_ROUNDS rounds for each such
program, again only once its observations are forgotten (STALE_ROUNDS). Narrower programs need no
such rule: the table understates what they serve at (DECODE and W2 serve at 1.5 to 7 times their
entries), so they are chosen when it ranks them best and are measured then. A choice is thus the
best candidate or an exploration, and speculation only at a rate above plain decoding's by the costs
it was chosen with.

Unknown or stale costs. Without a measured cost for every candidate's graph, or with a table older
than `lifetime` seconds, `choose` returns None and the scheduler runs the configured (fallback)
width. Either way the lanes ready to speculate have no outstanding round: the choice (or the
fallback) is made on completed observations, the completion feedback the specification requires.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from helios.engine.catalog import GraphCatalog, GraphVariant
from helios.proto import contract_pb2
from helios.runtime.costs import RoundCosts, ServedCost

C = contract_pb2

PRIOR_ROUNDS = 2.0  # rounds of the pooled draft the prior weighs as, in each request's estimate
PRIOR_WEIGHT_LIMIT = 16.0  # the prior's observations at most (a pooled acceptance near 1)
POOLED_DECAY = 0.9  # the pooled counts' factor for each PLAIN_TOKENS of a plain stint (nothing observed then)
EXPLORATION_EVIDENCE = 1.0  # pooled observations under which acceptance is unknown (the configured width runs)
OBSERVED_ROUNDS = 3  # served rounds of a graph after which its observed wall time replaces its table cost
OBSERVED_WEIGHT = 0.2  # the newest observation's weight in a graph's moving average
SPIKE_LIMIT = 4.0  # an observation counts at most this many times the graph's estimate (once it has one)
STALE_ROUNDS = 256  # served rounds of other graphs after which a graph's observations are forgotten
STALE_LIMIT = 16 * STALE_ROUNDS  # the longest a graph's expiry waits, doubled at each forgetting
PLAIN_TOKENS = 8  # tokens of plain stint that age the pooled counts by one POOLED_DECAY


@dataclass(slots=True)
class AcceptanceEstimate:
    """Observed proposal acceptance: accepted proposals and rejections (see the module docstring)."""

    accepted: float = 0.0  # proposals accepted (decayed counts are fractional)
    rejected: float = 0.0  # rounds whose verification rejected a proposal (at most one a round)

    def observe(self, offered: int, accepted: int) -> None:
        """A completed lane that was offered `offered` proposals and accepted `accepted` of them."""
        if not 0 <= accepted <= offered:
            raise ValueError(f"accepted {accepted} of {offered} offered proposals")
        self.accepted += accepted
        self.rejected += int(accepted < offered)

    def decay(self, factor: float = POOLED_DECAY) -> None:
        """Age the evidence: both counts scaled by `factor` in [0, 1]."""
        self.accepted *= factor
        self.rejected *= factor

    @property
    def evidence(self) -> float:
        """Observations behind the estimate (decayed counts included)."""
        return self.accepted + self.rejected

    def mean(self, prior: float, weight: float | None = None) -> float:
        """The posterior mean of the acceptance probability, `weight` pseudo-observations at `prior`
        (default `prior_weight(prior)`)."""
        if weight is None:
            weight = prior_weight(prior)
        return (self.accepted + weight * prior) / (self.accepted + self.rejected + weight)


def prior_weight(prior: float) -> float:
    """Observations PRIOR_ROUNDS rounds of a draft of acceptance `prior` make (PRIOR_ROUNDS rejections
    and the prior / (1 - prior) proposals accepted for each), at most PRIOR_WEIGHT_LIMIT."""
    if prior >= 1.0:
        return PRIOR_WEIGHT_LIMIT
    return min(PRIOR_ROUNDS / (1.0 - prior), PRIOR_WEIGHT_LIMIT)


def expected_tokens(acceptance: float, limit: int) -> float:
    """Expected emitted tokens of a lane offered `limit` rows: sum_{k=0}^{limit-1} a^k, in closed form
    (1 - a^limit) / (1 - a) (`limit` at a = 1): the choice weighs every lane of a cohort this way
    for each width, every round."""
    if acceptance >= 1.0:
        return float(limit)
    return (1.0 - acceptance ** limit) / (1.0 - acceptance)


VECTOR_LANES = 48  # cohorts from this many lanes weigh their widths from one NumPy pass (`_power_sums`)


def _power_sums(acceptances: Sequence[float], terms: int) -> list[float]:
    """Running sums over k < `terms` of sum_i a_i ** k: entry L - 1 is sum_i expected_tokens(a_i, L),
    every lane offered L rows within P (in one NumPy pass for every width a cohort weighs: a Python
    pass per width and lane was most of a 256-lane choice's 0.17 ms on a 2-core development machine)."""
    a = np.asarray(acceptances, dtype=np.float64)
    powers = np.empty((terms, a.size))
    powers[0] = 1.0
    for k in range(1, terms):
        np.multiply(powers[k - 1], a, out=powers[k])
    return np.cumsum(powers.sum(axis=1)).tolist()


def expected_round_tokens(acceptances: Sequence[float], limits: Sequence[int], packed: int) -> float:
    """Expected emitted tokens of a speculative round whose lanes have these acceptances and limits,
    within `packed` target rows (P): every lane its pending row, then rows by survival probability."""
    if len(acceptances) != len(limits):
        raise ValueError(f"{len(acceptances)} acceptances for {len(limits)} lane limits")
    if sum(limits) <= packed:
        return sum(map(expected_tokens, acceptances, limits))
    rows = len(limits)  # every lane's pending row (P >= B holds every lane's)
    total = float(rows)
    # the next row of lane i survives with probability a_i ** length_i (length_i rows given so far)
    heap = [(-a, i, 1) for i, (a, limit) in enumerate(zip(acceptances, limits, strict=True)) if limit > 1]
    heapq.heapify(heap)
    while heap and rows < packed:
        negative, i, length = heapq.heappop(heap)
        total -= negative
        rows += 1
        if length + 1 < limits[i]:
            heapq.heappush(heap, (negative * acceptances[i], i, length + 1))
    return total


@dataclass(frozen=True, slots=True)
class Candidate:
    """One program the cohort could run next."""

    variant: GraphVariant  # the DECODE or SPECULATIVE graph
    lanes: int  # the cohort's first `lanes` lanes run in it
    expected: float  # expected emitted tokens of the round
    seconds: float  # its measured round cost
    explores: bool = False  # chosen to be measured: a wider program no served round has measured yet

    @property
    def width(self) -> int:
        """W of a SPECULATIVE candidate; 1 for DECODE."""
        return self.variant.lane_width

    @property
    def speculative(self) -> bool:
        return self.variant.operation == C.OPERATION_SPECULATIVE

    @property
    def rate(self) -> float:
        """Expected emitted tokens per second."""
        return self.expected / self.seconds


def best(candidates: Sequence[Candidate]) -> Candidate:
    """The candidate of the highest rate; DECODE wins ties, then the narrower width."""
    if not candidates:
        raise ValueError("no candidate program")
    return max(candidates, key=lambda c: (c.rate, not c.speculative, -c.width))


@dataclass(slots=True)
class _Served:
    """One graph's served rounds: how many in all (the metric) and since its observations were last
    forgotten, their moving average, the count of every graph's served rounds at its last, and how
    many rounds of other graphs forget them (`stale_after`: STALE_ROUNDS, doubled at each forgetting
    up to STALE_LIMIT, STALE_ROUNDS again once the graph is served on its measured cost)."""

    total: int
    count: int
    mean: float
    at: int
    stale_after: int = STALE_ROUNDS


class ServedCosts:
    """Served rounds' wall time per graph (module docstring, "Costs from served rounds" and "Stale
    served costs expire"), kept by both runtimes' engines for every graph they serve, exported as
    metrics (`entries`) and read by the program choice (`seconds`).

        served.completed(graph, started, now)    # a validated round formed at `started`, completed at `now`
        served.failed(now)                       # a failed round: no cost, but the next interval starts here

    A round's wall time is the interval from the previous completion, or from its own forming when
    that came later (an idle worker's wait is no round's cost), to its completion."""

    def __init__(self) -> None:
        self._observed: dict[str, _Served] = {}
        self._rounds = 0  # served rounds observed, of every graph
        self._last = 0.0  # the clock at the last completion (or failure)

    def _stale(self, served: _Served) -> bool:
        return self._rounds - served.at > served.stale_after

    def observe(self, graph: str, seconds: float) -> None:
        """A served round of `graph` cost `seconds` of wall time; a non-positive interval (a frozen or
        coarse clock) is no observation."""
        if not seconds > 0:
            return
        self._rounds += 1
        served = self._observed.get(graph)
        if served is None:
            self._observed[graph] = _Served(1, 1, seconds, self._rounds)
            return
        if self._stale(served):  # forgotten: measured anew from this round, forgotten later next time
            served.count, served.mean = 0, seconds
            served.stale_after = min(2 * served.stale_after, STALE_LIMIT)
        elif served.count >= OBSERVED_ROUNDS:  # chosen on its own measured cost
            seconds = min(seconds, SPIKE_LIMIT * served.mean)
            served.stale_after = STALE_ROUNDS
        served.mean = seconds if served.count == 0 else served.mean + OBSERVED_WEIGHT * (seconds - served.mean)
        served.count += 1
        served.total += 1
        served.at = self._rounds

    def completed(self, graph: str, started: float, now: float) -> None:
        """A validated round of `graph`, formed at clock `started`, completed at `now`."""
        self.observe(graph, now - max(started, self._last))
        self._last = now

    def failed(self, now: float) -> None:
        """A round failed at `now`: not a cost, but the next round's interval starts here."""
        self._last = now

    def rounds(self, graph: str) -> int:
        """Served rounds of `graph` observed so far."""
        served = self._observed.get(graph)
        return 0 if served is None else served.total

    def seconds(self, graph: str) -> float | None:
        """The moving average once `graph` has OBSERVED_ROUNDS served rounds not forgotten, else None."""
        served = self._observed.get(graph)
        if served is None or served.count < OBSERVED_ROUNDS or self._stale(served):
            return None
        return served.mean

    def entries(self, catalog: GraphCatalog) -> tuple[ServedCost, ...]:
        """Every served graph's rounds and moving average (one round suffices), with its geometry from
        `catalog`; graphs the catalog does not hold are left out."""
        out = []
        for graph, served in sorted(self._observed.items()):
            if not catalog.has_graph(graph):
                continue
            v = catalog.variant(graph)
            out.append(ServedCost(graph, int(v.operation), v.batch_capacity, v.lane_width, served.total, served.mean))
        return tuple(out)


@dataclass(slots=True)
class ProposalSources:
    """One request's acceptance of its copied proposals and of its learned draft's (history drafting;
    `CopiedChoice`); None until a completed round judged one of that source."""

    copied: AcceptanceEstimate | None = None
    learned: AcceptanceEstimate | None = None


class CopiedChoice:
    """Copies or the learned draft, for an unconstrained lane whose history proposes a copied run (both
    runtimes' engines; docs/speculative.md, "Copies or the draft").

    The lane copies while its copied proposals' acceptance (posterior mean over the pool of every
    lane's, as the program choice's acceptance) is at least its learned draft's; the draft's is
    observed from the positions past a fully accepted copied run, or from rounds without one. Until
    a copied proposal has been judged, copies are taken (however well the draft did in earlier
    rounds without a copied run, copies are tried first); while they are skipped their pool ages
    (`skipped`) toward the uniform prior, as plain choices age the program choice's. Every proposal is verified, so the choice
    is lossless whichever way it goes."""

    def __init__(self) -> None:
        self.pooled_copied = AcceptanceEstimate()
        self.pooled_learned = AcceptanceEstimate()
        self.judged = False  # a completed round judged a copied proposal

    def copies(self, sources: ProposalSources) -> bool:
        """Whether the lane takes its copied run this round: always until a copied proposal was judged
        (copies unknown), then by the means."""
        if not self.judged:
            return True
        copied_prior, learned_prior = self.pooled_copied.mean(0.5), self.pooled_learned.mean(0.5)
        copied = sources.copied.mean(copied_prior) if sources.copied is not None else copied_prior
        learned = sources.learned.mean(learned_prior) if sources.learned is not None else learned_prior
        return copied >= learned

    def skipped(self) -> None:
        """A copied run was left to the learned draft: nothing is observed of copies, their pool ages."""
        self.pooled_copied.decay()

    def observe(self, sources: ProposalSources, copied: int, copied_accepted: int, learned: int,
                learned_accepted: int) -> None:
        """A completed speculative lane: `copied` copied proposals judged and `copied_accepted` of them
        kept, then `learned` learned-draft proposals offered (judged only where every copied one was
        kept: verification stops at the first rejection) and `learned_accepted` kept."""
        if copied > 0:
            self.judged = True
            if sources.copied is None:
                sources.copied = AcceptanceEstimate()
            sources.copied.observe(copied, copied_accepted)
            self.pooled_copied.observe(copied, copied_accepted)
        if learned > 0 and copied_accepted == copied:
            if sources.learned is None:
                sources.learned = AcceptanceEstimate()
            sources.learned.observe(learned, learned_accepted)
            self.pooled_learned.observe(learned, learned_accepted)


@dataclass(slots=True)
class ChoiceMemory:
    """What a scheduler's choices learn while it serves: every graph's served round costs, the
    acceptance pooled over its completed speculative lanes and history drafting's pools of copied
    and learned proposals. A scheduler keeps its own unless given one: runtimes serving one executor
    in turn may share one, so each starts where the one before it left off, as one long-lived
    runtime would (not at once: one scheduler at a time updates it)."""

    served: ServedCosts = field(default_factory=ServedCosts)
    pooled: AcceptanceEstimate = field(default_factory=AcceptanceEstimate)
    copied: CopiedChoice = field(default_factory=CopiedChoice)


class ProgramChoice:
    """The cohort's next program from measured costs and observed acceptance (module docstring)."""

    def __init__(self, catalog: GraphCatalog, costs: RoundCosts | None, *, lifetime: float | None = None,
                 clock: Callable[[], float] = time.monotonic, served: ServedCosts | None = None) -> None:
        self.catalog = catalog
        self.costs = costs
        self.lifetime = lifetime
        self.clock = clock
        self.widths = sorted({v.width for v in catalog.variants(C.OPERATION_SPECULATIVE)})
        self._seconds = costs.by_graph() if costs is not None else {}
        self._siblings = self._program_siblings()
        self._programs: dict[int, tuple[tuple[GraphVariant, int], ...]] = {}  # cohort size -> `_cohort_programs`
        self.served = served if served is not None else ServedCosts()

    def observe(self, graph: str, seconds: float) -> None:
        """A served round of `graph` cost `seconds` of wall time (`ServedCosts.observe`)."""
        self.served.observe(graph, seconds)

    def seconds(self, graph: str) -> float | None:
        """A round of `graph`'s cost: its served rounds' moving average once there are OBSERVED_ROUNDS
        of them, else its table cost times `calibration`; None when the table has none (costs unknown)."""
        table = self._seconds.get(graph)
        if table is None:
            return None
        served = self.served.seconds(graph)
        return table * self.calibration(graph) if served is None else served

    def calibration(self, graph: str) -> float:
        """Served cost over table cost of the graph of `graph`'s operation and width nearest it in lanes
        (by lane ratio, the larger on a tie) that has a served cost; 1.0 where none has."""
        for sibling in self._siblings.get(graph, ()):
            served = self.served.seconds(sibling)
            if served is not None:
                return served / self._seconds[sibling]
        return 1.0

    def _program_siblings(self) -> dict[str, tuple[str, ...]]:
        """For each graph of the table, the table's other graphs of its operation and width, nearest in
        lanes first (`calibration`'s order)."""
        programs: dict[tuple[int, int], list[GraphVariant]] = {}
        for name, seconds in self._seconds.items():
            if seconds > 0 and self.catalog.has_graph(name):
                v = self.catalog.variant(name)
                programs.setdefault((v.operation, v.lane_width), []).append(v)
        out = {}
        for variants in programs.values():
            for v in variants:
                others = [o for o in variants if o.name != v.name]
                others.sort(key=lambda o: (abs(math.log2(o.batch_capacity / v.batch_capacity)), -o.batch_capacity))
                out[v.name] = tuple(o.name for o in others)
        return out

    def _cohort_programs(self, n: int) -> tuple[tuple[GraphVariant, int], ...]:
        """The graphs a cohort of `n` lanes could run and the lanes each holds: DECODE first, then
        SPECULATIVE at each width (empty: no DECODE graph). The catalog does not change while the
        choice serves, so `candidates` asks once per cohort size."""
        lanes = min(n, self.catalog.max_lanes(C.OPERATION_DECODE))
        decode = self.catalog.smallest(C.OPERATION_DECODE, lanes=lanes, tokens=lanes)
        if decode is None:
            return ()
        programs: list[tuple[GraphVariant, int]] = [(decode, lanes)]
        for width in self.widths:
            lanes = min(n, self.catalog.speculative_lanes(width))
            variant = self.catalog.speculative(width, lanes=lanes)
            if variant is not None:
                programs.append((variant, lanes))
        return tuple(programs)

    def usable(self) -> bool:
        """A cost table is known and not stale."""
        return self.costs is not None and self.costs.fresh(self.clock(), self.lifetime)

    def candidates(self, acceptances: Sequence[float], rooms: Sequence[int]) -> list[Candidate] | None:
        """Every candidate for a cohort whose lane i has acceptance `acceptances[i]` and room for
        `rooms[i]` >= 1 emitted tokens (output and context left); None when a cost is unknown."""
        n = len(acceptances)
        if n == 0 or len(rooms) != n:
            raise ValueError(f"a cohort of {n} acceptances and {len(rooms)} rooms")
        programs = self._programs.get(n)
        if programs is None:
            programs = self._programs[n] = self._cohort_programs(n)
        if not programs:
            return None
        out = []
        floor = min(rooms)
        sums: dict[int, list[float]] = {}  # lanes -> `_power_sums` of the first lanes, for large cohorts
        for variant, lanes in programs:
            seconds = self.seconds(variant.name)
            if seconds is None:
                return None
            if variant.operation == C.OPERATION_DECODE:
                expected = float(lanes)
            else:
                limit = variant.lane_limit  # the host's cost a round: no per-lane min where every room holds it
                if lanes >= VECTOR_LANES and floor >= limit and lanes * limit <= variant.packed_token_capacity:
                    if lanes not in sums:
                        sums[lanes] = _power_sums(acceptances[:lanes], max(p.lane_limit for p, _ in programs))
                    expected = sums[lanes][limit - 1]
                else:
                    limits = [limit] * lanes if floor >= limit else [min(limit, room) for room in rooms[:lanes]]
                    expected = expected_round_tokens(acceptances[:lanes], limits, variant.packed_token_capacity)
            out.append(Candidate(variant, lanes, expected, seconds))
        return out

    @staticmethod
    def explores(pooled: AcceptanceEstimate) -> bool:
        """Acceptance is unknown (the pooled evidence is under EXPLORATION_EVIDENCE): the configured
        width runs, to observe it."""
        return pooled.evidence < EXPLORATION_EVIDENCE

    def decide(self, pooled: AcceptanceEstimate, estimates: Sequence[AcceptanceEstimate | None],
               rooms: Sequence[int]) -> Candidate | None:
        """The cohort's program from completed observations (both runtimes' engines): None while
        acceptance is unknown (`explores`) or the costs are unknown or stale, where the configured
        width runs (a fallback choice); else `choose` over each lane's posterior mean, a lane without
        observations of its own (`estimates[i]` None) at the pooled mean."""
        if self.explores(pooled):
            return None
        prior = pooled.mean(0.5)
        weight = prior_weight(prior)
        lean = weight * prior  # `AcceptanceEstimate.mean` inlined: a choice weighs every lane of the population
        return self.choose([(e.accepted + lean) / (e.accepted + e.rejected + weight) if e is not None else prior
                            for e in estimates], rooms)

    @staticmethod
    def plain_decay(tokens: float) -> float:
        """The pooled counts' factor for a plain stint of `tokens` tokens chosen (nothing is observed
        meanwhile): one POOLED_DECAY for each PLAIN_TOKENS."""
        return POOLED_DECAY ** (tokens / PLAIN_TOKENS)

    def unmeasured(self, graph: str) -> bool:
        """`graph` costs its raw table entry: neither it nor any other graph of its program (operation
        and width) has a served cost (OBSERVED_ROUNDS served rounds, not forgotten)."""
        return self.served.seconds(graph) is None and all(
            self.served.seconds(sibling) is None for sibling in self._siblings.get(graph, ()))

    def choose(self, acceptances: Sequence[float], rooms: Sequence[int]) -> Candidate | None:
        """The best candidate (`best`), or a wider program explored (`exploration`); None when the
        costs are unknown or stale."""
        if not self.usable():
            return None
        candidates = self.candidates(acceptances, rooms)
        if candidates is None:
            return None
        top = best(candidates)
        return self.exploration(candidates, top) or top

    def exploration(self, candidates: Sequence[Candidate], top: Candidate) -> Candidate | None:
        """The unmeasured program (module docstring, "Unmeasured wider programs") that would emit more
        tokens than `top` and whose table rate is above plain decoding's (candidates[0], the DECODE
        candidate), of the highest table rate; None when there is none."""
        plain = candidates[0].rate
        wider = [c for c in candidates if c.speculative and c.expected > top.expected and c.rate > plain
                 and self.unmeasured(c.variant.name)]
        return replace(max(wider, key=lambda c: (c.rate, -c.width)), explores=True) if wider else None


__all__ = ["ChoiceMemory", "EXPLORATION_EVIDENCE", "OBSERVED_ROUNDS", "OBSERVED_WEIGHT", "PLAIN_TOKENS", "POOLED_DECAY", "PRIOR_ROUNDS", "PRIOR_WEIGHT_LIMIT",
           "SPIKE_LIMIT", "STALE_LIMIT", "STALE_ROUNDS", "VECTOR_LANES", "AcceptanceEstimate", "Candidate", "CopiedChoice", "ProgramChoice", "ProposalSources", "ServedCosts", "best",
           "expected_round_tokens", "expected_tokens", "prior_weight"]
