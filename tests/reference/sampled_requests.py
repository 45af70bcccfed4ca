"""Sampled speculation over whole requests (test helper; the core's checkpoints and the exact
distribution import torch and transformers): the distribution of a request's first tokens, run
through a runtime with speculation, against the exact distribution plain decoding samples.

The core is a one-layer Llama of `VOCAB` ids (`make_checkpoint(vocab_size=VOCAB)`), prepared with
a draft that is the target with perturbed weights (so acceptance is partial: accepted runs,
rejections and bonus tokens are all frequent) and SPECULATIVE programs of width `WIDTH` at one
batch capacity of `LANES` lanes. Every request has the two-token prompt `PROMPT`, asks for
`TOKENS` tokens at temperature 1 (no filter: every id has positive probability) and has its own
seed; the first token comes from a MIXED round of many prompts, the next three from SPECULATIVE
rounds (the output limit falls inside accepted runs) and, where the scheduler gives a lane a plain
round while it waits, DECODE rounds. (A one-token prompt would be a decode lane from the start, and
the batching scheduler keeps decode lanes in both frames of a two-frame executor, where none is
ever free to speculate.)

The exact distribution of the first `TOKENS` tokens is the product of the target's sampling
distributions (`sampling.row_weights`, the plain sampler's fixed-point weights) along every
prefix, from the Hugging Face model's logits: `VOCAB ** TOKENS` sequences. The test statistic is a
chi-square goodness of fit over a partition fixed by the exact distribution alone (`partition`):
every sequence expected at least `MINIMUM_EXPECTED` times is a cell of its own, the rest are pooled
by their longest prefix whose pool reaches it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from helios.reference import sampling
from helios.runtime.interface import PreparedRequest
from helios.runtime.request import GenerationRequest, SamplingParams
from tests.reference.speculative_rounds import chi_square_survival
from tests.runtime.streams import serve_all

VOCAB = 8  # Llama's five specials and three letters
TOKENS = 4  # the first four tokens of every request
WIDTH = 4  # the pending token and three proposals a round
LANES = 512  # requests a round
SAMPLES = 20_000  # requests per setting
SIGNIFICANCE = 0.001
MINIMUM_EXPECTED = 5.0
PROMPT = (0, 1)
PERTURB = 0.05  # the draft: the target's weights plus Gaussian noise of this scale
TEMPERATURE = 1.0
_ARCHITECTURE = {"num_hidden_layers": 1, "hidden_size": 32, "intermediate_size": 32, "num_attention_heads": 2,
                 "num_key_value_heads": 1}


def make_pair(directory: Path) -> tuple[Path, Path]:
    """(target, draft) checkpoint directories under `directory`."""
    from tests.fixtures.checkpoints import make_checkpoint

    target = make_checkpoint("llama", directory / "target", vocab_size=VOCAB, overrides=_ARCHITECTURE)
    draft = make_checkpoint("llama", directory / "draft", vocab_size=VOCAB, overrides=_ARCHITECTURE,
                            perturb=PERTURB)
    return target, draft


def prepare(target: Path, draft: Path):
    from helios.ignition.prepare import PreparationOptions, prepare_checkpoint

    return prepare_checkpoint(target, PreparationOptions(
        dtype="fp32", draft=draft, page_tokens=8, batch_capacities=(LANES,), prefill_capacities=(8,),
        context_tokens=16, speculative_widths=(WIDTH,)))


PAGES = 2 * LANES  # a request reaches 2 + TOKENS positions plus a round's draft passes: two pages of 8


def setting(directory: Path):
    """(the prepared core, its exact distribution) for a pair of checkpoints made under `directory`."""
    target, draft = make_pair(directory)
    return prepare(target, draft), exact_distribution(target)


def reference_runtime(core, *, width: int | None = WIDTH):
    """The reference runtime's batching engine over `core` (the reference executor, NumPy), decode
    lanes in SPECULATIVE rounds of `width` (None: plain decoding)."""
    from helios.engine.worker import BatchingRuntime
    from helios.reference.engine import ReferenceEngine
    from helios.runtime.limits import AdmissionLimits

    engine = ReferenceEngine.load(core, pages=PAGES)
    return BatchingRuntime.for_executor(engine.executor, engine.contract,
                                        AdmissionLimits(max_active=LANES, queue_capacity=SAMPLES), pages=PAGES,
                                        speculative_width=width)


def exact_distribution(target: Path) -> np.ndarray:
    """[VOCAB] * TOKENS float64: the probability plain decoding gives each sequence of first tokens."""
    import itertools

    import torch

    from tests.fixtures.hf_oracle import load_hf_model

    model = load_hf_model(target)
    prefixes = np.array([PROMPT + tail for tail in itertools.product(range(VOCAB), repeat=TOKENS - 1)])
    with torch.no_grad():
        logits = model(input_ids=torch.from_numpy(prefixes)).logits.float().numpy()  # [V^(T-1), T, V]
    parameters = np.array([TEMPERATURE, 1.0, 0, 0.0, 1.0, 0.0, 0.0], np.float32)
    probability = np.ones((VOCAB,) * 0)
    for step in range(TOKENS):
        # the rows whose prefix is each sequence of `step` sampled tokens: the first of every block
        rows = logits[:: VOCAB ** (TOKENS - 1 - step), len(PROMPT) - 1 + step]
        kept = np.stack([sampling.row_weights(row, parameters) for row in rows]).astype(np.float64)
        conditional = (kept / kept.sum(axis=1, keepdims=True)).reshape((VOCAB,) * (step + 1))
        probability = probability[..., None] * conditional
    assert abs(probability.sum() - 1.0) < 1e-9, probability.sum()
    return probability


def partition(expected: np.ndarray, minimum: float = MINIMUM_EXPECTED) -> np.ndarray:
    """The cell of every sequence (flat index), from the expected counts alone: a sequence expected
    at least `minimum` times is its own cell; the others pool by prefix, longest first (all of a
    prefix's remaining sequences form a cell once their expected sum reaches `minimum`); what is left
    at the empty prefix joins the smallest cell."""
    depth, vocab = expected.ndim, expected.shape[0]
    flat = expected.reshape(-1)
    cell = np.full(flat.size, -1, dtype=np.int64)
    cells = 0
    left = np.arange(flat.size)
    for length in range(depth, -1, -1):
        _, group = np.unique(left // vocab ** (depth - length), return_inverse=True)
        mass = np.bincount(group, weights=flat[left])
        big = mass >= minimum
        number = np.cumsum(big) - 1 + cells
        taken = big[group]
        cell[left[taken]] = number[group[taken]]
        cells += int(big.sum())
        left = left[~taken]
    if left.size:
        sizes = np.bincount(cell[cell >= 0], weights=flat[cell >= 0])
        cell[left] = int(np.argmin(sizes))
    return cell


@dataclass(frozen=True)
class Fit:
    """A chi-square goodness of fit of sampled sequences against their exact distribution."""

    p_value: float
    statistic: float
    cells: int
    samples: int

    def __str__(self) -> str:
        return (f"chi-square {self.statistic:.1f} over {self.cells} cells ({self.cells - 1} dof), "
                f"{self.samples} samples: p = {self.p_value:.3g}")


def goodness_of_fit(sequences: np.ndarray, probability: np.ndarray) -> Fit:
    """`sequences` [n, TOKENS] against `probability` [VOCAB] * TOKENS over `partition`'s cells."""
    n = sequences.shape[0]
    expected = probability * n
    cell = partition(expected)
    cells = int(cell.max()) + 1
    flat = np.ravel_multi_index(tuple(sequences.T), probability.shape)
    observed = np.bincount(cell[flat], minlength=cells)
    due = np.bincount(cell, weights=expected.reshape(-1), minlength=cells)
    statistic = float(((observed - due) ** 2 / due).sum())
    return Fit(chi_square_survival(statistic, cells - 1), statistic, cells, n)


def first_tokens(runtime, *, count: int = SAMPLES, first_seed: int = 0) -> np.ndarray:
    """[count, TOKENS] i64: the tokens of `count` requests (seeds first_seed, first_seed + 1, ...)
    served through `runtime` (started and shut down here)."""
    requests = [PreparedRequest(f"r{i}", GenerationRequest(
        PROMPT, max_tokens=TOKENS, sampling=SamplingParams(temperature=TEMPERATURE, seed=first_seed + i),
        ignore_eos=True), observe_tokens=True) for i in range(count)]
    results = serve_all(runtime, requests)
    assert all(len(tokens) == TOKENS for tokens, _ in results), {len(tokens) for tokens, _ in results}
    return np.array([tokens for tokens, _ in results], dtype=np.int64)
