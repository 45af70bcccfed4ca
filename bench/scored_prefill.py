"""Scored prefill on a device: each family's tiny core, prepared in fp32 and bf16, served by the
production runtime (CUDA graphs on a GPU) and asked for a prompt's scores; prints, per core, the
largest difference of its prompt-token log-probabilities from Hugging Face transformers' FP32
log-softmax and from the reference runtime's, whether the top alternatives agree, and the time of
the scored request against the same prompt unscored.

    python bench/scored_prefill.py [--device cuda] [--prompt-tokens 200] [--families qwen3] [--dtypes fp32]

Needs torch and transformers (it builds the tiny checkpoints the tests use).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import numpy as np


def _drive(runtime, request):
    """The request's prompt scores (all events) and sampled ids, on a started runtime."""
    from helios.runtime.events import Finished, TokenEvent
    from helios.runtime.scores import PromptScoreEvent

    async def main():
        scores, tokens = [], []
        async for event in runtime.submit(request):
            if isinstance(event, PromptScoreEvent):
                scores.append(event)
            elif isinstance(event, TokenEvent):
                tokens.append(event.token_id)
            elif not isinstance(event, Finished):
                raise RuntimeError(f"the request ended with {event}")
        return scores, tokens

    return asyncio.run(main())


def _flat(events):
    logprobs = np.concatenate([np.asarray(e.logprobs, dtype=np.float64) for e in events])
    top = [tuple(i for i, _ in row) for e in events for row in e.top]
    return logprobs, top


def main() -> int:
    import torch

    from helios.ignition.prepare import PreparationOptions, prepare_checkpoint
    from helios.production import load_runtime as production_runtime
    from helios.reference import load_runtime as reference_runtime
    from helios.runtime.interface import PreparedRequest
    from helios.runtime.limits import AdmissionLimits
    from helios.runtime.options import RuntimeOptions
    from helios.runtime.request import GenerationRequest, SamplingParams
    from tests.fixtures.checkpoints import FAMILIES, make_checkpoint
    from tests.fixtures.hf_oracle import load_hf_model

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--prompt-tokens", type=int, default=200)
    parser.add_argument("--top", type=int, default=5)
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--dtypes", default="fp32,bf16")
    args = parser.parse_args()
    limits = AdmissionLimits(max_active=1, queue_capacity=2)
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        for family in args.families.split(","):
            directory = make_checkpoint(family, Path(tmp) / family)
            model = load_hf_model(directory)
            prompt = [int(t) for t in rng.integers(0, 250, size=args.prompt_tokens)]
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([prompt])).logits[0].float()
            hf = torch.log_softmax(logits, dim=-1).numpy()[np.arange(len(prompt) - 1), prompt[1:]]
            for dtype in args.dtypes.split(","):
                core = prepare_checkpoint(directory, PreparationOptions(
                    dtype=dtype, page_tokens=16, batch_capacities=(1,), prefill_capacities=(16, 64, 256),
                    context_tokens=256))

                def request(name: str, scored: bool, prompt: list[int] = prompt) -> PreparedRequest:
                    generation = GenerationRequest(tuple(prompt), 1, SamplingParams(temperature=0))
                    return PreparedRequest(name, generation, prompt_logprobs=args.top if scored else None)

                production = production_runtime(core, RuntimeOptions(limits, device=args.device))
                production.start()
                try:
                    _drive(production, request("warm", True))  # first launches: kernel caches, allocations
                    start = time.perf_counter()
                    scores, _ = _drive(production, request("scored", True))
                    scored_s = time.perf_counter() - start
                    start = time.perf_counter()
                    _drive(production, request("plain", False))
                    plain_s = time.perf_counter() - start
                finally:
                    production.shutdown()
                logprobs, top = _flat(scores)
                reference = reference_runtime(core, RuntimeOptions(limits))
                reference.start()
                try:
                    ref_logprobs, ref_top = _flat(_drive(reference, request("reference", True))[0])
                finally:
                    reference.shutdown()
                agree = sum(a == b for a, b in zip(top, ref_top, strict=True)) / len(top)
                print(f"{family:8s} {dtype}: {len(logprobs)} tokens, max |production - HF| "
                      f"{np.abs(logprobs - hf).max():.2e}, max |production - reference| "
                      f"{np.abs(logprobs - ref_logprobs).max():.2e}, max |reference - HF| "
                      f"{np.abs(ref_logprobs - hf).max():.2e}, top-{args.top} ids equal to the reference's "
                      f"{agree:.0%}; scored request {scored_s * 1e3:.1f} ms, unscored {plain_s * 1e3:.1f} ms",
                      flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
