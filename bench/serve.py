"""Serving throughput and latency of the production runtime (scheduler + executor), with baselines
measured in the same run on the same GPU.

    python bench/serve.py [--shape qwen3-0.6b] [--hf-requests 64] [--concurrency 1 8 32] [--json out.json]
    python bench/serve.py --tiny            # a seconds-long smoke run of every part (CPU: interpreted kernels)

Parts, in order:
  1. throughput: nano-vllm's workload (256 requests, `random.seed(0)`, prompt ids uniform in [0, 10000],
     prompt and output lengths uniform in [100, 1024], temperature 0.6, EOS ignored: 133,966 output
     tokens) submitted at once to `BatchingRuntime`; total output tokens per second of wall time;
  2. roofline: the same workload's time if every decode step read the weights plus the live cache of
     every resident request at the device's copy bandwidth (2 GiB device-to-device copy, best of 20),
     all requests resident from the start; the ratio is achieved / roofline tokens per second;
  3. GPU busy: CUDA events around every graph replay of part 1; over the longest run of consecutive
     DECODE rounds (steady decode), the sum of replay times over the wall time of that run;
  4. HF transformers' continuous batching (`init_continuous_batching`, the same random weights) on the
     first `--hf-requests` requests of the workload, output tokens per second; the ratio is part 1's
     rate over this one (fewer requests for HF keep the run short: its rate at 64 concurrent
     requests is an upper bound of its rate per request at 256, since its batch is smaller);
  5. HTTP latency: the OpenAI-compatible app (uvicorn, in process) over a fresh runtime on the same
     loaded model; streamed chat requests with `return_token_ids` at each concurrency in
     `--concurrency`, sent by a client in its own process; time to first token and inter-token gaps
     (p50, p90, p99) as the client sees them;
  6. the batch-1 step as served: one greedy request of 1,024 output tokens alone through
     `BatchingRuntime`, wall time over tokens; the HTTP inter-token p50 at concurrency 1 is printed
     as a multiple of it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import string
import sys
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def nano_vllm_workload(count: int, *, max_input: int, max_output: int, low: int) -> list[tuple[list[int], int]]:
    """(prompt ids, output length) per request, exactly as nano-vllm's bench.py draws them."""
    random.seed(0)
    prompts = [[random.randint(0, 10000) for _ in range(random.randint(low, max_input))] for _ in range(count)]
    outputs = [random.randint(low, max_output) for _ in range(count)]
    return list(zip(prompts, outputs, strict=True))


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return {"p50": at(0.5), "p90": at(0.9), "p99": at(0.99), "count": len(ordered)}


class ReplayTimer:
    """CUDA events around every graph replay (or plan run on a CPU) of a loaded model."""

    def __init__(self, model) -> None:
        import torch

        self.torch = torch
        self.rounds: list[tuple[str, float, object, object]] = []  # (graph, host time, start, end)
        self.cuda = model.device.type == "cuda" and model.executor.capture is not None
        if self.cuda:
            capture = model.executor.capture
            replay = capture.replay

            def timed(name: str, **form) -> None:
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                host = time.perf_counter()
                start.record()
                replay(name, **form)
                end.record()
                self.rounds.append((name, host, start, end))

            capture.replay = timed

    def steady_decode_busy(self, decode_graphs: set[str]) -> dict:
        """GPU-busy fraction over the longest run of consecutive decode rounds."""
        if not self.cuda or len(self.rounds) < 3:
            return {}
        self.torch.cuda.synchronize()
        best, run = (0, 0), None
        for i, (name, *_rest) in enumerate(self.rounds):
            if name in decode_graphs:
                run = i if run is None else run
                if i - run > best[1] - best[0]:
                    best = (run, i)
            else:
                run = None
        first, last = best
        if last - first < 2:
            return {}
        busy = sum(self.rounds[i][2].elapsed_time(self.rounds[i][3]) / 1e3 for i in range(first, last))
        wall = self.rounds[last][1] - self.rounds[first][1]
        return {"rounds": last - first, "wall_s": wall, "gpu_s": busy, "busy_fraction": busy / wall}


def roofline(model, workload, bandwidth: float, untied: int) -> dict:
    """Tokens per second if each decode step read weights + every resident request's live cache."""
    from helios.proto import manifest_pb2

    token_bytes = 0
    for b in model.manifests[0].buffers:
        if b.role == manifest_pb2.BUFFER_ROLE_CACHE:
            per = 2 if b.dtype in (manifest_pb2.DTYPE_BF16, manifest_pb2.DTYPE_F16) else 4
            token_bytes += per * int(b.shape[2]) * int(b.shape[3])
    weights = model.weight_bytes - untied
    seconds, tokens = 0.0, 0
    for step in range(max(n for _, n in workload)):
        live = [len(p) + step for p, n in workload if step < n]
        tokens += len(live)
        seconds += (weights + token_bytes * sum(live)) / bandwidth
    return {"tokens": tokens, "seconds": seconds, "tokens_per_second": tokens / seconds,
            "weight_bytes": weights, "cache_bytes_per_token": token_bytes}


def serve_at_once(runtime, requests) -> tuple[int, float]:
    """Every request submitted at once to `runtime` (started here, shut down after): (output
    tokens, seconds of wall time)."""
    from helios.runtime.events import Finished, TokenEvent

    async def main() -> tuple[int, float]:
        runtime.start()
        try:
            start = time.perf_counter()
            streams = [runtime.submit(r) for r in requests]
            total = 0
            for stream in streams:
                async for event in stream:
                    if isinstance(event, Finished):
                        total += event.output_tokens
                    elif not isinstance(event, TokenEvent):
                        raise RuntimeError(f"request {stream.request_id} ended with {event}")
            return total, time.perf_counter() - start
        finally:
            runtime.shutdown()

    return asyncio.run(main())


def throughput(model, workload, *, temperature: float) -> dict:
    """Every request submitted at once to a BatchingRuntime; output tokens per second of wall time."""
    from helios.production.loading import runtime_for
    from helios.runtime.interface import PreparedRequest
    from helios.runtime.limits import AdmissionLimits
    from helios.runtime.options import RuntimeOptions
    from helios.runtime.request import GenerationRequest, SamplingParams

    slots = model.contract.max_concurrency
    limits = AdmissionLimits(max_active=slots, queue_capacity=max(len(workload), 1))
    runtime = runtime_for(model, RuntimeOptions(limits))
    requests = [PreparedRequest(f"r{i}", GenerationRequest(tuple(prompt), max_tokens=n, ignore_eos=True,
                                                           sampling=SamplingParams(temperature=temperature, seed=i)))
                for i, (prompt, n) in enumerate(workload)]

    tokens, seconds = serve_at_once(runtime, requests)
    counters = runtime.scheduler.counters
    return {"requests": len(workload), "output_tokens": tokens, "seconds": seconds,
            "tokens_per_second": tokens / seconds, "launches": dict(counters.launches),
            "preemptions": counters.preemptions, "pages": model.pages, "slots": slots}


def hf_continuous_batching(directory: Path, workload, device: str, *, temperature: float) -> dict:
    """HF transformers' continuous batching over `workload`; generated tokens per second."""
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.bfloat16).to(device).eval()
    config = GenerationConfig(do_sample=temperature > 0, temperature=temperature or None,
                              max_new_tokens=max(n for _, n in workload), eos_token_id=-1, pad_token_id=0)
    manager = model.init_continuous_batching(generation_config=config)
    manager.start()
    try:
        start = time.perf_counter()
        for i, (prompt, n) in enumerate(workload):
            manager.add_request(prompt, request_id=f"r{i}", max_new_tokens=n)
        tokens, done = 0, 0
        while done < len(workload):
            result = manager.get_result(timeout=5)
            if result is not None and result.is_finished():
                tokens += len(result.generated_tokens)
                done += 1
            elif result is None and not manager.is_running():
                raise RuntimeError("HF continuous batching stopped before finishing")
        seconds = time.perf_counter() - start
    finally:
        manager.stop(block=True)
    return {"requests": len(workload), "output_tokens": tokens, "seconds": seconds,
            "tokens_per_second": tokens / seconds}


def http_latency(core, model, concurrencies: list[int], *, prompt_chars: int, max_tokens: int) -> list[dict]:
    """Streamed chat through the HTTP app over a fresh runtime; TTFT and inter-token gaps."""
    import socket

    import uvicorn

    from helios.frontend.bootstrap import Bootstrap
    from helios.frontend.preparation import Preparer
    from helios.production.loading import runtime_for
    from helios.runtime.limits import AdmissionLimits
    from helios.runtime.options import RuntimeOptions
    from helios.server.app import create_app
    from helios.server.state import ServerState

    slots = model.contract.max_concurrency
    runtime = runtime_for(model, RuntimeOptions(AdmissionLimits(max_active=slots, queue_capacity=256)))
    preparer = Preparer(Bootstrap.from_core(core), served_id=model.contract.served_id,
                        context_tokens=model.contract.context_tokens)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(ServerState(runtime=runtime, preparer=preparer)),
                                           host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        # the client in its own process, as a user's is: in this one its parsing would take the GIL
        # from the server's event loop and the runtime's worker, and its gaps would be partly its own
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as client:
            return client.submit(client_sweeps, port, model.contract.served_id, concurrencies, prompt_chars,
                                 max_tokens).result()
    finally:
        server.should_exit = True
        thread.join(30)


def client_sweeps(port: int, served_id: str, concurrencies: list[int], prompt_chars: int, max_tokens: int
                  ) -> list[dict]:
    """The HTTP client (a child process): 2 x concurrency streamed chat requests at each concurrency,
    greedy; time to first token and inter-token gaps as the client sees them."""
    import httpx

    rng = random.Random(1)

    async def one(client: httpx.AsyncClient, ttft: list, gaps: list) -> int:
        text = "".join(rng.choice(string.ascii_lowercase + " ") for _ in range(prompt_chars))
        body = {"model": served_id, "messages": [{"role": "user", "content": text}],
                "max_tokens": max_tokens, "temperature": 0, "stream": True, "return_token_ids": True}
        start = time.perf_counter()
        last, count = None, 0
        async with client.stream("POST", "/v1/chat/completions", json=body) as response:
            async for line in response.aiter_lines():
                if not line.startswith("data: {"):
                    continue
                ids = json.loads(line[6:])["choices"]
                if ids and ids[0].get("token_ids"):
                    now = time.perf_counter()
                    if last is None:
                        ttft.append(now - start)
                    else:
                        gaps.append(now - last)
                    last, count = now, count + 1
        return count

    async def sweep(concurrency: int) -> dict:
        ttft, gaps = [], []
        limits = httpx.Limits(max_connections=concurrency + 4)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=600, limits=limits) as client:
            start = time.perf_counter()
            counts = await asyncio.gather(*(one(client, ttft, gaps) for _ in range(2 * concurrency)))
            seconds = time.perf_counter() - start
        return {"concurrency": concurrency, "requests": 2 * concurrency, "tokens": sum(counts), "seconds": seconds,
                "ttft_s": percentiles(ttft), "itl_s": percentiles(gaps)}

    return [asyncio.run(sweep(c)) for c in concurrencies]


def served_step(model, *, tokens: int) -> dict:
    """The batch-1 step as the runtime serves it: one greedy request of `tokens` output tokens alone
    (a short prompt), its wall time over its tokens (the prompt's round is under 0.5% of it)."""
    served = throughput(model, [([(7 + 13 * j) % 250 for j in range(16)], tokens)], temperature=0.0)
    return {"tokens": served["output_tokens"], "seconds": served["seconds"],
            "step_s": served["seconds"] / served["output_tokens"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="qwen3-0.6b", help="a shape of bench/decode.py (default qwen3-0.6b)")
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--hf-requests", type=int, default=64, help="requests HF runs (0 skips it; default 64)")
    parser.add_argument("--concurrency", nargs="*", type=int, default=[1, 8, 32, 128])
    parser.add_argument("--page-tokens", type=int, default=16)
    parser.add_argument("--pending-token", choices=["device", "host"], default="device",
                        help="where the core keeps each lane's pending token (helios prepare --pending-token); "
                             "device lets two rounds be in flight (default device)")
    parser.add_argument("--tiny", action="store_true", help="a seconds-long smoke run of every part")
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda when present)")
    parser.add_argument("--json", type=Path, help="also write every figure to this file")
    args = parser.parse_args(argv)

    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from decode import copy_bandwidth, make_checkpoint, untied_embedding_bytes

    from helios.ignition.prepare import PreparationOptions, prepare_checkpoint
    from helios.production.loading import load_native_model
    from helios.proto import contract_pb2

    if args.tiny:
        shape, count, max_len, low, context = "tiny", 6, 24, 8, 64
        batches, prefills, concurrency, prompt_chars, http_tokens = (1, 2, 4), (8, 16), [1, 2], 8, 3
        args.hf_requests = min(args.hf_requests, 4)
    else:
        shape, count, max_len, low, context = args.shape, args.requests, 1024, 100, 2048
        batches, prefills = (1, 2, 4, 8, 16, 32, 64, 128, 256), (64, 256, 1024)
        concurrency, prompt_chars, http_tokens = args.concurrency, 256, 128
    workload = nano_vllm_workload(count, max_input=max_len, max_output=max_len, low=low)
    if args.tiny:  # the tiny shape's vocabulary is 512 ids
        workload = [([t % 256 for t in prompt], n) for prompt, n in workload]
    results: dict = {"shape": shape, "device": device, "workload_output_tokens": sum(n for _, n in workload)}
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        directory = make_checkpoint(shape, Path(tmp) / shape, device)
        options = PreparationOptions(dtype="bf16" if device == "cuda" else "fp32", page_tokens=args.page_tokens,
                                     batch_capacities=batches, prefill_capacities=prefills, context_tokens=context,
                                     pending_token=args.pending_token)
        core = prepare_checkpoint(directory, options)
        results["prepare_s"] = time.perf_counter() - started
        started = time.perf_counter()
        model = load_native_model(core, device=device)
        results["load_s"] = time.perf_counter() - started
        results["startup"] = {p.name: p.seconds for p in model.startup}
        print(f"prepared in {results['prepare_s']:.1f}s, loaded in {results['load_s']:.1f}s, "
              f"{model.pages} pages", flush=True)
        timer = ReplayTimer(model)
        results["helios"] = throughput(model, workload, temperature=0.6)
        executor = model.executor
        results["frames"] = {"pending_token": args.pending_token,
                             "peak_outstanding": getattr(executor, "peak_outstanding", 1),
                             "submissions_while_outstanding": getattr(executor, "submissions_while_outstanding", 0)}
        print("helios", json.dumps(results["helios"]), json.dumps(results["frames"]), flush=True)
        decode_graphs = {g.name for g in model.graphs.values() if g.operation == contract_pb2.OPERATION_DECODE}
        results["steady_decode"] = timer.steady_decode_busy(decode_graphs)
        print("steady decode", json.dumps(results["steady_decode"]), flush=True)
        if device == "cuda":
            bandwidth = copy_bandwidth(torch.device(device))
            results["roofline"] = roofline(model, workload, bandwidth, untied_embedding_bytes(core, model))
            results["roofline"]["copy_bandwidth"] = bandwidth
            results["roofline_ratio"] = results["helios"]["tokens_per_second"] / results["roofline"]["tokens_per_second"]
            print("roofline", json.dumps(results["roofline"]), f"ratio {results['roofline_ratio']:.3f}", flush=True)
        if args.hf_requests:
            try:
                results["hf"] = hf_continuous_batching(directory, workload[: args.hf_requests], device,
                                                       temperature=0.6)
                results["hf_ratio"] = results["helios"]["tokens_per_second"] / results["hf"]["tokens_per_second"]
                print("hf", json.dumps(results["hf"]), f"ratio {results['hf_ratio']:.1f}", flush=True)
            except Exception as error:  # the baseline's own failure is reported, not hidden
                results["hf"] = {"error": f"{type(error).__name__}: {error}"}
                print("hf failed:", results["hf"]["error"], flush=True)
        if concurrency:
            results["http"] = http_latency(core, model, concurrency, prompt_chars=prompt_chars, max_tokens=http_tokens)
            for row in results["http"]:
                print("http", json.dumps(row), flush=True)
            results["batch1_step"] = served_step(model, tokens=8 if args.tiny else 1024)
            step = results["batch1_step"]["step_s"]
            line = f"batch-1 step served alone: {1e3 * step:.3f} ms"
            for row in results["http"]:
                if row["concurrency"] == 1 and row["itl_s"]:
                    row["itl_p50_over_step"] = row["itl_s"]["p50"] / step
                    line += (f"; HTTP inter-token p50 at concurrency 1: {1e3 * row['itl_s']['p50']:.3f} ms = "
                             f"{row['itl_p50_over_step']:.2f}x the step")
            print(line, flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
