"""The adaptive program choice's host cost a round: one NumPy pass over a large cohort against lane by lane.

    python bench/program_choice.py                        # cohorts of 1 8 32 64 128 256 lanes
    python bench/program_choice.py --lanes 32 256 --json program_choice.json

What runs. `ProgramChoice.decide` (helios/engine/program_choice.py), what the scheduler calls for
every speculative cohort under adaptive choice (`--speculative-width auto`), over a catalog shaped as
the demo pair's serving core: DECODE graphs and SPECULATIVE graphs of widths 2, 4 and 8, rectangular
(P = B * W), at 1, 2, 4, 8, 32 and 256 lanes, with a measured cost for each; each lane of the cohort
has an acceptance estimate of its own (5 to 50 proposals accepted, 0 to 5 rejections), every lane
room for every width. Two forms of the same choice, in the same run:

  vector   the choice as it serves: from VECTOR_LANES lanes on, each width's expected tokens come
           from one NumPy pass of power sums;
  lanes    the baseline: every width weighed lane by lane (`expected_round_tokens`), the form below
           VECTOR_LANES lanes and the only one before it existed.

Both forms must choose the same program with the same expected tokens (checked first; a mismatch
stops the bench). Printed per cohort: microseconds a choice of each form (the best of `--repeats`
timings of `--number` choices: the host is shared, the best is the least disturbed) and lanes /
vector. Host only: no device, no torch.
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from helios.engine import program_choice  # noqa: E402
from helios.engine.catalog import GraphCatalog, GraphVariant  # noqa: E402
from helios.engine.program_choice import AcceptanceEstimate, ProgramChoice  # noqa: E402
from helios.proto import contract_pb2 as C  # noqa: E402
from helios.runtime.completion import SpeculativeRound  # noqa: E402
from helios.runtime.costs import RoundCost, RoundCosts  # noqa: E402

GRAPH_LANES = (1, 2, 4, 8, 32, 256)
WIDTHS = (2, 4, 8)


def demo_like_choice() -> ProgramChoice:
    """A choice over DECODE and W2/W4/W8 SPECULATIVE graphs at GRAPH_LANES, each with a table cost."""
    variants = [GraphVariant("initialization", C.OPERATION_INITIALIZATION, 1, 1, True),
                GraphVariant("prefill_p16", C.OPERATION_PREFILL, 1, 16, True)]
    variants += [GraphVariant(f"decode_b{b}", C.OPERATION_DECODE, b, b, True) for b in GRAPH_LANES]
    for width in WIDTHS:
        variants += [GraphVariant(f"speculative_b{b}_w{width}", C.OPERATION_SPECULATIVE, b, b * width, True,
                                  width=width, drafts=width - 1, lane_limit=width,
                                  check=SpeculativeRound(b * width, exact=True)) for b in GRAPH_LANES]
    costs = RoundCosts(tuple(RoundCost(v.name, v.operation, v.batch_capacity, v.width or 1,
                                       1e-3 * (1 + (v.width or 1) * v.batch_capacity / 64))
                             for v in variants if v.operation in (C.OPERATION_DECODE, C.OPERATION_SPECULATIVE)))
    return ProgramChoice(GraphCatalog(variants), costs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="See the module docstring for what runs and what is printed.")
    parser.add_argument("--lanes", type=int, nargs="+", default=[1, 8, 32, 64, 128, 256],
                        help="cohort sizes (default: 1 8 32 64 128 256)")
    parser.add_argument("--number", type=int, default=300, help="choices a timing (default %(default)s)")
    parser.add_argument("--repeats", type=int, default=7, help="timings a form, the best kept (default %(default)s)")
    parser.add_argument("--json", type=Path, default=None, help="also write every figure to this file")
    args = parser.parse_args(argv)
    if min(args.lanes) < 1 or args.number < 1 or args.repeats < 1:
        parser.error("--lanes, --number and --repeats must be at least 1")
    choice = demo_like_choice()
    rng = random.Random(0)
    pooled = AcceptanceEstimate(500.0, 50.0)
    vector_lanes = program_choice.VECTOR_LANES
    rows = []
    print(f"ProgramChoice.decide, microseconds a choice (best of {args.repeats} x {args.number}); "
          f"the NumPy pass from {vector_lanes} lanes")
    print(f"{'lanes':>6} {'vector':>9} {'lanes':>9} {'lanes/vector':>13}  chosen")
    for n in args.lanes:
        estimates = [AcceptanceEstimate(rng.uniform(5, 50), rng.uniform(0, 5)) for _ in range(n)]
        rooms = [1_000] * n
        timed, chosen = {}, {}
        for form, threshold in (("vector", vector_lanes), ("lanes", sys.maxsize)):
            program_choice.VECTOR_LANES = threshold
            try:
                chosen[form] = choice.decide(pooled, estimates, rooms)
                timed[form] = min(timeit.repeat(functools.partial(choice.decide, pooled, estimates, rooms),
                                                number=args.number, repeat=args.repeats)) / args.number * 1e6
            finally:
                program_choice.VECTOR_LANES = vector_lanes
        a, b = chosen["vector"], chosen["lanes"]
        if a.variant.name != b.variant.name or abs(a.expected - b.expected) > 1e-9 * max(1.0, b.expected):
            raise SystemExit(f"{n} lanes: the forms disagree: {a.variant.name} {a.expected} against "
                             f"{b.variant.name} {b.expected}")
        ratio = timed["lanes"] / timed["vector"]
        print(f"{n:>6} {timed['vector']:>9.1f} {timed['lanes']:>9.1f} {ratio:>13.2f}  {a.variant.name}")
        rows.append({"lanes": n, "vector_us": timed["vector"], "lanes_us": timed["lanes"], "ratio": ratio,
                     "chosen": a.variant.name})
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
