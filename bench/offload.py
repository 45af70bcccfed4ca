"""Host offload on a device: time to first token of a long prompt re-sent after another prompt
evicted its checkpoints from a device cache forced small, with the host tier (its prefix readmitted
from host memory) against without it (the prefix recomputed). Prints both TTFTs (medians over
`--repeats` prompt pairs), their ratio, the host-tier metrics, and whether every request finished
with the tokens it must have.

    python bench/offload.py --shape qwen3-0.6b [--prompt-tokens 8192]    # a GPU measurement, random weights
    python bench/offload.py --checkpoint DIR [--prompt-tokens 8192]      # the same on a checkpoint of yours
    python bench/offload.py --smoke                                      # CPU, a tiny core

`--shape` writes a random bf16 checkpoint of that shape (bench/decode.py's shapes: the Qwen3-0.6B
geometry, weights drawn on the device); a checkpoint is prepared here (bf16 on a GPU, fp32 on a CPU,
page_tokens 16, prefill chunks of 2048 and 64 tokens). Each repeat sends a prompt (cold), another
as long, then the first again. The device cache holds one prompt and two pages, so the second prompt
evicts the first's checkpoints: with the host tier they are offloaded and the re-send readmits them
(all but the page holding its last token, which is computed), without it the re-send recomputes the
whole prompt.

It also prints what the host-tier copies cost where they happen: each round that readmitted pages,
timed from its submission to its collection (its copies, both ways, and its graph), against the
bytes its copies moved (offloads and readmissions, every cache plane): a bandwidth for the round.

Nothing lost or wrong, exactly: every request finishes with its `max_tokens` tokens and no request
fails; with the host tier, the first prompt sent a third time (its pages now on the device: a device
cache hit at the same reuse boundary, the same prefill graphs) gives the host-hit re-send's tokens,
which holds only if the readmitted pages are the offloaded bytes; without it, the recomputed re-send
gives the cold send's tokens (the same chunks). The host-hit and recomputed re-sends are also
compared with each other and the result printed: they run different prefill chunks, so on bf16 a
near-tie may legitimately tell them apart; it does not decide the exit status.

`--smoke` builds the tests' tiny qwen3 checkpoint, with 120-token prompts: it checks the path, not
the speed (Triton interpreted on a CPU: nothing about a GPU).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MAX_TOKENS = 4
PAGE_TOKENS = 16


def _send(runtime, request_id: str, prompt: tuple[int, ...]) -> tuple[float, list[int], int]:
    """(seconds to the first token, the tokens, the prompt tokens the prefix cache served) of one
    greedy request on a started runtime; raises unless it finished with MAX_TOKENS tokens."""
    from helios.runtime.events import Finished, TokenEvent
    from helios.runtime.interface import PreparedRequest
    from helios.runtime.request import GenerationRequest, SamplingParams

    request = PreparedRequest(request_id, GenerationRequest(prompt, max_tokens=MAX_TOKENS, ignore_eos=True,
                                                            sampling=SamplingParams(temperature=0.0)),
                              observe_tokens=True)

    async def main():
        start, first, tokens, reused = time.perf_counter(), None, [], None
        async for event in runtime.submit(request):
            if isinstance(event, TokenEvent):
                first = first or time.perf_counter()
                tokens.append(event.token_id)
            elif isinstance(event, Finished):
                reused = event.reused_prompt_tokens
            else:
                raise RuntimeError(f"{request_id} ended with {event}")
        if reused is None or len(tokens) != MAX_TOKENS:
            raise RuntimeError(f"{request_id} lost: {len(tokens)} of {MAX_TOKENS} tokens, finished {reused is not None}")
        return (first or time.perf_counter()) - start, tokens, reused

    return asyncio.run(main())


class CopyTimer:
    """Wraps the executor the engine drives: for each round that readmits pages, (bytes its host-tier
    copies moved, seconds from its submission to its collection)."""

    def __init__(self, executor) -> None:
        self.executor = executor
        self.frames = executor.frames
        self.rounds: list[tuple[int, float]] = []
        self._submitted: dict[int, float] = {}  # plan sequence -> when its submission began

    def __getattr__(self, name: str):
        return getattr(self.executor, name)

    def submit(self, plan) -> None:
        if any(copy.readmit for copy in plan.page_copies):
            self._submitted[plan.sequence] = time.perf_counter()
        self.executor.submit(plan)

    def collect(self, plan):
        rows = self.executor.collect(plan)
        began = self._submitted.pop(plan.sequence, None)
        if began is not None:
            self.rounds.append((len(plan.page_copies) * self.executor.page_bytes, time.perf_counter() - began))
        return rows


def measure(core, *, prompt_tokens: int, device: str, host_cache_gib: float | None, pages: int, repeats: int):
    """Per repeat: (cold TTFT, re-send TTFT, cold tokens, re-send tokens, re-send's reused tokens, the
    third send's tokens or None without a host tier); the runtime's metrics; the readmitting rounds
    (`CopyTimer.rounds`)."""
    import random

    from helios.production import load_runtime
    from helios.runtime.limits import AdmissionLimits
    from helios.runtime.options import RuntimeOptions

    rng = random.Random(0)
    vocabulary = core.contract.model.vocabulary.sampled_tokens
    timers: list[CopyTimer] = []

    def timed(executor, _pages):
        timers.append(CopyTimer(executor))
        return timers[-1]

    runtime = load_runtime(core, RuntimeOptions(AdmissionLimits(max_active=1, queue_capacity=2), device=device,
                                                pages=pages, host_cache_gib=host_cache_gib, wrap_executor=timed))
    rows = []
    runtime.start()
    try:
        for repeat in range(repeats):
            first = tuple(rng.randrange(vocabulary) for _ in range(prompt_tokens))
            other = tuple(rng.randrange(vocabulary) for _ in range(prompt_tokens))
            cold, cold_tokens, _ = _send(runtime, f"first-{repeat}", first)
            _send(runtime, f"evicting-{repeat}", other)  # its pages evict the first prompt's checkpoints
            again, tokens, reused = _send(runtime, f"again-{repeat}", first)
            third = _send(runtime, f"device-hit-{repeat}", first)[1] if runtime.metrics().host_bytes_capacity else None
            rows.append((cold, again, cold_tokens, tokens, reused, third))
        return rows, runtime.metrics(), timers[0].rounds
    finally:
        runtime.shutdown()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", help="a Hugging Face checkpoint directory to prepare and serve")
    parser.add_argument("--shape", help="a random bf16 checkpoint of this shape (bench/decode.py), e.g. qwen3-0.6b")
    parser.add_argument("--smoke", action="store_true", help="CPU, the tests' tiny qwen3 checkpoint, short prompts")
    parser.add_argument("--prompt-tokens", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=3, help="prompt pairs measured (medians printed)")
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda when present)")
    parser.add_argument("--host-cache-gib", type=float, default=None, help="the host tier's bound (default: sized)")
    args = parser.parse_args()
    if sum(map(bool, (args.smoke, args.checkpoint, args.shape))) != 1:
        parser.error("give one of --shape NAME, --checkpoint DIR (GPU measurements) or --smoke")
    import os

    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu":  # the kernels run interpreted: set before anything defines them
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from helios.ignition.prepare import PreparationOptions, prepare_checkpoint

    prompt_tokens = 120 if args.smoke else args.prompt_tokens
    repeats = 1 if args.smoke else args.repeats
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        directory = args.checkpoint
        if args.smoke:
            from tests.fixtures.checkpoints import make_checkpoint

            directory = make_checkpoint("qwen3", Path(tmp) / "qwen3")
        elif args.shape:
            from bench.decode import SHAPES, make_checkpoint

            if args.shape not in SHAPES:
                parser.error(f"--shape: one of {', '.join(SHAPES)}")
            directory = make_checkpoint(args.shape, Path(tmp) / args.shape, device)
        context = prompt_tokens + MAX_TOKENS
        core = prepare_checkpoint(directory, PreparationOptions(
            dtype="bf16" if device.startswith("cuda") else "fp32", page_tokens=PAGE_TOKENS, batch_capacities=(1,),
            prefill_capacities=(16, 64) if args.smoke else (64, 2048),
            context_tokens=-(-context // PAGE_TOKENS) * PAGE_TOKENS))
        # one request's pages (prompt plus output) and two more: the second prompt evicts the first's
        pages = -(-(prompt_tokens + MAX_TOKENS) // PAGE_TOKENS) + 2
        results = {}
        for label, gib in (("host tier", args.host_cache_gib), ("recompute", 0.0)):
            results[label] = measure(core, prompt_tokens=prompt_tokens, device=device, host_cache_gib=gib,
                                     pages=pages, repeats=repeats)
    hit_rows, m, readmitting = results["host tier"]
    recompute_rows, r, _ = results["recompute"]
    hit = statistics.median(row[1] for row in hit_rows)
    recompute = statistics.median(row[1] for row in recompute_rows)
    cold = statistics.median(row[0] for row in hit_rows + recompute_rows)
    print(f"device {device}, {prompt_tokens}-token prompts, {pages} device pages of {PAGE_TOKENS} tokens, "
          f"{repeats} repeat(s), {time.perf_counter() - started:.0f} s in all")
    print(f"cold TTFT {cold * 1e3:.1f} ms; re-send TTFT: host-tier hit {hit * 1e3:.1f} ms, "
          f"recomputation {recompute * 1e3:.1f} ms; ratio {recompute / hit:.2f}x")
    print(f"re-sent prompt tokens served by the prefix cache: host tier {[row[4] for row in hit_rows]}, "
          f"recompute {[row[4] for row in recompute_rows]}")
    print(f"host tier: offloaded {m.host_offloaded_pages} pages ({m.host_offloaded_bytes} B), readmitted "
          f"{m.host_readmitted_pages} pages ({m.host_readmitted_bytes} B), in use {m.host_bytes_in_use} of "
          f"{m.host_bytes_capacity} B, evictions {m.host_evictions}")
    if readmitting:
        moved = statistics.median(b for b, _ in readmitting)
        seconds = statistics.median(t for _, t in readmitting)
        print(f"readmitting rounds ({len(readmitting)}, medians): {moved / 2**20:.1f} MiB copied (offloads and "
              f"readmissions) in a round of {seconds * 1e3:.1f} ms (copies and graph, submit to collect): "
              f"{moved / seconds / 1e9:.2f} GB/s")
    readmitted = m.host_readmitted_pages > 0 and all(row[4] > 0 for row in hit_rows)
    recomputed = all(row[4] == 0 for row in recompute_rows) and r.host_readmitted_pages == 0
    exact_hit = all(row[3] == row[5] for row in hit_rows)  # host hit = device hit at the same boundary
    exact_recompute = all(row[3] == row[2] for row in recompute_rows)  # recomputed = cold, the same chunks
    lost = m.requests_failed + r.requests_failed
    print(f"nothing lost: {lost == 0} ({lost} failed); host-hit tokens equal the device hit's: {exact_hit}; "
          f"recomputed tokens equal the cold send's: {exact_recompute}")
    agree = [a[3] == b[3] for a, b in zip(hit_rows, recompute_rows, strict=True)]
    print(f"host-hit and recomputed re-sends agree: {agree} (different prefill chunks: informational)")
    if not readmitted:
        print("the re-send found nothing in the host tier")
    if not recomputed:
        print("the re-send without a host tier reused a prefix: not a full recomputation")
    return 0 if readmitted and recomputed and exact_hit and exact_recompute and lost == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
