"""Seconds from process start to the first token, by phase, with empty and with warm kernel caches.

    python bench/startup.py [--shape qwen3-0.6b] [--linear auto|triton|torch] [--host-cache-gib G] [--json out.json]

The parent writes a random bf16 checkpoint of the shape (bench/decode.py's), prepares and seals it
into a signed core (`helios prepare`'s code path; not timed as startup), then starts a fresh Python
process on the same core: first with an empty Triton cache directory, then (`--warm-runs` times) with
the cache the first run filled. Each child reports, from its own process start: imports, verifying and opening
the core, every `NativeModel.load` phase (verify, weights, kernels, cache, tuning, graphs), and the
first token (an INITIALIZATION round and one PREFILL round of an 8-token prompt), and how long after
it the host tier's pinned allocation (on a thread from the load on) still ran. It also counts Triton
compiles (cache hits on disk included): those ahead of time by the kernels phase's concurrent
compile, and those at a launch (a specialization first met after it, e.g. by graph capture).

`--profile N` and `--imports N` start a third child on the warm cache (its figures are not the warm
start's: the tracing slows it) and print its N most expensive functions of the open, the load and
the first round (cProfile: own time, then cumulative) and its N slowest imports (`python -X
importtime`, cumulative): where a warm start's seconds go on this machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PROMPT = (5, 17, 99, 200, 33, 1, 2, 3)


def child(core_path: str, trust: str, accept: str, device: str, started: float, linear: str,
          host_cache_gib: float | None, profile_rows: int = 0) -> dict:
    marks = {}
    import torch  # noqa: F401

    from helios.core.reader import open_core
    from helios.production.native_model import LoadOptions, NativeModel
    from helios.proto import contract_pb2
    from helios.runtime.packing import LaneInput
    from helios.runtime.request import SamplingParams

    marks["imports"] = time.time() - started
    import logging

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s: %(message)s")
    compiles = {"ahead": 0, "at_launch": 0}

    def count(*, is_manual_warmup, **_) -> None:
        compiles["ahead" if is_manual_warmup else "at_launch"] += 1

    if device != "cpu":
        from triton import knobs

        knobs.runtime.jit_post_compile_hook = count
    profiler = None
    if profile_rows:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    t = time.perf_counter()
    core = open_core(core_path, trusted_keys=trust, accept=accept)
    marks["open_core"] = time.perf_counter() - t
    t = time.perf_counter()
    model = NativeModel.load(core, LoadOptions(device=device, linear=linear, host_cache_gib=host_cache_gib))
    marks["load"] = time.perf_counter() - t
    marks["phases"] = {p.name: p.seconds for p in model.startup}
    marks["compiles"] = dict(compiles)
    t = time.perf_counter()
    graphs = sorted(model.graphs.values(), key=lambda g: (g.packed_token_capacity, g.batch_capacity))
    init = next(g for g in graphs if g.operation == contract_pb2.OPERATION_INITIALIZATION)
    prefill = next(g for g in graphs if g.operation == contract_pb2.OPERATION_PREFILL
                   and g.packed_token_capacity >= len(PROMPT))
    sampling = SamplingParams(temperature=0.0)

    def lane(tokens: tuple[int, ...], samples: bool) -> LaneInput:
        return LaneInput(slot=0, generation=1, consumed=0, tokens=tokens, prompt_tokens_in_round=len(tokens),
                         samples=samples, page_ids=(0, 1), seed=0, sampling=sampling, output_limit=16,
                         eos_ids=(258,), prompt_token_ids=PROMPT)

    model.run_round(init.name, [lane((), False)])
    (row,) = model.run_round(prefill.name, [lane(PROMPT, True)])
    marks["first_round"] = time.perf_counter() - t
    marks["first_token"] = row.sampled_id
    marks["to_first_token"] = time.time() - started
    if profiler is not None:
        profiler.disable()
        marks["profile"] = profile_table(profiler, profile_rows)
    t = time.perf_counter()
    _ = model.executor.host  # the host tier's pinned allocation, finished on its thread after the load
    marks["host_tier_after"] = time.perf_counter() - t
    return marks


def profile_table(profiler, rows: int) -> str:
    """The `rows` functions of most own time, then of most cumulative time, as pstats prints them."""
    import io
    import pstats

    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out).strip_dirs()
    stats.sort_stats("tottime").print_stats(rows)
    stats.sort_stats("cumulative").print_stats(rows)
    return "\n".join(line for line in out.getvalue().splitlines() if line.strip())


def slowest_imports(stderr: str, rows: int) -> list[str]:
    """The `rows` imports of most cumulative time in `python -X importtime` output."""
    found = []
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            _, cumulative, name = line[len("import time:"):].split("|", 2)
            if cumulative.strip().isdigit():
                found.append((int(cumulative), name.rstrip().removeprefix(" ")))  # nesting kept
    return [f"{us / 1e6:7.3f}s {name}" for us, name in sorted(found, reverse=True)[:rows]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="qwen3-0.6b")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--linear", default="auto", choices=("auto", "triton", "torch"),
                        help="small matrix products: timed per shape (auto), Triton or torch (LoadOptions.linear)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--host-cache-gib", type=float, default=None,
                        help="the host tier's size (default: the runtime's, a quarter of available memory up to "
                             "4 GiB and twice the device cache; 0: none), to see what its pinned allocation adds "
                             "to startup")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="keep the core and the kernel cache here, and reuse them on a later run (which then "
                             "makes no empty-cache start): warm starts of two trees can alternate (default: a "
                             "temporary directory)")
    parser.add_argument("--warm-runs", type=int, default=1, metavar="N",
                        help="start N times on the warm cache (default %(default)s): the spread of a warm start")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="a third start on the warm cache under cProfile: print its N most expensive functions")
    parser.add_argument("--imports", type=int, default=0, metavar="N",
                        help="a third start on the warm cache: print its N slowest imports (python -X importtime, cumulative)")
    parser.add_argument("--child-profile", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--child", nargs=4, metavar=("CORE", "TRUST", "ACCEPT", "STARTED"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        core_path, trust, accept, started = args.child
        print(json.dumps(child(core_path, trust, accept, args.device, float(started), args.linear,
                               args.host_cache_gib, args.child_profile)))
        return 0

    from decode import make_checkpoint

    from helios.core.keys import generate_keypair
    from helios.ignition.prepare import PreparationOptions, prepare_checkpoint
    from helios.ignition.seal import seal

    root = Path(tempfile.mkdtemp(prefix="helios-startup-")) if args.workdir is None else args.workdir
    key, core_path, cache = root / "publisher.key", root / "model.hcore", root / "triton-cache"
    if core_path.exists():
        print(f"{args.shape}: the core of {root} ({core_path.stat().st_size / 1e9:.2f} GB)", flush=True)
    else:
        t = time.perf_counter()
        directory = make_checkpoint(args.shape, root / args.shape, args.device)
        generate_keypair(key)
        seal(prepare_checkpoint(directory, PreparationOptions(dtype="bf16")), core_path, publisher="bench/models",
             signing_key=key)
        print(f"{args.shape}: checkpoint, prepare and seal {time.perf_counter() - t:.1f}s "
              f"({core_path.stat().st_size / 1e9:.2f} GB core); default capacities", flush=True)
    results = {}
    warm = ["warm kernel cache"] + [f"warm kernel cache, run {i}" for i in range(2, args.warm_runs + 1)]
    empty = [] if cache.exists() and any(cache.iterdir()) else ["empty kernel cache"]  # a --workdir used before
    labels = [*empty, *warm] + (
        ["warm kernel cache, profiled"] if args.profile or args.imports else [])
    for label in labels:
        env = {**os.environ, "TRITON_CACHE_DIR": str(cache)}
        started = time.time()
        tier = [] if args.host_cache_gib is None else ["--host-cache-gib", repr(args.host_cache_gib)]
        profiled = ["--child-profile", str(args.profile)] if label.endswith("profiled") and args.profile else []
        importtime = ["-X", "importtime"] if args.imports and label.endswith("profiled") else []
        out = subprocess.run([sys.executable, *importtime, __file__, "--device", args.device, "--linear",
                              args.linear, *tier, *profiled, "--child", str(core_path),
                              str(key) + ".pub", "bench/models", repr(started)],
                             env=env, capture_output=True, text=True, check=False)
        if out.returncode != 0:
            print(out.stderr[-4000:])
            return 1
        marks = json.loads(out.stdout.strip().splitlines()[-1])
        results[label] = marks
        phases = ", ".join(f"{k} {v:.2f}s" for k, v in marks["phases"].items())
        print(f"  {label}: {marks['to_first_token']:.2f}s to the first token = imports {marks['imports']:.2f}s "
              f"+ open core {marks['open_core']:.2f}s + load {marks['load']:.2f}s ({phases}) "
              f"+ first round {marks['first_round']:.2f}s; Triton compiles: {marks['compiles']['ahead']} ahead, "
              f"{marks['compiles']['at_launch']} at a launch; the host tier's allocation finished "
              f"{marks['host_tier_after']:.2f}s after the first token", flush=True)
        for line in out.stderr.splitlines():
            if line.startswith("helios."):
                print(f"    {line}", flush=True)
        if importtime:
            print("  the slowest imports (cumulative):\n    " + "\n    ".join(slowest_imports(out.stderr, args.imports)))
        if "profile" in marks:
            print(marks.pop("profile"), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
