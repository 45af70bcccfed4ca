"""Exact ties are judged by the rule: a greedy row whose maximum is held by two ids exactly (margin
zero) is the specification's tie-break to decide (the lowest id), so production must match it;
only a non-zero margin within tolerance is a numeric tie. Unit tests of the rule, then a core whose
head has pairs of identical rows (every greedy draw is an exact tie) served by a correct production
and by one whose greedy tie-break picks the highest id."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from conformance.draw import DrawInputs, draw_margin, exact_tie, is_draw_tie
from tests.conformance.helpers import only_divergence, run, workload

# SAMPLING_PARAMETERS: temperature, top_p, top_k, min_p, repetition, presence, frequency
GREEDY = np.array([0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0], np.float32)  # temperature 0, neutral penalties


def greedy_row(logits, histogram=None, mask=None, parameters=GREEDY) -> DrawInputs:
    logits = np.asarray(logits, np.float32)
    width = logits.shape[0]
    return DrawInputs(logits, parameters, np.zeros(width, np.int32) if histogram is None else histogram,
                      np.full(-(-width // 32), -1, np.int32) if mask is None else mask)


def test_an_exact_greedy_tie_is_the_rules_to_break():
    row = greedy_row([0.5, 2.0, 2.0, -1.0])
    assert row.draw(row.logits) == 1  # the lowest id holding the maximum
    assert exact_tie(row, 1, 2)
    assert is_draw_tie(row, 1, 2, "f32") == (False, 0.0)  # a divergence with margin 0, in every precision
    assert is_draw_tie(row, 1, 2, "bf16") == (False, 0.0)
    argmax = DrawInputs(np.array([3.0, 1.0, 3.0], np.float32))  # an argmax operator's row
    assert exact_tie(argmax, 0, 2) and is_draw_tie(argmax, 0, 2, "f32") == (False, 0.0)


def test_a_non_zero_margin_within_tolerance_is_still_a_numeric_tie():
    row = greedy_row([0.5, 2.0, 1.99999, -1.0])
    assert not exact_tie(row, 1, 2)
    tie, margin = is_draw_tie(row, 1, 2, "f32")
    assert tie and margin == pytest.approx(5e-6, rel=0.05)
    assert draw_margin(row, 1, 2) == margin


def test_exact_ties_are_judged_after_penalties_and_the_mask():
    histogram = np.array([0, 0, 1, 0], np.int32)  # id 2 was seen: a repetition penalty of 2 halves it
    penalized = np.array([0.0, 1.0, 0.0, 0.0, 2.0, 0.0, 0.0], np.float32)
    row = greedy_row([0.5, 2.0, 2.0, -1.0], histogram=histogram, parameters=penalized)
    assert not exact_tie(row, 1, 2) and is_draw_tie(row, 1, 2, "f32")[0] is False  # 1.0 apart: a divergence
    masked = greedy_row([0.5, 2.0, 2.0, -1.0], mask=np.array([0b1101], np.int32))  # id 1 forbidden
    assert masked.draw(masked.logits) == 2 and not exact_tie(masked, 2, 0)
    tied_low = greedy_row([3.0, 1.0, 3.0, -1.0], histogram=np.array([0, 5, 0, 0], np.int32), parameters=penalized)
    assert exact_tie(tied_low, 0, 2)  # penalties elsewhere leave the tie


def test_sampled_rows_have_no_exact_tie():
    sampled = np.array([1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0], np.float32)
    row = DrawInputs(np.array([2.0, 2.0, 0.0], np.float32), sampled, np.zeros(3, np.int32), np.full(1, -1, np.int32),
                     seed=5, position=3)
    assert not exact_tie(row, 0, 1)


# ------------------------------------------------------------------------------------------------ runtime


@pytest.fixture(scope="module")
def tied_core(tiny_checkpoint, tmp_path_factory):
    """The conformance core with lm_head rows 2k + 1 copied from rows 2k: every greedy maximum is
    held by an even id and the odd id after it, exactly, in both runtimes."""
    from safetensors.numpy import load_file, save_file

    from helios.ignition.prepare import PreparationOptions, prepare_checkpoint
    from tests.conformance.conftest import CAPACITIES

    directory = tmp_path_factory.mktemp("tied") / "tiny-mistral"
    shutil.copytree(tiny_checkpoint("mistral"), directory)
    (weights,) = directory.glob("*.safetensors")
    tensors = load_file(weights)
    name = "lm_head.weight" if "lm_head.weight" in tensors else "model.embed_tokens.weight"
    head = tensors[name].copy()
    head[1::2] = head[0::2][: head[1::2].shape[0]]
    tensors[name] = head
    save_file(tensors, weights, metadata={"format": "pt"})
    return prepare_checkpoint(directory, PreparationOptions(**CAPACITIES))


TIED = ({"prompt": [3, 1, 4, 1, 5], "max_tokens": 3, "temperature": 0, "ignore_eos": True},)


@pytest.mark.slow
def test_production_follows_the_tie_break_on_exact_ties(tied_core):
    from helios.reference.engine import ReferenceEngine
    from helios.runtime.request import GenerationRequest, SamplingParams

    engine = ReferenceEngine.load(tied_core, keep=("logits",))
    tokens = list(engine.generate(GenerationRequest((3, 1, 4, 1, 5), max_tokens=3,
                                                    sampling=SamplingParams(temperature=0.0), ignore_eos=True)))
    assert all(t % 2 == 0 for t in tokens), tokens  # the lowest id of each tied pair
    logits = engine.kept[-1]["logits"][0]  # the round that drew the last token
    assert logits[tokens[-1]] == logits[tokens[-1] + 1] == logits.max()  # the draw is an exact tie
    report = run(tied_core, ("trace", "e2e"), workload("tied", *TIED))
    assert report.exit_code == 0 and report.level("trace").numeric_ties == 0, report.table()


@pytest.mark.slow
def test_a_tie_break_that_picks_the_highest_id_is_a_divergence(tied_core, monkeypatch):
    import torch

    from helios.production.kernels.sampling import Sampler

    call = Sampler.__call__

    def highest(self, logits, seed, positions, parameters, histogram, grammar_mask, out, *, draw_index=0):
        call(self, logits, seed, positions, parameters, histogram, grammar_mask, out, draw_index=draw_index)
        best = self.z.max(dim=1, keepdim=True).values
        ids = torch.arange(self.z.shape[1], device=self.z.device)
        last = torch.where(self.z == best, ids, -1).max(dim=1).values  # the highest id holding the maximum
        greedy = (parameters[:, 0] <= 0) & torch.isfinite(best[:, 0])
        flat = out.view(-1)
        flat.copy_(torch.where(greedy, last.to(flat.dtype), flat))

    monkeypatch.setattr(Sampler, "__call__", highest)
    report = run(tied_core, ("trace", "e2e"), workload("tied", *TIED))
    found = only_divergence(report, "trace")
    assert found.field == "sampled_id" and found.margin == 0.0, report.table()
    assert found.production == found.reference + 1 and "exact tie" in found.detail
    assert report.level("trace").numeric_ties == 0
    e2e = only_divergence(report, "e2e")  # the end-to-end level judges it by the same rule
    assert e2e.field == "token_ids" and e2e.margin == 0.0, report.table()
