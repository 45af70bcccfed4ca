"""The sampling kernels against `helios.reference.sampling` on random rows: every filter, the grammar
mask, greedy rows, rows the mask empties, and the Philox draw."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helios.production.kernels import sampling
from helios.reference import operators as ref
from tests.production.helpers import DEVICE, tensor

ROWS, VOCAB = 12, 300


def _inputs(rng: np.random.Generator):
    logits = (rng.standard_normal((ROWS, VOCAB)) * 3).astype(np.float32)
    logits[0, :5] = logits[0, 5]  # ties at the top
    logits[1, 7] = np.nan
    seed = rng.integers(-(2**63), 2**63 - 1, size=ROWS, dtype=np.int64)
    positions = rng.integers(0, 5000, size=ROWS).astype(np.int32)
    parameters = np.zeros((ROWS, 7), np.float32)
    parameters[:, 0] = rng.choice([0.0, 0.5, 1.0, 1.7], size=ROWS)  # temperature
    parameters[:, 1] = rng.choice([1.0, 0.9, 0.3], size=ROWS)  # top_p
    parameters[:, 2] = rng.choice([0, 1, 5, 40, VOCAB + 3], size=ROWS)  # top_k
    parameters[:, 3] = rng.choice([0.0, 0.05, 0.5], size=ROWS)  # min_p
    parameters[:, 4] = rng.choice([1.0, 1.3, 0.8], size=ROWS)  # repetition
    parameters[:, 5] = rng.choice([0.0, 0.7], size=ROWS)  # presence
    parameters[:, 6] = rng.choice([0.0, 0.2], size=ROWS)  # frequency
    parameters[2, 0] = 1.0  # at least one sampled row with no filter
    parameters[2, 1:4] = (1.0, 0, 0)
    histogram = rng.integers(0, 3, size=(ROWS, VOCAB - 20)).astype(np.int32)
    words = rng.integers(0, 2**32, size=(ROWS, (VOCAB + 31) // 32), dtype=np.uint64)
    words[rng.random(ROWS) < 0.4] = 2**32 - 1
    words[3] = 0  # a row the grammar mask empties
    words[4] = 0
    words[4, 2] = 1 << 5 | 1 << 9  # two allowed tokens
    grammar_mask = words.astype(np.uint32).view(np.int32)
    return logits, seed, positions, parameters, histogram, grammar_mask


# the chunked form at sizes that give 300 ids three chunks of 128 and stream rows in spans of 32
CHUNKED = dict(rank_form="chunked", chunk=128, candidates=8, span=32)


@pytest.mark.parametrize("form", [dict(rank_form="fused"), CHUNKED, dict(rank_form="sort")],
                         ids=["fused", "chunked", "sorted-by-torch"])
@pytest.mark.parametrize("draw_index", [0, 3])
def test_sample_matches_the_reference(draw_index, form):
    rng = np.random.default_rng()
    logits, seed, positions, parameters, histogram, grammar_mask = _inputs(rng)
    sampler = sampling.Sampler(ROWS, VOCAB, DEVICE, block=128, **form)
    out = torch.empty(ROWS, dtype=torch.int32, device=DEVICE)
    sampler(tensor(logits, torch.float32), tensor(seed), tensor(positions), tensor(parameters, torch.float32),
            tensor(histogram), tensor(grammar_mask), out, draw_index=draw_index)
    expected = ref.sample(logits, seed, positions, parameters, histogram, grammar_mask, draw_index=draw_index)
    np.testing.assert_array_equal(out.cpu().numpy(), expected)
    assert expected[3] == -1


def test_without_the_rank_stage_rows_that_filter_nothing_draw_the_same():
    """A round none of whose rows filters by rank (top-k 0, top-p 1, min-p 0) may skip the rank stage:
    every row still draws the reference's token, greedy rows and rows the mask empties included."""
    rng = np.random.default_rng()
    logits, seed, positions, parameters, histogram, grammar_mask = _inputs(rng)
    parameters[:, 1:4] = (1.0, 0.0, 0.0)
    switch = sampling.RankFilters()
    sampler = sampling.Sampler(ROWS, VOCAB, DEVICE, block=128, rank_filters=switch)
    out = torch.empty(ROWS, dtype=torch.int32, device=DEVICE)
    switch.form = "off"
    sampler.kept.fill_(-5)
    sampler(tensor(logits, torch.float32), tensor(seed), tensor(positions), tensor(parameters, torch.float32),
            tensor(histogram), tensor(grammar_mask), out, draw_index=1)
    expected = ref.sample(logits, seed, positions, parameters, histogram, grammar_mask, draw_index=1)
    np.testing.assert_array_equal(out.cpu().numpy(), expected)
    assert (sampler.kept == -5).all()  # the rank stage did not run
    assert expected[3] == -1 and (parameters[:, 0] > 0).any()


@pytest.mark.parametrize("vocab", [1, 37, 1000])
def test_fused_rank_stage_keeps_the_reference_weights_at_ties(vocab):
    """The fused rank stage's kept weights equal the torch sort's over the same weights, and on a CPU
    the reference's, where rank order turns on ids: logits of a few distinct values (ties at the
    top-k cutoff and across the top-p threshold), -0.0 beside 0.0, ids the mask forbids, top-k
    larger than the vocabulary, top-p 0 (the first rank alone) and min-p; block sums over blocks of
    256 ids. (A GPU's `exp` may differ from NumPy's in the last bit, and with it a weight: on a GPU
    both stages filter the weights the device computed.)"""
    rng = np.random.default_rng()
    rows = 16
    logits = rng.choice(np.array([0.0, -0.0, -0.5, -2.0, -np.inf], np.float32), size=(rows, vocab))
    logits[::2, :vocab // 2] = rng.choice(np.array([1.0, 0.0, -0.0], np.float32), size=(rows // 2, vocab // 2))
    parameters = np.zeros((rows, 7), np.float32)
    parameters[:, 0] = rng.choice([0.3, 1.0, 2.5], size=rows)
    parameters[:, 1] = rng.choice([1.0, 0.5, 0.2, 0.0], size=rows)
    parameters[:, 2] = rng.choice([0, 1, 3, 17, vocab // 3, vocab - 1, vocab + 5], size=rows)
    parameters[:, 3] = rng.choice([0.0, 0.1, 0.9], size=rows)
    parameters[:, 4] = 1.0
    inputs = (tensor(logits, torch.float32), tensor(parameters, torch.float32), tensor(np.zeros((rows, 1), np.int32)),
              tensor(np.full((rows, (vocab + 31) // 32), -1, np.int32)))
    fused = sampling.Sampler(rows, vocab, DEVICE, block=256, rank_form="fused")
    kept = fused.kept_weights(*inputs, rank_stage=True).cpu().numpy()
    block_sums = fused.block_sum.cpu().numpy()
    by_sort = sampling.Sampler(rows, vocab, DEVICE, block=256, rank_form="sort")
    np.testing.assert_array_equal(kept, by_sort.kept_weights(*inputs, rank_stage=True).cpu().numpy())
    np.testing.assert_array_equal(block_sums, by_sort.block_sum.cpu().numpy())
    for row in range(rows):
        sums = np.add.reduceat(kept[row], np.arange(0, vocab, 256))
        np.testing.assert_array_equal(block_sums[row], sums)
        if DEVICE.type == "cpu":  # the interpreter's exp is NumPy's
            z = np.where(np.isnan(logits[row]), -np.inf, logits[row])
            expected = ref.sampling.row_weights(z, parameters[row]) if np.any(z > -np.inf) else np.zeros(vocab, np.int64)
            np.testing.assert_array_equal(kept[row], expected, err_msg=f"row {row}: {parameters[row, :4]}")


def _chunked_path(z: np.ndarray, parameters: np.ndarray, candidates: int) -> str:
    """Which part of the chunked form decides a row (the reference's weights say whether the row's
    first `candidates` ids reach its top-p threshold)."""
    vocab = z.shape[0]
    top_k, top_p = int(parameters[2]), float(parameters[1])
    by_k = 0 < top_k < vocab
    if not by_k and top_p >= 1:
        return "first launch"
    if by_k:
        return "candidates" if top_k <= candidates else "streamed"
    weights = ref.sampling.row_weights(z, np.array([parameters[0], 1, 0, 0, *parameters[4:]], np.float32))
    order = np.lexsort((np.arange(vocab), -(z / np.float32(parameters[0])).astype(np.float32)))
    leading = int(weights[order[:candidates]].sum())
    return "candidates" if leading >= np.float64(np.float32(top_p)) * np.float64(int(weights.sum())) else "streamed"


def test_chunked_rank_stage_keeps_the_reference_weights_on_every_path():
    """The chunked form (vocabularies past FUSED_RANK_VOCAB) at small sizes: 1,000 ids in chunks of 128
    keeping 8 candidates, streamed in spans of 64, so every path runs (rows finished by the first
    launch, top-k and top-p decided over the candidates, top-k past them and flat rows' top-p
    streamed); kept weights and block sums equal the torch sort's, and on a CPU the reference's.
    Ties at every cutoff, -0.0 beside 0.0, forbidden ids, top-p 0, min-p."""
    rng = np.random.default_rng()
    rows, vocab, candidates = 24, 1000, 8
    logits = (rng.standard_normal((rows, vocab)) * rng.choice([0.5, 4.0], size=(rows, 1))).astype(np.float32)
    logits[::4] = rng.choice(np.array([0.0, -0.0, -0.5, -2.0, -np.inf], np.float32), size=(rows // 4, vocab))
    logits[1::8, : vocab // 2] = 3.0  # flat rows: top-p past the candidates
    logits[2::8, 700:] = -np.inf
    parameters = np.zeros((rows, 7), np.float32)
    parameters[:, 0] = rng.choice([0.3, 1.0, 2.5], size=rows)
    parameters[:, 1] = rng.choice([1.0, 0.95, 0.5, 0.0], size=rows)
    parameters[:, 2] = rng.choice([0, 1, 3, candidates, candidates + 1, 300, vocab - 1, vocab + 5], size=rows)
    parameters[:, 3] = rng.choice([0.0, 0.1, 0.9], size=rows)
    parameters[:, 4] = 1.0
    # each path at least once: a random row finishes in the first launch only 1 time in 16
    parameters[:5, 1:3] = ((0.9, 0), (0.95, 0), (1.0, 300), (0.5, 3), (1.0, 0))
    inputs = (tensor(logits, torch.float32), tensor(parameters, torch.float32), tensor(np.zeros((rows, 1), np.int32)),
              tensor(np.full((rows, (vocab + 31) // 32), -1, np.int32)))
    chunked = sampling.Sampler(rows, vocab, DEVICE, block=128, rank_form="chunked", chunk=128, candidates=candidates,
                               span=64)
    kept = chunked.kept_weights(*inputs, rank_stage=True).cpu().numpy()
    by_sort = sampling.Sampler(rows, vocab, DEVICE, block=128, rank_form="sort")
    np.testing.assert_array_equal(kept, by_sort.kept_weights(*inputs, rank_stage=True).cpu().numpy())
    np.testing.assert_array_equal(chunked.block_sum.cpu().numpy(), by_sort.block_sum.cpu().numpy())
    paths = set()
    for row in range(rows):
        z = logits[row]
        if DEVICE.type == "cpu":
            expected = ref.sampling.row_weights(z, parameters[row]) if np.any(z > -np.inf) else np.zeros(vocab, np.int64)
            np.testing.assert_array_equal(kept[row], expected, err_msg=f"row {row}: {parameters[row, :4]}")
        if np.any(z > -np.inf):
            paths.add(_chunked_path(z, parameters[row], candidates))
    assert paths == {"first launch", "candidates", "streamed"}


def test_a_chunked_sampler_runs_the_torch_sort_where_the_switch_says():
    """A device whose sampler is chunked has the sort beside it (`RankFilters.sorts`): in a round whose
    switch says "sort" (a lane `needs_sort`) it sorts, with the same kept weights; and the host's rule
    sends to the sort exactly the filters the chunked form could stream."""
    rng = np.random.default_rng()
    logits, seed, positions, parameters, histogram, grammar_mask = _inputs(rng)
    switch = sampling.RankFilters()
    chunked = sampling.Sampler(ROWS, VOCAB, DEVICE, block=128, rank_filters=switch, **CHUNKED)
    assert switch.sorts
    inputs = (tensor(logits, torch.float32), tensor(parameters, torch.float32), tensor(histogram),
              tensor(grammar_mask))
    switch.form = "sort"
    chunked.candidate_count.fill_(-7)
    kept = chunked.kept_weights(*inputs).cpu().numpy()
    assert (chunked.candidate_count == -7).all()  # the chunked launches did not run
    by_sort = sampling.Sampler(ROWS, VOCAB, DEVICE, block=128, rank_form="sort")
    np.testing.assert_array_equal(kept, by_sort.kept_weights(*inputs, rank_stage=True).cpu().numpy())
    candidates = sampling.RANK_CANDIDATES
    assert not sampling.needs_sort(0.0, 10**6, 0.5)  # greedy: no draw
    assert not sampling.needs_sort(0.7, candidates, 0.5) and not sampling.needs_sort(0.7, 0, 1.0)
    assert sampling.needs_sort(0.7, candidates + 1, 1.0) and sampling.needs_sort(0.7, 0, 0.95)


def test_rank_forms_and_their_sizes_are_checked():
    with pytest.raises(ValueError, match="at most 8192"):
        sampling.Sampler(2, sampling.FUSED_RANK_VOCAB + 1, DEVICE, rank_form="fused")
    with pytest.raises(ValueError, match="rank form"):
        sampling.Sampler(2, 300, DEVICE, rank_form="bitonic")
    with pytest.raises(ValueError, match="multiple of the block"):
        sampling.Sampler(2, 3000, DEVICE, block=256, rank_form="chunked", chunk=512, candidates=6)
    assert sampling.Sampler(2, sampling.FUSED_RANK_VOCAB + 1, DEVICE).rank_form == "chunked"
    assert sampling.Sampler(2, sampling.FUSED_RANK_VOCAB, DEVICE).rank_form == "fused"


def test_argmax_lowest_index_and_nan_never_wins():
    rng = np.random.default_rng()
    logits = rng.standard_normal((5, 1000)).astype(np.float32)
    logits[0, 10] = logits[0, 900] = 50.0
    logits[1, 3] = np.nan
    out = torch.empty(5, dtype=torch.int32, device=DEVICE)
    sampling.argmax(tensor(logits, torch.float32), out, block=256)
    np.testing.assert_array_equal(out.cpu().numpy(), ref.argmax(logits))


@pytest.mark.parametrize("form", [dict(rank_form="fused"), CHUNKED, dict(rank_form="sort")],
                         ids=["fused", "chunked", "sorted-by-torch"])
def test_samplers_sharing_one_storage_each_draw_the_reference_tokens(form):
    """Samplers of several row counts over one `SamplerStorage` (as a device's plans hold them) run in
    turn, each over what the one before left in the shared buffers, and each draws the reference's
    tokens; the storage holds the most rows once, not every sampler's; a sampler of another slot has
    kept weights of its own (its scratch rows are slot 0's); once frozen, a sampler needing more rows
    is refused."""
    rng = np.random.default_rng()
    storage = sampling.SamplerStorage(DEVICE)
    samplers = [sampling.Sampler(rows, VOCAB, DEVICE, block=128, storage=storage, **form) for rows in (3, ROWS, 5)]
    other = sampling.Sampler(4, VOCAB, DEVICE, block=128, storage=storage, slot=1, **form)
    largest = sampling.Sampler(ROWS, VOCAB, DEVICE, block=128, **form)  # its own storage
    own = largest.storage.bytes
    assert storage.bytes == own + 4 * VOCAB * (8 + 8)  # slot 1: the other sampler's weights and kept
    assert samplers[0].kept.data_ptr() == samplers[1].kept.data_ptr() != other.kept.data_ptr()
    assert samplers[1].z.data_ptr() == other.z.data_ptr()
    for sampler in [*samplers, other, samplers[0], samplers[1]]:
        logits, seed, positions, parameters, histogram, grammar_mask = _inputs(rng)
        rows = sampler.rows
        inputs = (logits[:rows], seed[:rows], positions[:rows], parameters[:rows], histogram[:rows],
                  grammar_mask[:rows])
        out = torch.empty(rows, dtype=torch.int32, device=DEVICE)
        sampler(tensor(inputs[0], torch.float32), tensor(inputs[1]), tensor(inputs[2]), tensor(inputs[3], torch.float32),
                tensor(inputs[4]), tensor(inputs[5]), out, draw_index=2)
        np.testing.assert_array_equal(out.cpu().numpy(), ref.sample(*inputs, draw_index=2))
    storage.freeze()
    sampling.Sampler(ROWS, VOCAB, DEVICE, block=128, storage=storage, **form)  # fits: views again
    with pytest.raises(RuntimeError, match="frozen"):
        sampling.Sampler(ROWS + 1, VOCAB, DEVICE, block=128, storage=storage, **form)


def test_the_sort_form_sorts_rows_in_groups_and_draws_the_reference_tokens(monkeypatch):
    """A sampler of more rows than SORT_ROWS (a verifier's B (W + 1)) runs the torch sort's rank stage
    a group of rows at a time over buffers of one group's rows (the last group partial): each row
    keeps the reference's weights and draws its token, and the storage holds one group's sort rows."""
    monkeypatch.setattr(sampling, "SORT_ROWS", 5)
    rng = np.random.default_rng()
    sampler = sampling.Sampler(ROWS, VOCAB, DEVICE, block=128, rank_form="sort")
    assert sampler.sort_rows == 5 and sampler.order.shape == (5, VOCAB) and sampler.kept.shape == (ROWS, VOCAB)
    held = sampler.storage.rows_held
    assert held[0, "order"] == held[0, "keep"] == 5 and held[0, "kept"] == ROWS
    for _ in range(2):
        inputs = _inputs(rng)
        out = torch.empty(ROWS, dtype=torch.int32, device=DEVICE)
        sampler(tensor(inputs[0], torch.float32), tensor(inputs[1]), tensor(inputs[2]), tensor(inputs[3], torch.float32),
                tensor(inputs[4]), tensor(inputs[5]), out, draw_index=1)
        np.testing.assert_array_equal(out.cpu().numpy(), ref.sample(*inputs, draw_index=1))
