"""The project's own mutation suite: realistic bugs injected one at a time (with `monkeypatch`, where
the patched name is looked up), each shown caught by `helios conform` at a named level and field, or,
where conform cannot see it, by a named existing test run with the mutation active and asserted to
fail. None repeats a mutation of test_mutations.py.

Controls: `clean_operators` and `clean_workloads` run the same conform checks with no mutation and
must pass; `test_named_tests_pass_without_their_mutation` runs every named test clean.

| mutation | caught by | field / test |
| --- | --- | --- |
| rms_norm lowering drops `weight_offset` (the (1 + w) of Gemma-style norms) | operators `rms_norm` | `out[...]` |
| head_rms_norm lowering drops `width=head_dim` (normalizes the whole row) | operators `head_rms_norm` | `out[...]` |
| sliding window one key too wide (`first = p - W`) | operators `paged_attention/*/window3` | `out[...]` |
| fused q/k prologue drops the v-plane cache write | operators `rotary & rotary+paged_cache_write*2` | `value_cache[...]` |
| rotary rotates at 1-based positions (`position + 1`) | operators `rotary` | `out[...]` |
| gated activation: `gelu_tanh` mapped to the erf code | operators `gated_activation/gelu_tanh` | `out[...]` |
| embedding clamps an invalid id to row 0 (no zero row) | operators `embedding` | `out[row, ...]` (a padding row) |
| torch matmul path drops the bias (`mm` for `addmm`) | operators `matmul` | `out[...]` |
| last_row_gather takes each lane's first row | operators `last_row_gather` | `out[...]` |
| logits soft-cap without its scaling (`tanh(z) * cap`) | operators `logits/softcap` | `out[...]` |
| argmax tie picks the highest id | operators `argmax/rows` | `ids[1]` |
| sampler reads presence and frequency from swapped columns | operators `sample/filters` | `ids[...]` |
| sampler ignores the temperature (every sampled row at 1.0) | trace | `sampled_id` |
| top-k keeps one id too many (`rank <= k`) | trace | `sampled_id` |
| chain key ignores the parent page (a page keyed by its tokens only) | e2e (trace passes) | `token_ids` |
| usage: prompt tokens counted without the reused prefix | e2e | `usage.prompt_tokens` |
| page reservation one token short | trace | `submission` |
| eviction takes the most recently released page | named test | test_page_cache::test_released_published_pages_stay_cached_until_evicted_oldest_first |
| releasing a private page never returns it to the free list | named test | test_page_cache::test_a_duplicate_key_leaves_the_second_page_private |
| frame rule ignores completion feedback (string stops, grammars) | named test | test_scheduler::test_a_string_stop_or_a_grammar_forces_one_frame |
| readmission forgets what the host knows (`admitted_known` 0) | named test | test_scheduler::test_a_readmitted_lane_host_feeds_its_last_token_when_the_device_owns_pending_tokens |
| output limit one token late (`sampled > max_tokens`) | named test | test_sequential::test_eos_length_and_usage |
| column validation ignores the frame index | named test | test_completion::test_every_violation_in_columns_is_named_as_in_rows[frame_index] |
| per-lane validation skips the generation echo | named test | test_completion::test_every_violation_is_still_named[generation] |
| only the first EOS id ends a request (`RequestProgress.ends_at[:1]`) | named test | test_eos_ids::test_request_progress_ends_at_any_of_several_eos_ids |

The named-test mutations live in shared host code (both runtimes run it: conform compares the two and
sees nothing) or in validation, which only a faulty executor would exercise.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from conformance.operators import PLAIN_PROLOGUE
from tests.conformance.helpers import only_divergence, run, workload

pytestmark = pytest.mark.slow

# ----------------------------------------------------------------------------------------- workloads

GREEDY = workload("greedy", {"prompt": [3, 1, 4, 1, 5], "max_tokens": 3, "temperature": 0})
TEMPERED = workload("tempered", {"prompt": [2, 7, 1, 8], "max_tokens": 4, "temperature": 0.3, "seed": 99})
TOP_K = workload("top_k", {"prompt": [2, 7, 1, 8], "max_tokens": 4, "temperature": 1.0, "top_k": 1, "seed": 5})
# One slot: B runs after A published its pages. B's first page holds the tokens of A's second page.
SHIFTED_PREFIX = workload("shifted_prefix",
                          {"prompt": [200, 17, 90, 33, 5, 6, 7, 8, 9], "max_tokens": 2, "temperature": 0},
                          {"prompt": [5, 6, 7, 8, 10], "max_tokens": 2, "temperature": 0}, max_active=1)
# One slot: B reuses A's first page.
SHARED_PREFIX = workload("shared_prefix", {"prompt": [1, 2, 3, 4, 5, 6], "max_tokens": 2, "temperature": 0},
                         {"prompt": [1, 2, 3, 4, 7], "max_tokens": 2, "temperature": 0}, max_active=1)
WORKLOADS = (GREEDY, TEMPERED, TOP_K, SHIFTED_PREFIX, SHARED_PREFIX)

OPERATORS = ("rms_norm", "head_rms_norm", "paged_attention", PLAIN_PROLOGUE, "rotary", "gated_activation",
             "embedding", "matmul", "last_row_gather", "logits", "argmax", "sample")


@pytest.fixture(scope="module")
def clean_operators(conform_core):
    """The control of every operators-level mutation: the same cases pass unmutated."""
    report = run(conform_core, ("operators",), operators=OPERATORS)
    assert report.exit_code == 0, report.table()
    return report


@pytest.fixture(scope="module")
def clean_workloads(conform_core):
    """The control of every trace and e2e mutation: the same workloads pass unmutated."""
    report = run(conform_core, ("trace", "e2e"), *WORKLOADS)
    assert report.exit_code == 0, report.table()
    return report


def test_controls_pass(clean_operators, clean_workloads):
    assert {case.case.split("/")[0] for case in clean_operators.level("operators").cases} == set(OPERATORS)
    assert len(clean_workloads.level("trace").cases) == len(WORKLOADS)


def caught_by_operator(core, operator: str, field: str, case: str | None = None):
    report = run(core, ("operators",), operators=(operator,))
    found = only_divergence(report, "operators")
    assert found.case.startswith(f"{case or operator}/") and found.field.startswith(f"{field}["), report.table()
    assert report.exit_code == 1
    return found


def caught_in_trace(core, load, field: str):
    report = run(core, ("trace",), load)
    found = only_divergence(report, "trace")
    assert found.field == field, report.table()
    return found


# ------------------------------------------------------------------------------ production kernels


def test_rms_norm_drops_weight_offset(conform_core, clean_operators, monkeypatch):
    from helios.production.kernels import norm
    from helios.production.lowering import operators

    def lower(c, op):
        x, w, out = c.t(op.inputs[0]), c.t(op.inputs[1]), c.t(op.outputs[0])
        eps = float(op.attributes["eps"])
        return lambda: norm.norm(x, w, out, eps=eps)  # weight_offset forgotten

    monkeypatch.setitem(operators.LOWERINGS, "rms_norm", lower)
    caught_by_operator(conform_core, "rms_norm", "out")


def test_head_rms_norm_over_the_whole_row(conform_core, clean_operators, monkeypatch):
    from helios.production.kernels import norm
    from helios.production.lowering import operators

    def lower(c, op):
        x, w, out = c.t(op.inputs[0]), c.t(op.inputs[1]), c.t(op.outputs[0])
        eps = float(op.attributes["eps"])
        return lambda: norm.norm(x, w, out, eps=eps)  # width=head_dim forgotten: one norm per row

    monkeypatch.setitem(operators.LOWERINGS, "head_rms_norm", lower)
    caught_by_operator(conform_core, "head_rms_norm", "out")


def test_sliding_window_one_key_too_wide(conform_core, clean_operators, monkeypatch):
    from helios.production.kernels import attention

    paged_attention = attention.paged_attention

    def wide(*args, sliding_window=None, **kwargs):
        return paged_attention(*args, sliding_window=None if sliding_window is None else sliding_window + 1,
                               **kwargs)

    monkeypatch.setattr(attention, "paged_attention", wide)
    found = caught_by_operator(conform_core, "paged_attention", "out")
    assert "/window" in found.case, found


def test_fused_prologue_drops_the_value_write(conform_core, clean_operators, monkeypatch):
    from helios.production.kernels import rotary

    rotary_pair = rotary.rotary_pair

    def without_values(*args, values=None, value_cache=None, **kwargs):
        return rotary_pair(*args, **kwargs)

    monkeypatch.setattr(rotary, "rotary_pair", without_values)
    caught_by_operator(conform_core, PLAIN_PROLOGUE, "value_cache")


def test_rotary_at_one_based_positions(conform_core, clean_operators, monkeypatch):
    from helios.production.kernels import rotary

    rotary_cache = rotary.rotary_cache

    def shifted(x, positions, **kwargs):
        return rotary_cache(x, positions + 1, **kwargs)

    monkeypatch.setattr(rotary, "rotary_cache", shifted)
    caught_by_operator(conform_core, "rotary", "out")


def test_gelu_tanh_mapped_to_erf(conform_core, clean_operators, monkeypatch):
    from helios.production.kernels import activation

    monkeypatch.setitem(activation.ACTIVATION_CODES, "gelu_tanh", activation.ACTIVATION_CODES["gelu"])
    found = caught_by_operator(conform_core, "gated_activation", "out")
    assert found.case.startswith("gated_activation/gelu_tanh/"), found


def test_embedding_clamps_invalid_ids(conform_core, clean_operators, monkeypatch):
    from helios.production.kernels import gather

    embedding = gather.embedding

    def clamped(ids, table, out, **kwargs):
        return embedding(ids.clamp(min=0), table, out, **kwargs)

    monkeypatch.setattr(gather, "embedding", clamped)
    caught_by_operator(conform_core, "embedding", "out")


def test_matmul_drops_its_bias(conform_core, clean_operators, monkeypatch):
    from helios.production.lowering import linear

    # both paths: torch's on a CPU, the Triton product where a GPU's policy times it faster
    torch_matmul, triton_matmuls = linear._torch_matmul, linear._triton_matmuls
    monkeypatch.setattr(linear, "_torch_matmul", lambda x, w, out, bias: torch_matmul(x, w, out, None))
    monkeypatch.setattr(linear, "_triton_matmuls",
                        lambda xs, ws, outs, biases, blocks=None: triton_matmuls(xs, ws, outs, None, blocks))
    caught_by_operator(conform_core, "matmul", "out")


def test_last_row_gather_takes_the_first_row(conform_core, clean_operators, monkeypatch):
    from helios.production.kernels import gather

    def first_row(x, token_lane, out, **kwargs):
        out.zero_()
        for lane in range(out.shape[0]):
            rows = torch.nonzero(token_lane == lane).flatten()
            if len(rows):
                out[lane] = x[rows.min()]  # min where the kernel takes the max

    monkeypatch.setattr(gather, "last_row_gather", first_row)
    caught_by_operator(conform_core, "last_row_gather", "out")


def test_logits_softcap_without_scaling(conform_core, clean_operators, monkeypatch):
    from helios.production.lowering import linear, operators

    def lower(c, op):
        h, w, out = c.t(op.inputs[0]), c.t(op.inputs[1]), c.t(op.outputs[0])
        sampled = op.attributes.get("sampled_tokens")
        softcap = op.attributes.get("softcap")
        tail = out[:, int(sampled):] if sampled is not None and int(sampled) < out.shape[1] else None
        product = linear._logits_product(c, op, h, w, out, sampled, softcap, tail is not None)

        def go():
            product()
            if softcap is not None:
                out.tanh_().mul_(float(softcap))  # the division by the cap forgotten
            if tail is not None:
                tail.fill_(float("-inf"))
        return go

    monkeypatch.setitem(operators.LOWERINGS, "logits", lower)
    found = caught_by_operator(conform_core, "logits", "out")
    assert found.case.startswith("logits/softcap/"), found


# ------------------------------------------------------------------------------------------ sampler


def test_argmax_tie_takes_the_highest_id(conform_core, clean_operators, monkeypatch):
    from helios.production.kernels import sampling

    def highest(logits, out, **kwargs):
        vocab = logits.shape[1]
        out.copy_((vocab - 1 - torch.flip(logits, dims=(1,)).argmax(dim=1)).to(out.dtype))

    monkeypatch.setattr(sampling, "argmax", highest)
    found = caught_by_operator(conform_core, "argmax", "ids")
    assert found.field == "ids[1]", found  # the row with the exact tie


def _with_parameters(monkeypatch, change):
    """Patch the sampler so it reads `change(parameters)` (a copy) instead of its parameter rows."""
    from helios.production.kernels.sampling import Sampler

    call = Sampler.__call__

    def mutated(self, logits, seed, positions, parameters, *args, **kwargs):
        return call(self, logits, seed, positions, change(parameters.clone()), *args, **kwargs)

    monkeypatch.setattr(Sampler, "__call__", mutated)


def test_presence_and_frequency_swapped(conform_core, clean_operators, monkeypatch):
    def swap(p):
        p[:, [5, 6]] = p[:, [6, 5]]
        return p

    _with_parameters(monkeypatch, swap)
    caught_by_operator(conform_core, "sample", "ids")


def test_temperature_ignored(conform_core, clean_workloads, monkeypatch):
    def at_one(p):
        p[:, 0] = torch.where(p[:, 0] > 0, torch.ones_like(p[:, 0]), p[:, 0])
        return p

    _with_parameters(monkeypatch, at_one)
    caught_in_trace(conform_core, TEMPERED, "sampled_id")


def test_top_k_keeps_one_too_many(conform_core, clean_workloads, monkeypatch):
    def one_more(p):
        p[:, 2] = torch.where(p[:, 2] > 0, p[:, 2] + 1, p[:, 2])
        return p

    _with_parameters(monkeypatch, one_more)
    caught_in_trace(conform_core, TOP_K, "sampled_id")


# ------------------------------------------------------------------------ page cache and scheduler


def test_chain_key_ignores_the_parent(conform_core, clean_workloads, monkeypatch):
    """The trace audit passes (the reference replays production's pages, whatever they hold); only
    the reference runtime's own run shows the tokens of a page reused at the wrong place."""
    from helios.engine.page_cache import PageCache

    chain_key = PageCache.chain_key
    monkeypatch.setattr(PageCache, "chain_key", lambda self, parent, tokens, content=b"": chain_key(self, b"", tokens, content))
    report = run(conform_core, ("trace", "e2e"), SHIFTED_PREFIX)
    assert report.level("trace").divergences == (), report.table()
    found = only_divergence(report, "e2e")
    assert found.field == "token_ids", report.table()


def test_usage_prompt_tokens_without_the_reused_prefix(conform_core, clean_workloads, monkeypatch):
    from helios.engine.progress import RequestProgress

    finished = RequestProgress.finished

    def mutated(self, termination, pieces, *, reused_prompt_tokens=0):
        event = finished(self, termination, pieces, reused_prompt_tokens=reused_prompt_tokens)
        return dataclasses.replace(event, prompt_tokens=event.prompt_tokens - reused_prompt_tokens)

    monkeypatch.setattr(RequestProgress, "finished", mutated)
    report = run(conform_core, ("e2e",), SHARED_PREFIX)
    found = only_divergence(report, "e2e")
    assert found.field == "usage.prompt_tokens", report.table()
    assert found.reference - found.production == 4  # one page of 4 tokens reused


def test_reservation_one_token_short(conform_core, clean_workloads, monkeypatch):
    from helios.engine.scheduler import Scheduler

    reserve = Scheduler._reserve
    monkeypatch.setattr(Scheduler, "_reserve", lambda self, s, tokens, keep: reserve(self, s, tokens - 1, keep))
    caught_in_trace(conform_core, GREEDY, "submission")


# -------------------------------------------------------------------- mutations only unit tests see


def _eviction_newest_first(monkeypatch):
    from collections import OrderedDict

    from helios.engine.page_cache import PageCache

    allocate = PageCache.allocate

    def newest_first(self, count):
        cached = self._cached
        self._cached = OrderedDict(reversed(cached.items()))  # popitem(last=False) now takes the newest
        try:
            return allocate(self, count)
        finally:
            self._cached = OrderedDict(reversed(self._cached.items()))

    monkeypatch.setattr(PageCache, "allocate", newest_first)


def _private_page_leaks(monkeypatch):
    from helios.engine.page_cache import PageCache

    def release(self, pages):
        for page in pages:
            self._references[page] -= 1
            if self._references[page] == 0 and page in self._key_of:
                self._cached[page] = None  # the unpublished page never goes back to the free list

    monkeypatch.setattr(PageCache, "release", release)


def _frames_ignore_feedback(monkeypatch):
    from helios.engine.scheduler import Scheduler

    def max_inflight(self):
        if self.config.frames < 2 or not self.catalog.device_pending:
            return 1
        return 2  # the completion-feedback check dropped

    monkeypatch.setattr(Scheduler, "max_inflight", max_inflight)


def _readmission_forgets_known(monkeypatch):
    from helios.engine.scheduler import Scheduler

    admit = Scheduler._admit

    def mutated(self):
        admit(self)
        for s in self._running:
            if s.consumed == 0 and s.in_flight == 0:
                s.admitted_known = 0  # the assignment at (re)admission dropped

    monkeypatch.setattr(Scheduler, "_admit", mutated)


def _output_limit_late(monkeypatch):
    from helios.engine.progress import RequestProgress

    init = RequestProgress.__init__

    def mutated(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.max_tokens += 1  # ends at sampled > max_tokens

    monkeypatch.setattr(RequestProgress, "__init__", mutated)


def _columns_ignore_the_frame(monkeypatch):
    from helios.runtime import completion

    columns_valid = completion._columns_valid
    monkeypatch.setattr(completion, "_columns_valid",
                        lambda lanes, rows, written, sampled, page_tokens, frame:
                        columns_valid(lanes, rows, written, sampled, page_tokens, None))

    validate_completion = completion.validate_completion

    def per_lane(graph, lane, row, *, frame=None, **kwargs):  # the same omission on the per-lane path
        return validate_completion(graph, lane, row, frame=None, **kwargs)

    monkeypatch.setattr(completion, "validate_completion", per_lane)


def _generation_unchecked(monkeypatch):
    from helios.runtime import completion

    validate_completion = completion.validate_completion

    def per_lane(graph, lane, row, **kwargs):
        return validate_completion(graph, lane, dataclasses.replace(row, generation=lane.generation), **kwargs)

    monkeypatch.setattr(completion, "validate_completion", per_lane)


def _eos_first_id_only(monkeypatch):
    from helios.engine import progress

    init = progress.RequestProgress.__init__

    def first_only(self, request, stream, default_eos_ids=()):
        init(self, request, stream, default_eos_ids)
        self.ends_at = self.ends_at[:1]  # the bug: only the first EOS id ends a request

    monkeypatch.setattr(progress.RequestProgress, "__init__", first_only)


def _named_tests():
    from tests.engine import test_eos_ids, test_page_cache, test_scheduler, test_sequential
    from tests.runtime import test_completion

    violations = {next(iter(change)): (change, error) for change, error in test_completion.VIOLATIONS}
    return {
        "eviction newest first": (_eviction_newest_first,
                                  test_page_cache.test_released_published_pages_stay_cached_until_evicted_oldest_first),
        "private page leaks": (_private_page_leaks, test_page_cache.test_a_duplicate_key_leaves_the_second_page_private),
        "frames ignore feedback": (_frames_ignore_feedback,
                                   lambda: test_scheduler.test_a_string_stop_or_a_grammar_forces_one_frame("host_stop")),
        "readmission forgets known": (
            _readmission_forgets_known,
            test_scheduler.test_a_readmitted_lane_host_feeds_its_last_token_when_the_device_owns_pending_tokens),
        "output limit late": (_output_limit_late, test_sequential.test_eos_length_and_usage),
        "columns ignore the frame": (
            _columns_ignore_the_frame,
            lambda: test_completion.test_every_violation_in_columns_is_named_as_in_rows(*violations["frame_index"])),
        "generation unchecked": (
            _generation_unchecked,
            lambda: test_completion.test_every_violation_is_still_named(*violations["generation"])),
        "EOS on the first id only": (
            _eos_first_id_only,
            lambda: test_eos_ids.test_request_progress_ends_at_any_of_several_eos_ids(None, 9)),
    }


NAMED = ("eviction newest first", "private page leaks", "frames ignore feedback", "readmission forgets known",
         "output limit late", "columns ignore the frame", "generation unchecked", "EOS on the first id only")


def test_named_tests_pass_without_their_mutation():
    for name in NAMED:
        _named_tests()[name][1]()


@pytest.mark.parametrize("name", NAMED)
def test_caught_by_a_named_test(name, monkeypatch):
    mutate, named = _named_tests()[name]
    mutate(monkeypatch)
    with pytest.raises((AssertionError, pytest.fail.Exception)):
        named()
