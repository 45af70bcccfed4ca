"""`helios conform` (host side): run both runtimes on one core and report the first divergence.

The handler opens and authorizes the core, then runs the conformance suite (`conformance/`): the
operators level, the trace audit and the end-to-end comparison, and prints one table (or one JSON
object) with the coverage table of the workload levels. Exit status 0 when nothing diverged and
the coverage holds, 1 when something diverged, 4 when nothing diverged but a mechanism the core
supports was not exercised (`incomplete`), 2 or 3 for unusable input (a core that fails
verification exits with the core reader's own code, 3).
Heavy imports (the runtimes, torch) stay inside the handler.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from helios.cli.progress import ProgressBar
from helios.errors import HeliosError

LEVEL_CHOICES = ("operators", "trace", "e2e", "all")


class CoreUnreadable(HeliosError):
    """The core file cannot be opened (missing, unreadable)."""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "conform", help="check the production runtime against the reference on one core",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Run the same core through both runtimes and report where they disagree. Three levels:\n"
            "  operators  every operator of the registry (and each production fusion) on fresh random inputs\n"
            "             at ragged, page-crossing and sliding-window shapes: reference against production\n"
            "             kernels; integers exactly, floats within the dtype's tolerance\n"
            "  trace      production serves each workload while recording every submission (graph, lanes,\n"
            "             packed transport rows, completion rows); the reference replays the trace and\n"
            "             compares every field. A sampled id that differs where moving the logits within\n"
            "             the two precisions' tolerance flips the reference's draw is a numeric tie\n"
            "             (reported with its margin; production's token is adopted)\n"
            "  e2e        each workload through both full runtimes, each scheduling on its own; per request:\n"
            "             outcome, token ids, finish reason, stop position, usage, visible text\n\n"
            "Workloads: by default derived from the core's geometry (page tokens, chunk capacities,\n"
            "context, sliding window, slots, EOS ids, tool syntax): chunked prefill, prefix reuse,\n"
            "preemption under page pressure, window crossing, every EOS id, token/sequence/string stops,\n"
            "a grammar-constrained and a tool-calling chat request, requests with and without an output\n"
            "filter, and on a core with speculative programs a request whose own tokens repeat (speculative\n"
            "rounds; with --history-drafting, copied proposals). --workloads FILE runs your own (OpenAI\n"
            "completion or chat bodies with production's scheduling limits;\n"
            "conformance/cases/workloads.json is an example).\n\n"
            "Coverage: a table says which mechanisms the trace and e2e levels actually exercised (seen in\n"
            "the trace and the results, not assumed from the workloads), or that the core does not support\n"
            "one (no window, no tool syntax, no speculative programs). With the generated workloads (or\n"
            "--require-coverage) a supported mechanism no level reached makes the verdict 'incomplete'.\n\n"
            "Each divergence row gives the case, the round (trace: submission; e2e: token index), the lane\n"
            "(trace: slot; e2e: request; operators: row), the field, both values and the logit margin.\n"
            "Exit status: 0 pass (nothing diverged, coverage complete), 1 divergence, 4 incomplete\n"
            "(nothing diverged, a supported mechanism not exercised), 2 or 3 when the core or an option\n"
            "is unusable. On a machine without CUDA the production kernels run in the Triton interpreter\n"
            "(slow: the generated workloads are a few tokens each). Progress (operator cases, workloads)\n"
            "goes to stderr: a bar on a terminal, a line at every tenth elsewhere."
        ),
        epilog=(
            "examples:\n"
            "  helios conform qwen3.hcore --accept acme/models --trust publisher.key.pub\n"
            "  helios conform qwen3.hcore --accept acme/models --trust keys/ --level trace --json\n"
            "  helios conform qwen3.hcore --accept acme/models --trust keys/ --audit served.trace"
        ),
    )
    parser.add_argument("core", metavar="MODEL.hcore", help="the core to check")
    parser.add_argument("--accept", required=True, metavar="NAMESPACE",
                        help="the publisher namespace you accept; must equal the signed one exactly")
    parser.add_argument("--trust", required=True, action="append", metavar="PUBKEY",
                        help="a trusted public key file or a directory of .pub files (repeatable)")
    parser.add_argument("--level", choices=LEVEL_CHOICES, default="all",
                        help="which level to run (default: all three)")
    parser.add_argument("--json", action="store_true",
                        help='print one JSON object: {"verdict", "levels": [{"level", "cases", "passed", '
                             '"numeric_ties", "divergences": [...]}], "coverage": {"required", "levels", '
                             '"missing", "rows": [...]}} (coverage when a workload level ran)')
    parser.add_argument("--device", metavar="DEVICE",
                        help="production's device: cuda, cuda:N or cpu (default: cuda when present)")
    parser.add_argument("--workloads", type=Path, metavar="FILE",
                        help="a workloads JSON file (default: workloads generated from the core's geometry)")
    parser.add_argument("--workload", action="append", default=[], metavar="NAME",
                        help="run only this workload (of the file, or generated: geometry, pressure; repeatable)")
    parser.add_argument("--require-coverage", action=argparse.BooleanOptionalAction, default=None,
                        help="a supported mechanism the run did not exercise makes it incomplete (exit 4); "
                             "default: on for the generated workloads, off for --workloads FILE")
    parser.add_argument("--operator", action="append", default=[], metavar="OP",
                        help="operators level: check only this operator or fusion (repeatable)")
    parser.add_argument("--trace-dir", type=Path, metavar="DIR",
                        help="also write each workload's production trace to DIR/NAME.trace")
    parser.add_argument("--gpu-paths", action="store_true",
                        help="run production with the GPU's code paths forced at small tiles (Triton products, "
                             "several programs a kernel, attention split along the context with its combine, "
                             "real page-table uploads out of separate staging); meant for CPU runs: slower")
    parser.add_argument("--history-drafting", action="store_true",
                        help="on a core prepared with --draft: both runtimes' speculative rounds also carry "
                             "proposals copied from each request's own tokens (serve's --history-drafting)")
    parser.add_argument("--audit", type=Path, metavar="TRACE",
                        help="audit a recorded trace file on the reference instead of running production")
    parser.set_defaults(func=_conform)


class _Progress:
    """The run's progress on stderr: a `ProgressBar` for the operator cases and one for the workloads."""

    def __init__(self) -> None:
        self.bars: dict[str, ProgressBar] = {}

    def __call__(self, what: str, done: int, total: int) -> None:
        if total:
            self.bars.setdefault(what, ProgressBar(what, sys.stderr))(done, total)


def _conform(args) -> int:
    from conformance.runner import ConformOptions, audit_file, conform
    from helios.cli.compose import rank_options
    from helios.core import open_core

    try:
        core_context = open_core(args.core, trusted_keys=args.trust, accept=args.accept)
    except OSError as error:
        raise CoreUnreadable(f"{args.core}: cannot read: {error.strerror}") from None
    with core_context as core:
        if args.audit is not None:
            report = audit_file(core, args.audit)
        else:
            levels = ("operators", "trace", "e2e") if args.level == "all" else (args.level,)
            options = ConformOptions(levels=levels, device=args.device, workloads=args.workloads,
                                     workload_names=tuple(args.workload), operators=tuple(args.operator),
                                     trace_dir=args.trace_dir, require_coverage=args.require_coverage,
                                     gpu_paths=args.gpu_paths, history_drafting=args.history_drafting,
                                     ranks=rank_options(args.core, args.trust, args.accept, "threads", None, 30.0),
                                     progress=_Progress())
            report = conform(core, options)
    print(report.to_json() if args.json else report.table())
    sys.stdout.flush()
    return report.exit_code
