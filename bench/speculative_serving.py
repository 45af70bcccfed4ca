"""Serving with speculation on the demo pair (the embedded target and its drafter): tokens per second
with speculation off, at each fixed width and with the adaptive choice, measured in one run.

    python bench/speculative_serving.py [--concurrency 1 8 32 128 256] [--temperatures 0 0.7]
                                        [--widths 2 4 8] [--workloads held_out repetitive]
                                        [--history-drafting] [--json out.json]
    python bench/speculative_serving.py --tiny   # a short CPU run of every part (the reference runtime)

The demo checkpoint and drafter (helios/demo/) are prepared into one core (`helios prepare --draft`,
bf16 on a GPU, fp32 on a CPU) with batch capacities up to the largest concurrency and SPECULATIVE
programs of every `--widths` width. On a GPU the production runtime loads the core once (every width,
round costs measured at startup) and each mode serves over it: `off` (plain decoding), `W2`, `W4`,
`W8` (a fixed width) and `auto` (the adaptive choice). On a CPU the reference runtime serves each mode.

Workloads, each at every concurrency C (`--requests`, default max(8 C, 96), submitted at once, C
admitted at a time; every mode runs `--repeats` times, interleaved, each repeat's order rotated by
one so no mode always runs last, with the garbage of the runs before collected ahead of each (the
loaded model frozen out of the collector's reach, as `helios serve` does), and the table shows its median;
on a GPU each run is a fresh runtime over the loaded model, and the `auto` runs of one point share
what the choice learns (served round costs, pooled acceptance: `ChoiceMemory`), as one long-lived
server's rounds would: its first run learns them, the later ones start from them):
  - held_out: the demo's held-out chat prompts (helios/demo/tasks.py), rendered by the core's chat
    template and frontend exactly as `helios serve` renders them;
  - repetitive: requests whose answer copies its prompt (copy a text of capital letters exactly:
    the demo's copy task, which it answers by copying the text twice), where history drafting
    (`--history-drafting`) has proposals to copy.
Printed per workload, temperature and concurrency: output tokens per second of each mode, the best
fixed choice (off or a width), auto / best of the medians (issue #18's target: >= 0.97 at every
concurrency) and `paired`: the median over repeats of auto / the best fixed mode of that repeat (a
repeat's modes run back to back, so a host that slows for a while slows them alike), how far each
mode's repeats spread (largest over smallest, less one: a gap between modes below it is not resolved
by the medians; 6% to 30% within one mode on an H100 at 32 requests), then what the adaptive choice did in each of its runs: SPECULATIVE rounds by width, cohorts it decoded plainly,
rounds at the fallback width (costs unknown or stale), rounds of a wider program run to measure it
and the proposals accepted.
`--json` also keeps every run's choices and, per point, the measured and served round costs the
adaptive choice read at the end of its last run.
"""

from __future__ import annotations

import argparse
import atexit
import cProfile
import gc
import io
import json
import pstats
import random
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.serve import serve_at_once  # noqa: E402

MAX_TOKENS = 128


def choices(metrics) -> dict:
    """What a run's scheduler chose (`RuntimeMetrics`): rounds by width, plain and fallback choices,
    proposals offered and accepted (copied ones apart; and by position), graph launches by operation."""
    return {"speculative_rounds_by_width": {str(w): n for w, n in sorted(metrics.speculative_rounds_by_width.items())},
            "plain_choices": metrics.plain_choices, "fallback_choices": metrics.fallback_choices,
            "explored_choices": metrics.explored_choices,
            "offered": metrics.offered_drafts, "accepted": metrics.accepted_drafts,
            "copied_offered": metrics.copied_offered, "copied_accepted": metrics.copied_accepted,
            "offered_by_position": {str(k): n for k, n in sorted(metrics.offered_by_position.items())},
            "accepted_by_position": {str(k): n for k, n in sorted(metrics.accepted_by_position.items())},
            "graph_launches": dict(metrics.graph_launches)}


def costs(metrics) -> dict:
    """The measured and served round costs the adaptive choice read, in milliseconds."""
    return {"measured": [{"graph": c.graph, "lanes": c.lanes, "width": c.width, "ms": c.seconds * 1e3}
                         for c in metrics.round_costs],
            "served": [{"graph": c.graph, "lanes": c.lanes, "width": c.width, "rounds": c.rounds,
                        "ms": c.seconds * 1e3} for c in metrics.served_round_costs]}


def describe(choice: dict) -> str:
    widths = ", ".join(f"W{w} {n}" for w, n in choice["speculative_rounds_by_width"].items()) or "none"
    accepted = choice["accepted"] / choice["offered"] if choice["offered"] else 0.0
    return (f"speculative rounds {widths}; plain {choice['plain_choices']}; fallback {choice['fallback_choices']}; "
            f"explored {choice['explored_choices']}; "
            f"accepted {accepted:.2f} of {choice['offered']} proposals")


def prepare(workdir: Path, *, dtype: str, capacities: list[int], widths: list[int]) -> tuple[Path, Path]:
    """The demo pair prepared into one core; returns (core, trusted public key)."""
    from helios.cli import main as helios
    from helios.demo.__main__ import CHECKPOINT_DIR, DRAFTER_DIR, PUBLISHER

    key = workdir / "bench.key"
    if helios(["keys", "new", "--out", str(key)]) != 0:
        raise SystemExit("could not create a signing key")
    core = workdir / "pair.hcore"
    status = helios(["prepare", str(CHECKPOINT_DIR), "--out", str(core), "--publisher", PUBLISHER, "--key", str(key),
                     "--dtype", dtype, "--draft", str(DRAFTER_DIR),
                     "--batch-capacities", ",".join(map(str, capacities)),
                     "--speculative-widths", ",".join(map(str, widths))])
    if status != 0:
        raise SystemExit("preparation failed")
    return core, Path(f"{key}.pub")


def held_out_bodies(count: int) -> list[dict]:
    from helios.demo.tasks import held_out_examples

    bodies = []
    for example in held_out_examples(seed=7, count=count):
        body = {"messages": list(example.messages), "max_tokens": MAX_TOKENS}
        if example.tools:
            body["tools"] = list(example.tools)
        bodies.append(body)
    return bodies


def repetitive_bodies(count: int) -> list[dict]:
    """Requests to copy a text exactly: two to four words of 6 to 12 capital letters, which the demo
    model copies a letter (a token) at a time, twice (its reasoning restates the text, then the
    answer): 40 to 90 completion tokens, nearly all of them copies of the prompt's."""
    rng = random.Random(11)
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    asks = ("Copy this exactly: {s}", "Repeat this exactly: {s}", "Please echo this: {s}", "Say back {s} exactly.")
    bodies = []
    for _ in range(count):
        text = " ".join("".join(rng.choice(letters) for _ in range(rng.randrange(6, 13)))
                        for _ in range(rng.choice((2, 3, 4))))
        bodies.append({"messages": [{"role": "user", "content": rng.choice(asks).format(s=text)}],
                       "max_tokens": MAX_TOKENS})
    return bodies


def prepared(preparer, bodies: list[dict], temperature: float, tag: str) -> list:
    from helios.frontend.openai_request import parse_chat_request

    out = []
    for i, body in enumerate(bodies):
        request = parse_chat_request({**body, "temperature": temperature, "seed": i})
        out.append(preparer.prepare_chat(request, f"{tag}-{i}").runtime_request)
    return out


def profile_worker(runtime) -> cProfile.Profile:
    """A profiler enabled inside `runtime`'s worker thread for its whole run."""
    profiler = cProfile.Profile()
    run = runtime._run

    def profiled() -> None:
        profiler.enable()
        try:
            run()
        finally:
            profiler.disable()

    runtime._run = profiled
    return profiler


def report_profile(profiler: cProfile.Profile, runtime, label: str, tokens: int, seconds: float, top: int) -> None:
    """The worker's rounds by graph, milliseconds of wall time a round, and the profile's top entries."""
    scheduler = getattr(runtime, "scheduler", None)  # the sequential reference runtime has none
    launches = dict(scheduler.counters.launches) if scheduler is not None else {}
    rounds = sum(launches.values())
    stream = io.StringIO()
    pstats.Stats(profiler, stream=stream).sort_stats("tottime").print_stats(top)
    print(f"\n--- profile {label}: {tokens} tokens in {seconds:.3f} s, {rounds} rounds "
          f"({1e3 * seconds / max(rounds, 1):.2f} ms a round): {launches}")
    print("\n".join(line for line in stream.getvalue().splitlines() if line.strip())[:12000])


def modes(widths: list[int]) -> list[tuple[str, dict]]:
    return ([("off", {"speculation": False})] + [(f"W{w}", {"speculative_width": w}) for w in widths]
            + [("auto", {"adaptive_speculation": True})])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", nargs="*", type=int, default=[1, 8, 32, 128, 256])
    parser.add_argument("--temperatures", nargs="*", type=float, default=[0.0, 0.7])
    parser.add_argument("--widths", nargs="*", type=int, default=[2, 4, 8])
    parser.add_argument("--workloads", nargs="*", choices=("held_out", "repetitive"),
                        default=["held_out", "repetitive"], help="the workloads, in this order (default: both)")
    parser.add_argument("--history-drafting", action="store_true", help="speculative modes also copy proposals")
    parser.add_argument("--requests", type=int, default=0, help="requests a concurrency (default: max(8 C, 96); with max(4 C, 32) runs of 0.3 s "
                             "spread by up to 10%%)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="runs of every mode, interleaved (off, W2, ..., auto, off, ...); the table shows each "
                             "mode's median (default %(default)s)")
    parser.add_argument("--tiny", action="store_true", help="a short run of every part (concurrency 1 and 2)")
    parser.add_argument("--json", type=Path, default=None, help="also write every figure to this file")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="also profile the worker thread of every mode at the largest concurrency of each "
                             "workload (first temperature) and print cProfile's top N entries by own time, with "
                             "the rounds run and host milliseconds a round")
    args = parser.parse_args(argv)
    import torch

    from helios.core.reader import open_core
    from helios.demo.__main__ import PUBLISHER
    from helios.frontend.bootstrap import Bootstrap
    from helios.frontend.preparation import Preparer
    from helios.runtime.limits import AdmissionLimits
    from helios.runtime.options import RuntimeOptions

    gpu = torch.cuda.is_available()
    concurrency = [1, 2] if args.tiny else sorted(set(args.concurrency))
    widths = [2, 4] if args.tiny else sorted(set(args.widths))
    per = (lambda c: 2) if args.tiny else (lambda c: args.requests or max(8 * c, 96))
    repeats = 1 if args.tiny else max(1, args.repeats)
    capacities = sorted({1, 2, 4, 8, *concurrency})
    figures = []
    from helios.engine.program_choice import ChoiceMemory

    with tempfile.TemporaryDirectory() as tmp:
        path, key = prepare(Path(tmp), dtype="bf16" if gpu else "fp32", capacities=capacities, widths=widths)
        core = open_core(path, trusted_keys=[key], accept=PUBLISHER)
        preparer = Preparer(Bootstrap.from_core(core), served_id=core.contract.served_id,
                            context_tokens=core.contract.context_tokens)
        if gpu:
            from helios.production.loading import load_native_model, runtime_for

            model = load_native_model(core, max_concurrency=max(capacities), speculative_width=max(widths),
                                      history_drafting=args.history_drafting, measure_costs=True)
            gc.collect()  # the loaded model out of the collector's reach, as `helios serve` does
            gc.freeze()
            atexit.register(gc.unfreeze)
            print(f"device: {torch.cuda.get_device_name()}; production runtime, bf16")
        else:
            from helios.reference import load_runtime

            print("device: CPU; reference runtime (NumPy), fp32")
        makers = {"held_out": held_out_bodies, "repetitive": repetitive_bodies}
        workloads = {name: makers[name](max(per(c) for c in concurrency)) for name in dict.fromkeys(args.workloads)}
        names = [name for name, _ in modes(widths)]
        print(f"\n{'workload':>10} {'temp':>5} {'C':>4} " + " ".join(f"{n:>9}" for n in names)
              + f" {'best':>6} {'auto/best':>9} {'paired':>9}")
        for temperature in args.temperatures:  # outermost: a run cut short has every workload at the first
            for workload, bodies in workloads.items():
                for c in concurrency:
                    memory = ChoiceMemory()  # the auto runs' of this point

                    def setup(name: str, extra: dict, tag: str, c: int = c, bodies: list = bodies,
                              temperature: float = temperature, workload: str = workload,
                              memory: ChoiceMemory = memory):
                        """A fresh runtime of mode `name` and the workload's requests for it."""
                        if name != "off":
                            extra = {**extra, "history_drafting": args.history_drafting}
                        options = RuntimeOptions(AdmissionLimits(max_active=c, queue_capacity=per(c)), **extra)
                        shared = memory if name == "auto" else None
                        runtime = (runtime_for(model, options, memory=shared) if gpu
                                   else load_runtime(core, options))
                        return runtime, prepared(preparer, bodies[:per(c)], temperature, f"{workload}-{name}-{c}-{tag}")

                    runs: dict[str, list[float]] = {name: [] for name in names}
                    chosen: dict[str, list[dict]] = {name: [] for name in names}
                    read_costs: dict = {}
                    for repeat in range(repeats):
                        order = modes(widths)
                        for name, extra in order[repeat % len(order):] + order[:repeat % len(order)]:
                            runtime, requests = setup(name, extra, str(repeat))
                            gc.collect()  # the runs before: their garbage is collected outside this one
                            tokens, seconds = serve_at_once(runtime, requests)
                            runs[name].append(tokens / seconds)
                            metrics = runtime.metrics()
                            chosen[name].append(choices(metrics))
                            if name == "auto":
                                read_costs = costs(metrics)
                    rates = {name: statistics.median(values) for name, values in runs.items()}
                    if args.profile and c == concurrency[-1] and temperature == args.temperatures[0]:
                        for name, extra in modes(widths):
                            # one more run of the same requests, under the profiler (its figures are not the
                            # table's: the profiler slows the worker)
                            runtime, requests = setup(name, extra, "profiled")
                            profiler = profile_worker(runtime)
                            tokens, seconds = serve_at_once(runtime, requests)
                            report_profile(profiler, runtime, f"{workload} C={c} {name}", tokens, seconds,
                                           args.profile)
                    fixed = {n: r for n, r in rates.items() if n != "auto"}
                    best = max(fixed, key=fixed.get)
                    # paired by repeat: the modes of one repeat ran back to back, so a host that slowed
                    # for a while slowed them alike; the median of the per-repeat ratios
                    paired = statistics.median(runs["auto"][r] / max(runs[n][r] for n in fixed)
                                               for r in range(repeats))
                    figures.append({"workload": workload, "temperature": temperature, "concurrency": c,
                                    "requests": per(c), "tokens_per_second": rates, "runs": runs, "best_fixed": best,
                                    "auto_over_best": rates["auto"] / fixed[best], "auto_over_best_paired": paired,
                                    "choices": chosen, "auto_costs": read_costs})
                    print(f"{workload:>10} {temperature:>5.2f} {c:>4} " + " ".join(f"{rates[n]:>9.1f}" for n in names)
                          + f" {best:>6} {rates['auto'] / fixed[best]:>9.2f} {paired:>9.2f}")
                    # how far one mode's repeats spread (the largest over the smallest, less one): a gap
                    # between modes smaller than this is not resolved by the point's medians
                    print(f"{'':>21} spread: " + ", ".join(f"{n} {max(runs[n]) / min(runs[n]) - 1:.0%}" for n in names))
                    for choice in chosen["auto"]:
                        print(f"{'':>21} auto: {describe(choice)}")
                    if args.json:  # after every point: a run cut short keeps what it measured
                        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
