"""Host offload on a device: time to first token of a long prompt re-sent after another prompt
evicted its checkpoints from a device cache forced small, with the host tier (its prefix readmitted
from host memory) against without it (the prefix recomputed). Prints both TTFTs, their ratio, the
host-tier metrics, and whether the re-sent request's tokens agree between the two.

    python bench/offload.py --checkpoint DIR [--prompt-tokens 8192] [--device cuda]   # a GPU measurement
    python bench/offload.py --smoke                                                   # CPU, a tiny core

The checkpoint is a Hugging Face directory (e.g. the Qwen3-0.6B shape), prepared here (bf16 on a GPU,
fp32 on a CPU, page_tokens 16). The device cache holds one prompt and a half, so the second prompt
evicts most of the first's pages. `--smoke` builds the tests' tiny qwen3 checkpoint, with 120-token
prompts: it checks the path, not the speed (Triton interpreted on a CPU; on the 2-core development
machine it printed ratios from 1.7x to 3.2x of interpreted-kernel times, as the load varied: nothing
about a GPU).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path


def _send(runtime, request_id: str, prompt: tuple[int, ...]) -> tuple[float, list[int]]:
    """(seconds to the first token, the tokens) of one greedy request on a started runtime."""
    from helios.runtime.events import Finished, TokenEvent
    from helios.runtime.interface import PreparedRequest
    from helios.runtime.request import GenerationRequest, SamplingParams

    request = PreparedRequest(request_id, GenerationRequest(prompt, max_tokens=4, ignore_eos=True,
                                                            sampling=SamplingParams(temperature=0.0)))

    async def main():
        start, first, tokens = time.perf_counter(), None, []
        async for event in runtime.submit(request):
            if isinstance(event, TokenEvent):
                first = first or time.perf_counter()
                tokens.append(event.token_id)
            elif not isinstance(event, Finished):
                raise RuntimeError(f"{request_id} ended with {event}")
        return (first or time.perf_counter()) - start, tokens

    return asyncio.run(main())


def measure(core, *, prompt_tokens: int, device: str, host_cache_gib: float | None, pages: int, seed: int = 0):
    """TTFT of the first send, of the re-send after eviction, the re-send's tokens and the metrics."""
    import random

    from helios.production import load_runtime
    from helios.runtime.limits import AdmissionLimits
    from helios.runtime.options import RuntimeOptions

    rng = random.Random(seed)
    vocabulary = core.contract.model.vocabulary.sampled_tokens
    first = tuple(rng.randrange(vocabulary) for _ in range(prompt_tokens))
    other = tuple(rng.randrange(vocabulary) for _ in range(prompt_tokens))
    runtime = load_runtime(core, RuntimeOptions(AdmissionLimits(max_active=1, queue_capacity=2), device=device,
                                                pages=pages, host_cache_gib=host_cache_gib))
    runtime.start()
    try:
        cold, _ = _send(runtime, "first", first)
        _send(runtime, "evicting", other)  # its pages evict most of the first prompt's checkpoints
        again, tokens = _send(runtime, "again", first)
        return cold, again, tokens, runtime.metrics()
    finally:
        runtime.shutdown()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", help="a Hugging Face checkpoint directory to prepare and serve")
    parser.add_argument("--smoke", action="store_true", help="CPU, the tests' tiny qwen3 checkpoint, short prompts")
    parser.add_argument("--prompt-tokens", type=int, default=8192)
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda when present)")
    parser.add_argument("--host-cache-gib", type=float, default=None, help="the host tier's bound (default: sized)")
    args = parser.parse_args()
    if not args.smoke and not args.checkpoint:
        parser.error("give --checkpoint DIR (a GPU measurement) or --smoke")
    import os

    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu":  # the kernels run interpreted: set before anything defines them
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from helios.ignition.prepare import PreparationOptions, prepare_checkpoint

    prompt_tokens = 120 if args.smoke else args.prompt_tokens
    page_tokens = 16
    with tempfile.TemporaryDirectory() as tmp:
        directory = args.checkpoint
        if args.smoke:
            from tests.fixtures.checkpoints import make_checkpoint

            directory = make_checkpoint("qwen3", Path(tmp) / "qwen3")
        context = prompt_tokens + 16
        core = prepare_checkpoint(directory, PreparationOptions(
            dtype="bf16" if device.startswith("cuda") else "fp32", page_tokens=page_tokens, batch_capacities=(1,),
            prefill_capacities=(64,) if args.smoke else (2048,), context_tokens=-(-context // 16) * 16))
        pages = (3 * prompt_tokens // 2) // page_tokens + 2  # one prompt and a half
        results = {}
        for label, gib in (("host tier", args.host_cache_gib), ("recompute", 0.0)):
            results[label] = measure(core, prompt_tokens=prompt_tokens, device=device, host_cache_gib=gib,
                                     pages=pages)
    hit_cold, hit, hit_tokens, m = results["host tier"]
    _, recompute, recompute_tokens, _ = results["recompute"]
    print(f"device {device}, {prompt_tokens}-token prompts, {pages} device pages of {page_tokens} tokens")
    print(f"cold TTFT {hit_cold * 1e3:.1f} ms; re-send TTFT: host-tier hit {hit * 1e3:.1f} ms, "
          f"recomputation {recompute * 1e3:.1f} ms; ratio {recompute / hit:.2f}x")
    print(f"host tier: offloaded {m.host_offloaded_pages} pages ({m.host_offloaded_bytes} B), readmitted "
          f"{m.host_readmitted_pages} pages ({m.host_readmitted_bytes} B), in use {m.host_bytes_in_use} of "
          f"{m.host_bytes_capacity} B, evictions {m.host_evictions}")
    print(f"re-sent tokens agree: {hit_tokens == recompute_tokens}")
    if m.host_readmitted_pages == 0:
        print("the re-send found nothing in the host tier")
        return 1
    return 0 if hit_tokens == recompute_tokens else 1


if __name__ == "__main__":
    raise SystemExit(main())
