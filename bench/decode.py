"""Decode throughput of the production executor against the HBM roofline and HF transformers.

    python bench/decode.py --shapes qwen3-0.6b llama-8b --batches 1 8 64 256 [--hf] [--json out.json]

For each shape the script writes a random bf16 checkpoint (config from a transformers config object,
weights drawn on the device), prepares it with ignition (the code path of `helios prepare`, kept in
memory: no sealing), loads it with `NativeModel.load`, and drives the executor with synthetic decode
cohorts: B lanes whose histories hold `--context` tokens, each round one token per lane, through the
whole seam (packing, upload, CUDA-graph replay, completion read-back and validation). A core whose
pending tokens stay on the device (the default) is driven as the scheduler drives it, with the next
round submitted while the current one runs (two frames); the one-round-at-a-time step is printed too.

Ratios printed, all measured in this run on this GPU:
  - roofline: (weight bytes + live cache bytes read per step) / copy bandwidth, where the copy
    bandwidth is a device-to-device copy of 2 GiB (bytes read + written over its time);
  - HF: `generate` with a static cache and torch.compile at batch 1 (`--hf`), per-token time from
    the difference of a long and a one-token generation;
  - llama.cpp (`--llamacpp BIN_DIR --llamacpp-model MODEL.gguf ...`, one GGUF a shape, bench/peer.py):
    its decode rate at each batch after a `--context`-token prompt a sequence, run after Helios's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import peer  # noqa: E402

SHAPES = {
    # name: (config class, config arguments)
    "qwen3-0.6b": ("Qwen3Config", dict(vocab_size=151936, hidden_size=1024, intermediate_size=3072,
                                       num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                                       head_dim=128, max_position_embeddings=40960, rms_norm_eps=1e-6,
                                       tie_word_embeddings=True,
                                       rope_parameters={"rope_type": "default", "rope_theta": 1e6})),
    "llama-8b": ("LlamaConfig", dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                                     num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                                     max_position_embeddings=131072, rms_norm_eps=1e-5, tie_word_embeddings=False,
                                     rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                                      "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                      "original_max_position_embeddings": 8192})),
    "tiny": ("Qwen3Config", dict(vocab_size=512, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                                 max_position_embeddings=4096, tie_word_embeddings=True,
                                 rope_parameters={"rope_type": "default", "rope_theta": 1e6})),
}
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TEMPLATE = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
            "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def make_checkpoint(shape: str, directory: Path, device: str) -> Path:
    """A random bf16 checkpoint of `shape` (weights ~ N(0, 0.02^2) drawn on `device`) with a byte tokenizer."""
    import torch
    import transformers
    from safetensors.torch import save_file
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    directory.mkdir(parents=True, exist_ok=True)
    class_name, arguments = SHAPES[shape]
    config = getattr(transformers, class_name)(**arguments, bos_token_id=256, eos_token_id=258, dtype="bfloat16")
    config.save_pretrained(directory)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    generator = torch.Generator(device=device).manual_seed(0)
    tensors = {}
    for name, parameter in model.state_dict().items():
        if name == "lm_head.weight" and config.tie_word_embeddings:
            continue
        value = torch.randn(parameter.shape, generator=generator, device=device, dtype=torch.float32) * 0.02
        if name.endswith("norm.weight"):
            value = value + 1.0
        tensors[name] = value.to(torch.bfloat16).cpu()
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tokenizer = Tokenizer(models.BPE(vocab={s: i for i, s in enumerate(alphabet)}, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(SPECIALS)
    tokenizer.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps(
        {"eos_token": "<|im_end|>", "tokenizer_class": "PreTrainedTokenizerFast"}))
    (directory / "chat_template.jinja").write_text(TEMPLATE)
    (directory / "generation_config.json").write_text(json.dumps({"eos_token_id": [258], "do_sample": False}))
    return directory


def copy_bandwidth(device) -> float:
    """Bytes per second of a device-to-device copy (read + written), best of 20."""
    import torch

    a = torch.empty(2**30, dtype=torch.uint8, device=device)
    b = torch.empty_like(a)
    best = float("inf")
    for _ in range(20):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        b.copy_(a)
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3)
    return 2 * a.numel() / best


def decode_rate(model, batch: int, context: int, steps: int) -> dict:
    """Tokens per second of `steps` decode rounds of `batch` lanes at `context` tokens of history."""
    from helios.proto import contract_pb2
    from helios.runtime.completion import validate_round
    from helios.runtime.packing import LaneInput
    from helios.runtime.request import SamplingParams
    from helios.runtime.rounds import RoundPlan

    def validate(plan, rows) -> None:  # what Scheduler.complete checks before any lane retires
        validate_round(plan.graph, plan.lanes, rows, sequence=plan.sequence,
                       sampled_tokens=model.contract.vocabulary.sampled_tokens, page_tokens=page_tokens,
                       frame=plan.frame)

    graphs = [g for g in model.graphs.values()
              if g.operation == contract_pb2.OPERATION_DECODE and g.batch_capacity >= batch]
    graph = min(graphs, key=lambda g: g.batch_capacity)
    page_tokens = model.contract.cache.page_tokens
    per_lane = -(-(context + steps + 1) // page_tokens)
    sampling = SamplingParams(temperature=0.0)

    def lanes(step: int) -> list[LaneInput]:
        return [LaneInput(slot=i, generation=1, consumed=context + step, tokens=(7 + i % 100,),
                          prompt_tokens_in_round=0, samples=True,
                          page_ids=tuple(range(i * per_lane, (i + 1) * per_lane)), seed=i, sampling=sampling,
                          output_limit=steps + 1, eos_ids=(258,), prompt_token_ids=(1, 2, 3))
                for i in range(batch)]

    cohorts = [lanes(s) for s in range(steps)]
    executor = model.executor
    for _ in range(3):
        model.run_round(graph.name, cohorts[0])  # rewrites every lane's page-table row once

    def plan(cohort, frame):  # as the scheduler plans a steady decode round: no page grew
        return RoundPlan(executor.sequence + 1, frame, graph.name, graph.operation, tuple(cohort),
                         tuple(f"r{i}" for i in range(len(cohort))), (), 0, 1)

    # One round at a time: pack, upload, replay, wait, read back and validate, then the next.
    start = time.perf_counter()
    for cohort in cohorts:
        one = plan(cohort, 0)
        executor.submit(one)
        validate(one, executor.collect(one))
    one_frame = time.perf_counter() - start
    seconds = one_frame
    framed = executor.frames == 2
    if framed:
        # As the scheduler runs a core whose pending tokens stay on the device: round N+1 is packed
        # and submitted while round N runs, then round N is collected (read back and validated).
        start = time.perf_counter()
        previous = None
        for i, cohort in enumerate(cohorts):
            current = plan(cohort, i % 2)
            executor.submit(current)
            if previous is not None:
                validate(previous, executor.collect(previous))
            previous = current
        validate(previous, executor.collect(previous))
        seconds = time.perf_counter() - start
    result = {"graph": graph.name, "batch": batch, "steps": steps, "seconds": seconds, "frames": 2 if framed else 1,
              "step_ms": 1e3 * seconds / steps, "one_frame_step_ms": 1e3 * one_frame / steps,
              "tokens_per_second": batch * steps / seconds}
    capture = model.executor.capture
    if capture is not None:
        import torch

        # The device's share: graph replays alone, back to back (no packing, upload or read-back).
        start_event, end_event = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start_event.record()
        for _ in range(steps):
            capture.replay(graph.name, rank_form="off")  # greedy rounds: the form the steps ran
        end_event.record()
        end_event.synchronize()
        result["replay_ms"] = start_event.elapsed_time(end_event) / steps
    return result


def profile(model, graph_name: str, rows: int = 18) -> str:
    """The most expensive device kernels of a few replays of one graph (torch.profiler)."""
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    for _ in range(2):
        model.executor.capture.replay(graph_name, rank_form="off")
    torch.cuda.synchronize()
    with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            model.executor.capture.replay(graph_name, rank_form="off")
        torch.cuda.synchronize()
    return prof.key_averages().table(sort_by="cuda_time_total", row_limit=rows, max_name_column_width=60)


def untied_embedding_bytes(core, model) -> int:
    """Bytes of the embedding table when the LM head is another tensor (only B rows of it are read)."""
    from helios.proto import program_pb2

    handle = next(h for h in model.manifests[0].graphs if h.name.startswith("decode"))
    program = program_pb2.Program.FromString(core.read(handle.program_resources[0]))
    decls = {d.name: d for d in program.tensors}
    table = next(decls[o.inputs[1]] for o in program.operators if o.op == "embedding")
    head = next(decls[o.inputs[1]] for o in program.operators if o.op == "logits")
    if table.resource == head.resource:
        return 0
    count = 1
    for e in table.shape:
        count *= int(e)
    return 2 * count


def roofline_step_seconds(model, batch: int, context: int, bandwidth: float, untied: int
                          ) -> tuple[float, int, int]:
    """(seconds, weight bytes, cache bytes) of one decode step at the copy bandwidth."""
    from helios.proto import manifest_pb2

    manifest = model.manifests[0]
    weight_bytes = model.weight_bytes
    token_bytes = 0
    for b in manifest.buffers:
        if b.role == manifest_pb2.BUFFER_ROLE_CACHE:
            per = 2 if b.dtype in (manifest_pb2.DTYPE_BF16, manifest_pb2.DTYPE_F16) else 4
            token_bytes += per * int(b.shape[2]) * int(b.shape[3])
    # NOTE: an untied embedding table is read only at the batch's rows; count it out of the step's bytes.
    weights = weight_bytes - untied
    cache = batch * (context + 1) * token_bytes
    return (weights + cache) / bandwidth, weights, cache


def hf_step_seconds(directory: Path, device: str, steps: int) -> float:
    """Per-token decode seconds of HF generate (static cache + torch.compile) at batch 1."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.bfloat16).to(device).eval()
    # NOTE: with a static cache on a GPU, generate compiles the forward itself (its compile_config:
    # torch.compile with CUDA graphs); wrapping it again breaks its cache updates.
    ids = torch.tensor([[5, 17, 99, 200, 33, 1, 2, 3]], device=device)

    def generate(n: int) -> float:
        torch.cuda.synchronize()
        start = time.perf_counter()
        model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, cache_implementation="static",
                       pad_token_id=0)
        torch.cuda.synchronize()
        return time.perf_counter() - start

    for _ in range(3):
        generate(steps)
    long = min(generate(steps) for _ in range(3))
    short = min(generate(1) for _ in range(3))
    return (long - short) / (steps - 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", nargs="+", default=["qwen3-0.6b", "llama-8b"], choices=sorted(SHAPES))
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 8, 64, 256])
    parser.add_argument("--context", type=int, default=512, help="history tokens of every lane (default 512)")
    parser.add_argument("--steps", type=int, default=128, help="timed decode rounds per batch (default 128)")
    parser.add_argument("--context-tokens", type=int, default=2048, help="prepared context (default 2048)")
    parser.add_argument("--profile", type=int, nargs="*", default=[], metavar="B",
                        help="print the device kernels of the batch-B graph (torch.profiler, 5 replays)")
    parser.add_argument("--hf", action="store_true", help="also time HF generate (static cache + torch.compile)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--linear", choices=["auto", "triton", "torch"], default="auto",
                        help="small matrix products: timed choice per shape (auto), or always Triton / torch")
    parser.add_argument("--json", type=Path, help="write the results here as JSON")
    parser.add_argument("--workdir", type=Path, help="checkpoint directory root (default: a temporary one)")
    peer.add_arguments(parser)
    args = parser.parse_args(argv)
    peer.check_arguments(parser, args)

    import torch

    from helios.ignition.prepare import PreparationOptions, prepare_checkpoint
    from helios.production.native_model import LoadOptions, NativeModel

    root = args.workdir or Path(tempfile.mkdtemp(prefix="helios-bench-"))
    cuda = args.device.startswith("cuda")
    bandwidth = copy_bandwidth(args.device) if cuda else float("nan")
    print(f"device: {torch.cuda.get_device_name() if cuda else 'cpu'}; copy bandwidth {bandwidth / 1e9:.0f} GB/s")
    results = {"copy_bandwidth": bandwidth, "shapes": {}}
    for shape in args.shapes:
        t0 = time.perf_counter()
        directory = make_checkpoint(shape, root / shape, args.device)
        print(f"\n{shape}: checkpoint written in {time.perf_counter() - t0:.1f}s")
        rows, startups = [], {}
        for batch in args.batches:
            # NOTE: one core per batch, its slots the batch: the graph then runs the slot-row tail (a
            # graph of fewer lanes than slots gathers its submission rows first: docs/ignition.md).
            options = PreparationOptions(dtype="bf16", page_tokens=16, batch_capacities=(batch,),
                                         prefill_capacities=(64,), context_tokens=args.context_tokens)
            core = prepare_checkpoint(directory, options)
            model = NativeModel.load(core, LoadOptions(device=args.device, linear=args.linear))
            startups[batch] = {p.name: p.seconds for p in model.startup}
            decode = next(g for g in model.graphs.values() if g.name.startswith("decode"))
            rate = decode_rate(model, batch, args.context, args.steps)
            rate["launches"], rate["operators"] = len(decode.plan.launches), decode.plan.operator_count
            rate["linear"] = [d.describe() for d in model.linear_decisions]
            if cuda:
                untied = untied_embedding_bytes(core, model)
                roof, weights, cache = roofline_step_seconds(model, batch, args.context, bandwidth, untied)
                rate["roofline_step_ms"] = 1e3 * roof
                rate["roofline_fraction"] = roof / (rate["step_ms"] / 1e3)
                rate["bytes_per_step"] = weights + cache
            rows.append(rate)
            phases = ", ".join(f"{name} {seconds:.2f}s" for name, seconds in startups[batch].items())
            print(f"  batch {batch:4d}: {rate['tokens_per_second']:10.1f} tok/s, {rate['step_ms']:.3f} ms/step"
                  + (f" ({rate['frames']} frames; one frame {rate['one_frame_step_ms']:.3f} ms/step)")
                  + (f" (replay alone {rate['replay_ms']:.3f} ms)" if "replay_ms" in rate else "")
                  + (f", roofline {rate['roofline_step_ms']:.3f} ms/step -> {rate['roofline_fraction']:.2f} of it"
                     if cuda else "")
                  + f"; {rate['launches']} launches for {rate['operators']} operators; load: {phases}", flush=True)
            for line in rate["linear"]:
                print(f"    {line}")
            if cuda and batch in args.profile:
                print(profile(model, rate["graph"]), flush=True)
            del model, core
            if cuda:
                torch.cuda.empty_cache()
        entry = {"rows": rows, "startup": startups}
        if args.hf and cuda:
            hf = hf_step_seconds(directory, args.device, 64)
            ours = rows[args.batches.index(1)]["step_ms"] / 1e3 if 1 in args.batches else float("nan")
            entry["hf_step_ms"] = 1e3 * hf
            entry["speedup_vs_hf"] = hf / ours
            print(f"  HF static cache + torch.compile, batch 1: {1e3 * hf:.3f} ms/token; Helios is {hf / ours:.2f}x",
                  flush=True)
        rates = peer.run_for_shape(args, shape, prompt=args.context, generated=128)
        if rates is not None:
            entry["llamacpp_tokens_per_second"] = {b: rates[b].decode_tokens_per_second for b in args.batches}
            for row in rows:
                print("  " + peer.ratio_line(f"decode, batch {row['batch']}", row["tokens_per_second"],
                                             rates[row["batch"]].decode_tokens_per_second), flush=True)
        results["shapes"][shape] = entry
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    raise SystemExit(main())
