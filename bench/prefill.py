"""Prefill throughput of the production executor against the bf16 matrix-product roofline.

    python bench/prefill.py --shapes qwen3-0.6b llama-8b --batches 1 8 --prompt-tokens 2048 [--profile 1]

For each shape and batch B the script writes a random bf16 checkpoint (bench/decode.py's shapes and
checkpoints), prepares it with one PREFILL capacity of `--prompt-tokens` rows and B request slots,
loads it with `NativeModel.load`, and times the prefill of B fresh prompts of `--prompt-tokens` tokens
each as the scheduler runs it: a PREFILL graph holds one lane, so B rounds, one a prompt, each whole
prompt in its round and sampling its first token, through the whole seam (packing, upload, CUDA-graph
replay, completion read-back). The device's share (graph replays alone, timed with CUDA events) is
printed beside it. Then the same B prompts are served through the batching runtime (`served`: every
request submitted at once, one output token each, fresh prompts every repeat so no prefix is
reused): what a user's prompts cost, the INITIALIZATION round included, and with two frames the
host's work for one prompt's round overlapping the device's for another's.

The ratio printed is against the compute roofline measured in this run on this GPU: the round's
floating-point work (2 FLOPs a multiply-add: every layer's products over every prompt row, causal
attention's two products over each prompt's triangle, the LM head over the sampled rows) at the
rate of a large bf16 matrix product (`torch.mm`, 8192 x 8192 x 8192, best of 10). With `--llamacpp
BIN_DIR --llamacpp-model MODEL.gguf ...` (one GGUF a shape, bench/peer.py) llama.cpp prefills B prompts
of the same length at once on the same GPU, after Helios, and the ratio of the rates is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import peer  # noqa: E402
from bench.decode import SHAPES, make_checkpoint, profile  # noqa: E402

PAGE_TOKENS = 16


def matmul_rate(device: str, size: int = 8192) -> float:
    """FLOP/s of a bf16 `size`-cube matrix product, best of 10."""
    import torch

    a = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    b = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    out = torch.empty_like(a)
    for _ in range(3):
        torch.mm(a, b, out=out)
    best = float("inf")
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.mm(a, b, out=out)
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3)
    return 2 * size**3 / best


def round_flops(shape: str, batch: int, prompt: int) -> float:
    """Floating-point operations of one PREFILL round of `batch` prompts of `prompt` tokens."""
    _, c = SHAPES[shape]
    hidden, layers, heads, kv_heads = c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"], \
        c["num_key_value_heads"]
    head_dim = c.get("head_dim", hidden // heads)
    per_layer = hidden * head_dim * (2 * heads + 2 * kv_heads) + 3 * hidden * c["intermediate_size"]
    rows = batch * prompt
    products = 2 * layers * per_layer * rows
    attention = batch * layers * heads * head_dim * 2 * 2 * prompt * (prompt + 1) / 2
    head = 2 * batch * hidden * c["vocab_size"]
    return products + attention + head


def prefill_round(model, batch: int, prompt: int, repeats: int) -> dict:
    """Seconds to prefill `batch` whole prompts of `prompt` tokens, one PREFILL round each (medians of
    `repeats`)."""
    from helios.proto import contract_pb2
    from helios.runtime.lanes import LaneInput
    from helios.runtime.request import SamplingParams

    rows = batch * prompt
    graphs = [g for g in model.graphs.values()
              if g.operation == contract_pb2.OPERATION_PREFILL and g.packed_token_capacity >= prompt]
    graph = min(graphs, key=lambda g: g.packed_token_capacity)
    per_lane = -(-(prompt + 1) // PAGE_TOKENS)
    sampling = SamplingParams(temperature=0.0)
    lanes = []
    for i in range(batch):
        ids = tuple(int(t) for t in ((7 + 31 * i + 13 * j) % 250 for j in range(prompt)))
        lanes.append(LaneInput(slot=i, generation=1, consumed=0, tokens=ids, prompt_tokens_in_round=prompt,
                               samples=True, page_ids=tuple(range(i * per_lane, (i + 1) * per_lane)), seed=i,
                               sampling=sampling, output_limit=1, eos_ids=(258,), prompt_token_ids=ids))
    for _ in range(2):
        model.run_round(graph.name, lanes[:1])
    walls = []
    for _ in range(repeats):
        start = time.perf_counter()
        for lane in lanes:
            model.run_round(graph.name, [lane])
        walls.append(time.perf_counter() - start)
    result = {"graph": graph.name, "batch": batch, "prompt_tokens": prompt, "rows": rows,
              "seconds": statistics.median(walls), "launches": len(graph.plan.launches)}
    capture = model.executor.capture
    if capture is not None:
        import torch

        replays = []
        for _ in range(repeats):
            start_event, end_event = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start_event.record()
            for _ in range(batch):
                capture.replay(graph.name, rank_form="off")
            end_event.record()
            end_event.synchronize()
            replays.append(start_event.elapsed_time(end_event) / 1e3)
        result["replay_seconds"] = statistics.median(replays)
    result["tokens_per_second"] = rows / result["seconds"]
    return result


def served_prefill(model, batch: int, prompt: int, repeats: int) -> float:
    """Seconds to serve `batch` fresh prompts of `prompt` tokens and one output token each through the
    batching runtime, all submitted at once (`bench.serve.throughput`; median of `repeats`, a warm-up
    run first)."""
    from bench.serve import throughput

    walls = []
    for repeat in range(repeats + 1):
        workload = [([(11 + 37 * repeat + 31 * i + 13 * j) % 250 for j in range(prompt)], 1) for i in range(batch)]
        served = throughput(model, workload, temperature=0.0)
        if served["output_tokens"] != batch:
            raise SystemExit(f"served {served['output_tokens']} output tokens for {batch} prompts")
        if repeat:  # the first run warms the runtime's own paths
            walls.append(served["seconds"])
    return statistics.median(walls)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", nargs="+", default=["qwen3-0.6b", "llama-8b"], choices=sorted(SHAPES))
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 8], help="prompts a round (default 1 8)")
    parser.add_argument("--prompt-tokens", type=int, default=2048, help="tokens of every prompt (default 2048)")
    parser.add_argument("--repeats", type=int, default=10, help="timed rounds per batch (default 10)")
    parser.add_argument("--profile", type=int, nargs="*", default=[], metavar="B",
                        help="print the device kernels of the PREFILL graph after batch B (torch.profiler, 5 replays)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--json", type=Path, help="write the results here as JSON")
    parser.add_argument("--workdir", type=Path, help="checkpoint directory root (default: a temporary one)")
    peer.add_arguments(parser)
    args = parser.parse_args(argv)
    peer.check_arguments(parser, args)
    if args.prompt_tokens < 1 or args.repeats < 1 or min(args.batches) < 1:
        parser.error("--prompt-tokens, --repeats and every batch must be at least 1")

    import torch

    from helios.ignition.prepare import PreparationOptions, prepare_checkpoint
    from helios.production.native_model import LoadOptions, NativeModel

    cuda = args.device.startswith("cuda")
    root = args.workdir or Path(tempfile.mkdtemp(prefix="helios-bench-"))
    peak = matmul_rate(args.device) if cuda else float("nan")
    print(f"device: {torch.cuda.get_device_name() if cuda else 'cpu'}; bf16 matrix product "
          f"{peak / 1e12:.0f} TFLOP/s (8192-cube, best of 10)")
    results = {"matmul_flops": peak, "shapes": {}}
    for shape in args.shapes:
        t0 = time.perf_counter()
        directory = make_checkpoint(shape, root / shape, args.device)
        print(f"\n{shape}: checkpoint written in {time.perf_counter() - t0:.1f}s")
        entries = []
        for batch in args.batches:
            options = PreparationOptions(dtype="bf16" if cuda else "fp32", page_tokens=PAGE_TOKENS,
                                         batch_capacities=(batch,), prefill_capacities=(args.prompt_tokens,),
                                         context_tokens=args.prompt_tokens + PAGE_TOKENS,
                                         prompt_score_top=0,
                                         snapshot_capacity=0)
            core = prepare_checkpoint(directory, options)
            model = NativeModel.load(core, LoadOptions(device=args.device))
            result = prefill_round(model, batch, args.prompt_tokens, args.repeats)
            flops = round_flops(shape, batch, args.prompt_tokens)
            result["tflops_per_round"] = flops / 1e12
            result["linear"] = [d.describe() for d in model.linear_decisions]
            line = (f"  {batch:3d} prompts of {args.prompt_tokens} tokens: {result['tokens_per_second']:12,.0f} tok/s, "
                    f"{1e3 * result['seconds']:.2f} ms")
            if cuda:
                result["roofline_seconds"] = flops / peak
                result["roofline_fraction"] = result["roofline_seconds"] / result["seconds"]
                result["replay_roofline_fraction"] = result["roofline_seconds"] / result["replay_seconds"]
                line += (f" (replay alone {1e3 * result['replay_seconds']:.2f} ms); {flops / 1e12:.2f} TFLOP at the "
                         f"product rate {1e3 * result['roofline_seconds']:.2f} ms -> {result['roofline_fraction']:.2f}"
                         f" of the roofline ({result['replay_roofline_fraction']:.2f} for the replays); "
                         f"{result['launches']} launches a round")
            print(line, flush=True)
            for decision in result["linear"]:  # the products' paths, as the load's policy chose them
                print(f"    {decision}")
            result["served_seconds"] = served_prefill(model, batch, args.prompt_tokens, max(1, args.repeats // 2))
            result["served_tokens_per_second"] = batch * args.prompt_tokens / result["served_seconds"]
            line = (f"      served (batching runtime, one output token each): "
                    f"{result['served_tokens_per_second']:12,.0f} tok/s, {1e3 * result['served_seconds']:.2f} ms")
            if cuda:
                result["served_roofline_fraction"] = result["roofline_seconds"] / result["served_seconds"]
                line += f" -> {result['served_roofline_fraction']:.2f} of the roofline"
            print(line, flush=True)
            if cuda and batch in args.profile:
                print(profile(model, result["graph"]), flush=True)
            entries.append(result)
            del model, core
            if cuda:
                torch.cuda.empty_cache()
        rates = peer.run_for_shape(args, shape, prompt=args.prompt_tokens, generated=1)
        for result in entries if rates is not None else ():
            result["llamacpp_tokens_per_second"] = rates[result["batch"]].prefill_tokens_per_second
            print("  " + peer.ratio_line(f"prefill, {result['batch']} prompts", result["tokens_per_second"],
                                         result["llamacpp_tokens_per_second"]), flush=True)
        results["shapes"][shape] = entries
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    raise SystemExit(main())
