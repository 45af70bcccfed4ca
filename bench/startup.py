"""Seconds from process start to the first token, by phase, with empty and with warm kernel caches.

    python bench/startup.py [--shape qwen3-0.6b] [--linear auto|triton|torch] [--host-cache-gib G] [--json out.json]

The parent writes a random bf16 checkpoint of the shape (bench/decode.py's), prepares and seals it
into a signed core (`helios prepare`'s code path; not timed as startup), then starts a fresh Python
process twice on the same core: first with an empty Triton cache directory, then with the cache the
first run filled. Each child reports, from its own process start: imports, verifying and opening
the core, every `NativeModel.load` phase (verify, weights, kernels, cache, tuning, graphs), and the
first token (an INITIALIZATION round and one PREFILL round of an 8-token prompt), and how long after
it the host tier's pinned allocation (on a thread from the load on) still ran. It also counts Triton
compiles (cache hits on disk included): those ahead of time by the kernels phase's concurrent
compile, and those at a launch (a specialization first met after it, e.g. by graph capture).
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
          host_cache_gib: float | None) -> dict:
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
    t = time.perf_counter()
    _ = model.executor.host  # the host tier's pinned allocation, finished on its thread after the load
    marks["host_tier_after"] = time.perf_counter() - t
    return marks


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
    parser.add_argument("--child", nargs=4, metavar=("CORE", "TRUST", "ACCEPT", "STARTED"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        core_path, trust, accept, started = args.child
        print(json.dumps(child(core_path, trust, accept, args.device, float(started), args.linear,
                               args.host_cache_gib)))
        return 0

    from decode import make_checkpoint

    from helios.core.keys import generate_keypair
    from helios.ignition.prepare import PreparationOptions, prepare_checkpoint
    from helios.ignition.seal import seal

    root = Path(tempfile.mkdtemp(prefix="helios-startup-"))
    t = time.perf_counter()
    directory = make_checkpoint(args.shape, root / args.shape, args.device)
    key = root / "publisher.key"
    generate_keypair(key)
    core_path = root / "model.hcore"
    seal(prepare_checkpoint(directory, PreparationOptions(dtype="bf16")), core_path, publisher="bench/models",
         signing_key=key)
    print(f"{args.shape}: checkpoint, prepare and seal {time.perf_counter() - t:.1f}s "
          f"({core_path.stat().st_size / 1e9:.2f} GB core); default capacities", flush=True)
    cache = root / "triton-cache"
    results = {}
    for label in ("empty kernel cache", "warm kernel cache"):
        env = {**os.environ, "TRITON_CACHE_DIR": str(cache)}
        started = time.time()
        tier = [] if args.host_cache_gib is None else ["--host-cache-gib", repr(args.host_cache_gib)]
        out = subprocess.run([sys.executable, __file__, "--device", args.device, "--linear", args.linear, *tier,
                              "--child", str(core_path),
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
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
