"""GPU only: serving performs no compilation, graph capture or device allocation, and greedy tokens
in bf16 agree with HF transformers except within bf16 precision.

Two proofs of the first: a thousand bare decode replays through the executor, and the production
runtime serving a workload of every kind of round a core with a draft and snapshots has
(INITIALIZATION, PREFILL, MIXED, DECODE, SPECULATIVE, RESTORATION), in both frames, with prefix
hits, preemption and the host tier. Each leaves the CUDA allocator's counters
(`torch.cuda.memory_stats`), the Triton compile count (`kernel_compile.compiled_kernels`) and the
capture count (`capture.captured_graphs`, and the captured graphs themselves) as startup left them.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch

from helios.ignition.prepare import PreparationOptions, prepare_checkpoint
from helios.production.capture import captured_graphs
from helios.production.kernel_compile import compiled_kernels
from helios.production.native_model import LoadOptions, NativeModel
from helios.proto import contract_pb2
from helios.reference.engine import ReferenceEngine
from helios.runtime.events import Finished
from helios.runtime.interface import PreparedRequest
from helios.runtime.packing import LaneInput
from helios.runtime.request import GenerationRequest, SamplingParams

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]
OPTIONS = PreparationOptions(dtype="bf16", page_tokens=16, batch_capacities=(1, 4), prefill_capacities=(16,),
                             context_tokens=256)
PROMPT = (5, 17, 99, 200, 33, 1, 2, 3, 4, 5, 6, 7, 81, 82, 83, 120)
C = contract_pb2


def compile_count() -> int:
    """Compiled Triton kernel variants across every production kernel."""
    return compiled_kernels()


def _counters() -> dict[str, int]:
    stats = torch.cuda.memory_stats()
    keys = ("allocation.all.allocated", "segment.all.allocated", "reserved_bytes.all.current",
            "allocated_bytes.all.peak")
    return {k: stats.get(k, 0) for k in keys}


def test_a_thousand_rounds_allocate_compile_and_capture_nothing(tiny_checkpoint):
    model = NativeModel.load(prepare_checkpoint(tiny_checkpoint("qwen3"), OPTIONS),
                             LoadOptions(device="cuda", pages=64))
    graphs = {g.operation: g for g in sorted(model.graphs.values(), key=lambda g: g.batch_capacity)}  # largest
    filtered = SamplingParams(temperature=0.7, top_p=0.9, top_k=20, seed=3)
    plain = SamplingParams(temperature=0.7, seed=3)  # replays the graph's form without the rank stage

    def lane(slot: int, consumed: int, tokens: tuple[int, ...], prompt: int) -> LaneInput:
        return LaneInput(slot=slot, generation=1, consumed=consumed, tokens=tokens, prompt_tokens_in_round=prompt,
                         samples=True, page_ids=tuple(range(slot * 16, slot * 16 + 16)), seed=slot,
                         sampling=filtered if consumed % 3 else plain, output_limit=2000, eos_ids=(1,),
                         prompt_token_ids=PROMPT)

    model.run_round(graphs[contract_pb2.OPERATION_PREFILL].name, [lane(0, 0, PROMPT, len(PROMPT))])
    decode = graphs[contract_pb2.OPERATION_DECODE].name
    for i in range(5):
        model.run_round(decode, [lane(s, 16 + i, (7,), 0) for s in range(4)])
    torch.cuda.synchronize()
    capture = model.executor.capture
    before, compiled = _counters(), compile_count()
    captured = (dict(capture.graphs), dict(capture.forms))
    assert compiled > 0 and len(captured[0]) == len(model.graphs) and (decode, "off") in captured[1]
    for i in range(1000):
        rows = model.run_round(decode, [lane(s, 16 + i % 200, (7 + i % 50,), 0) for s in range(4)])
        assert all(0 <= row.sampled_id < model.contract.vocabulary.sampled_tokens for row in rows)
    torch.cuda.synchronize()
    assert _counters() == before
    assert compile_count() == compiled
    assert (capture.graphs, capture.forms) == captured
    assert captured_graphs() >= len(model.graphs)


def test_greedy_bf16_tokens_agree_with_transformers(tiny_checkpoint):
    from transformers import AutoModelForCausalLM

    directory = tiny_checkpoint("qwen3")
    core = prepare_checkpoint(directory, OPTIONS)
    driven = ReferenceEngine.load(core, pages=32)
    native = NativeModel.load(core, LoadOptions(device="cuda", pages=32))
    driven.executor = native.executor
    request = GenerationRequest(PROMPT, max_tokens=24, sampling=SamplingParams(temperature=0.0), ignore_eos=True)
    tokens = list(driven.generate(request))
    hf = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.bfloat16).to("cuda").eval()
    with torch.no_grad():
        logits = hf(input_ids=torch.tensor([list(PROMPT) + tokens], device="cuda")).logits[0].float().cpu().numpy()
    for step, token in enumerate(tokens):
        row = logits[len(PROMPT) - 1 + step]
        best = int(np.argmax(row))
        if token != best:
            margin = row[best] - row[token]
            # a tie within bf16 precision: the two runtimes may break it differently, then diverge
            assert margin <= 0.02 * np.abs(row).max() + 1e-2, (step, token, best, margin)
            break


# The serving workload: a core with a draft (SPECULATIVE graphs of width 2), snapshots and a
# device-owned pending token (two frames); pages of 4 tokens in a cache of 8 pages, two request slots.
SERVING = dict(page_tokens=4, batch_capacities=(1, 2), prefill_capacities=(8, 16), context_tokens=64,
               speculative_widths=(2,))
SERVING_PAGES, SERVING_SLOTS = 8, 2
SHARED = tuple(range(40, 58))  # an 18-token prefix two requests share: the second hits the first's pages
FILTERED = SamplingParams(temperature=0.8, top_k=20, top_p=0.9, seed=7)  # replays the rank-stage form
PLAIN = SamplingParams(temperature=0.8, seed=11)  # replays the form without the rank stage
GREEDY = SamplingParams(temperature=0.0)
# (prompt, output tokens, sampling, speculation): prompts of 19 tokens take two prefill chunks, later
# admissions prefill beside decoding lanes (MIXED), plain requests decode in both frames, speculating
# ones run SPECULATIVE rounds, the 8-page cache preempts (a partial page is snapshotted, and restored
# at readmission) and evicts published pages to the host tier, and each request ending inside a page
# publishes it by a RESTORATION round.
WORKLOAD = (
    ((*SHARED, 3), 10, GREEDY, False),
    ((60, 61, 62, 63, 64), 9, FILTERED, True),
    ((70, 71, 72, 73, 74, 75, 76, 77, 78), 8, PLAIN, False),
    ((*SHARED, 9, 8), 7, GREEDY, True),
    ((90, 91, 92, 93, 94, 95, 96, 97, 98, 99, 100, 101, 102), 12, FILTERED, False),
    ((110, 111, 112), 14, GREEDY, False),
)
OPERATIONS = ("initialization", "prefill", "mixed", "decode", "speculative", "restoration")


def serving_core(tiny_checkpoint, tiny_draft, dtype: str = "bf16"):
    return prepare_checkpoint(tiny_checkpoint("qwen2"), PreparationOptions(
        dtype=dtype, draft=tiny_draft("qwen2", "perturbed"), pending_token="device", **SERVING))


def serving_runtime(core, device: str):
    """The production runtime over `core` as `helios serve` builds it (speculative width 2)."""
    from helios.production.loading import load_native_model, runtime_for
    from helios.runtime.limits import AdmissionLimits
    from helios.runtime.options import RuntimeOptions

    model = load_native_model(core, device=device, pages=SERVING_PAGES, speculative_width=2,
                              max_concurrency=SERVING_SLOTS)
    options = RuntimeOptions(AdmissionLimits(max_active=SERVING_SLOTS, queue_capacity=len(WORKLOAD)),
                             speculative_width=2)
    return model, runtime_for(model, options)


def serve_workload(runtime) -> list:
    """Serve WORKLOAD to its end through the runtime's worker; every request finishes at its length."""
    from tests.runtime.streams import serve_all

    requests = [PreparedRequest(f"r{i}", GenerationRequest(prompt, max_tokens=tokens, sampling=sampling,
                                                           ignore_eos=True), observe_tokens=True,
                               speculation=speculation)
                for i, (prompt, tokens, sampling, speculation) in enumerate(WORKLOAD)]
    results = serve_all(runtime, requests)
    assert all(isinstance(end, Finished) for _, end in results), results
    assert [len(tokens) for tokens, _ in results] == [tokens for _, tokens, _, _ in WORKLOAD]
    return results


def check_every_round_kind_ran(runtime) -> None:
    m = runtime.metrics()
    ran = {op: m.graph_launches.get(op, 0) > 0 for op in OPERATIONS}
    assert ran == dict.fromkeys(OPERATIONS, True), m.graph_launches
    executor = runtime.executor
    assert executor.frames == 2 and executor.peak_outstanding == 2 and executor.submissions_while_outstanding > 0
    counters = runtime.scheduler.counters
    # the first two requests need 7 and 4 of the 8 pages before either ends, whatever speculation accepts
    assert counters.preemptions >= 1 and counters.readmissions >= 1
    assert m.speculative_rounds >= 1 and m.prefix_lookups >= 1


def test_serving_every_round_kind_in_both_frames_allocates_compiles_and_captures_nothing(tiny_checkpoint,
                                                                                          tiny_draft):
    """From the end of startup (the runtime built, the load's garbage collected) to the end of the
    workload: the CUDA allocator made no allocation and no segment, reserved nothing more and peaked
    no higher; no Triton kernel compiled; no CUDA graph captured. The runtime's own metrics say the
    same (helios_graphs_captured_total, helios_kernels_compiled_total)."""
    model, runtime = serving_runtime(serving_core(tiny_checkpoint, tiny_draft), "cuda")
    try:  # NOTE: a worker left running would outlive the test in its process
        gc.collect()
        torch.cuda.synchronize()
        before, compiled, captures = _counters(), compile_count(), captured_graphs()
        capture = model.executor.capture
        graphs = (dict(capture.graphs), dict(capture.forms))
        assert compiled > 0 and captures >= len(model.graphs) == len(graphs[0])
        assert {g.operation for g in model.graphs.values()} >= {C.OPERATION_INITIALIZATION, C.OPERATION_MIXED,
                                                                 C.OPERATION_SPECULATIVE, C.OPERATION_RESTORATION}
        startup = runtime.metrics()
        serve_workload(runtime)
        torch.cuda.synchronize()
        after = _counters()
        check_every_round_kind_ran(runtime)
        assert after == before, {k: (before[k], after[k]) for k in before if before[k] != after[k]}
        assert compile_count() == compiled
        assert captured_graphs() == captures
        assert (capture.graphs, capture.forms) == graphs
        m = runtime.metrics()
        assert (m.graphs_captured, m.kernels_compiled) == (startup.graphs_captured, startup.kernels_compiled)
        assert (m.graphs_captured, m.kernels_compiled) == (captures, compiled)
    finally:
        runtime.shutdown()
