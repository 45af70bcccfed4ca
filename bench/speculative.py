"""The cost of a SPECULATIVE round against a DECODE round on the GPU, as ratios measured in one run.
(Serving with speculation, tokens per second of each mode on the demo pair: bench/speculative_serving.py.)

    python bench/speculative.py [--target llama-8b] [--draft qwen3-0.6b] [--batches 1 8 64] [--widths 2 4 8]

Three cores of random bf16 checkpoints are prepared in memory (the code path of `helios prepare`)
and loaded with `NativeModel.load`: the target alone (its DECODE round is the baseline), the draft
alone (its DECODE round is one draft step) and the target with `--draft` (its SPECULATIVE programs
of each width, rectangular: D = W - 1 proposals, W target rows a lane). The draft has the draft
shape's layers and widths and the target's vocabulary and tokenizer. Every lane holds `--context`
tokens of history. Each graph is packed once with its lanes (every lane at the full width) and then
replayed back to back; the per-round device time is the mean over `--steps` replays.

Printed per batch B and width W, all measured in this run on this GPU:
  - speculative / decode: the whole round against the target's decode round;
  - verification / decode: the round less its draft passes (each a draft DECODE step), against the
    decode round (target: <= 1.15 at B = 1, W = 4: verifying W rows is memory-bound like decode);
  - round / (decode + D draft steps): the whole round against plain decode plus its proposals
    (target: <= 1.10 at B = 1).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.decode import SHAPES, make_checkpoint  # noqa: E402


def _draft_shape(draft: str, target: str) -> None:
    """Register the draft shape with the target's vocabulary (one tokenizer for both)."""
    cls, arguments = SHAPES[draft]
    vocab = SHAPES[target][1]["vocab_size"]
    SHAPES[f"{draft}-as-draft"] = (cls, {**arguments, "vocab_size": vocab, "tie_word_embeddings": False})


def _lanes(batch: int, context: int, limit: int, per_lane: int):
    from helios.runtime.packing import LaneInput
    from helios.runtime.request import SamplingParams

    sampling = SamplingParams(temperature=0.0)
    return [LaneInput(slot=i, generation=1, consumed=context, tokens=(7 + i % 100,), prompt_tokens_in_round=0,
                      samples=True, page_ids=tuple(range(i * per_lane, (i + 1) * per_lane)), seed=i,
                      sampling=sampling, output_limit=1 << 20, eos_ids=(258,), prompt_token_ids=(1, 2, 3),
                      speculative_limit=limit)
            for i in range(batch)]


def replay_ms(model, graph: str, batch: int, context: int, limit: int, steps: int) -> float:
    """Mean device milliseconds of one replay of `graph` after packing `batch` lanes once."""
    import torch

    page_tokens = model.contract.cache.page_tokens
    per_lane = -(-(context + 16) // page_tokens)
    lanes = _lanes(batch, context, limit, per_lane)
    model.run_round(graph, lanes)
    capture = model.executor.capture
    if capture is None:  # a CPU check of the script itself (interpreted kernels): whole rounds, wall clock
        start_s = time.perf_counter()
        for _ in range(steps):
            model.run_round(graph, lanes)
        return 1e3 * (time.perf_counter() - start_s) / steps
    for _ in range(3):
        capture.replay(graph, rank_form="off")
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(steps):
        capture.replay(graph, rank_form="off")
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / steps


def _free(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="llama-8b", choices=sorted(SHAPES))
    parser.add_argument("--draft", default="qwen3-0.6b", choices=sorted(SHAPES))
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 8, 64])
    parser.add_argument("--widths", nargs="+", type=int, default=[2, 4, 8])
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--context-tokens", type=int, default=2048, help="prepared context (default 2048)")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--profile", nargs=2, type=int, metavar=("B", "W"),
                        help="print the device kernels of the speculative_bB_wW graph (torch.profiler, 5 replays)")
    args = parser.parse_args(argv)

    import torch

    from helios.ignition.prepare import PreparationOptions, prepare_checkpoint
    from helios.production.native_model import LoadOptions, NativeModel

    root = Path(tempfile.mkdtemp(prefix="helios-spec-bench-"))
    _draft_shape(args.draft, args.target)
    t0 = time.perf_counter()
    target_dir = make_checkpoint(args.target, root / "target", args.device)
    draft_dir = make_checkpoint(f"{args.draft}-as-draft", root / "draft", args.device)
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    print(f"device: {name}; checkpoints written in {time.perf_counter() - t0:.1f}s", flush=True)
    common = dict(dtype="bf16" if args.device.startswith("cuda") else "fp32", page_tokens=16, batch_capacities=tuple(args.batches), prefill_capacities=(64,),
                  context_tokens=args.context_tokens)
    results: dict = {"target": args.target, "draft": args.draft, "context": args.context, "rows": []}

    def load(directory, **extra):
        start = time.perf_counter()
        core = prepare_checkpoint(directory, PreparationOptions(**common, **extra))
        model = NativeModel.load(core, LoadOptions(device=args.device))
        print(f"  loaded {directory.name}{' with its draft' if extra else ''} in "
              f"{time.perf_counter() - start:.1f}s", flush=True)
        return model

    decode, draft_step = {}, {}
    model = load(target_dir)
    for b in args.batches:
        decode[b] = replay_ms(model, f"decode_b{b}", b, args.context, 0, args.steps)
    del model
    _free(args.device)
    model = load(draft_dir)
    for b in args.batches:
        draft_step[b] = replay_ms(model, f"decode_b{b}", b, args.context, 0, args.steps)
    del model
    _free(args.device)
    model = load(target_dir, draft=draft_dir, speculative_widths=tuple(args.widths))
    print(f"\n{'B':>4} {'W':>3} {'decode ms':>10} {'draft ms':>9} {'spec ms':>9} {'spec/decode':>12} "
          f"{'verify/decode':>14} {'spec/(decode+D drafts)':>23}")
    for b in args.batches:
        for w in args.widths:
            spec = replay_ms(model, f"speculative_b{b}_w{w}", b, args.context, w, args.steps)
            drafts = w - 1
            passes = max(drafts, min(drafts + 1, w))
            verify = spec - passes * draft_step[b]
            row = {"batch": b, "width": w, "decode_ms": decode[b], "draft_step_ms": draft_step[b],
                   "speculative_ms": spec, "speculative_over_decode": spec / decode[b],
                   "verification_over_decode": verify / decode[b],
                   "round_over_decode_plus_drafts": spec / (decode[b] + drafts * draft_step[b])}
            results["rows"].append(row)
            print(f"{b:>4} {w:>3} {decode[b]:>10.3f} {draft_step[b]:>9.3f} {spec:>9.3f} "
                  f"{row['speculative_over_decode']:>12.2f} {row['verification_over_decode']:>14.2f} "
                  f"{row['round_over_decode_plus_drafts']:>23.2f}", flush=True)
    if args.profile:
        from bench.decode import profile

        print(profile(model, f"speculative_b{args.profile[0]}_w{args.profile[1]}"), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
