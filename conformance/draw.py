"""The numeric-tie rule of one sampled draw (host side, NumPy only).

When the runtimes sample different ids for one row, the question is whether rounding could explain
it. The reference re-runs its own draw (`helios.reference.sampling.sample_row`, same parameters,
histogram, grammar mask and Philox word) on its logits perturbed by at most `delta` per logit, in
the direction that favours production's id p:

    p above the reference's id:  ids below p lowered by delta, ids from p on raised
    p below the reference's id:  ids up to p raised by delta, ids above p lowered

The draw walks ids in ascending order, so this is the worst case within +-delta per logit, and it
moves the draw monotonically toward p. The *margin* is the smallest delta that brings the draw to p
(bisection), provided the draw then lands on p itself and not on an id beyond it: for a greedy row
half the logit difference, for a sampled row how far the Philox target lies from p's interval,
expressed in logit units. It is a numeric tie when the margin is within the precision's
tie tolerance times max(1, max |logit|) of the row (`conformance.tolerance`), and not zero.

A zero margin is an exact tie: a greedy row whose penalized, masked logits hold their maximum at
both ids exactly. Rounding did not choose there, the specification's tie-break did (the lowest id
holding the maximum, docs/sampling.md), so production must pick what the reference picked; any
other id is a divergence, reported with margin 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from conformance.tolerance import tolerance
from helios.core.source import CoreSource
from helios.proto import program_pb2
from helios.reference.philox import randint, sampling_offset
from helios.reference.sampling import TEMPERATURE, allowed_tokens, penalize, sample_row

BISECTION_STEPS = 40


@dataclass(frozen=True, slots=True)
class DrawInputs:
    """One row of a `sample` (or `argmax`) operator's inputs, as the reference ran it."""

    logits: np.ndarray  # [V] f32
    parameters: np.ndarray | None = None  # [7] f32; None: an argmax row (greedy)
    histogram: np.ndarray | None = None  # [Vh] i32
    mask: np.ndarray | None = None  # [ceil(V / 32)] i32
    seed: int = 0
    position: int = 0  # the position of the row whose logits these are
    draw_index: int = 0

    def draw(self, logits: np.ndarray) -> int:
        if self.parameters is None:
            return int(np.argmax(np.where(np.isnan(logits), -np.inf, logits)))
        word = int(randint(np.int64(self.seed), sampling_offset(self.position + 1, self.draw_index)))
        return sample_row(logits, self.parameters, self.histogram, self.mask, word)

    @property
    def greedy(self) -> bool:
        return self.parameters is None or not float(self.parameters[TEMPERATURE]) > 0

    def filtered(self, logits: np.ndarray) -> np.ndarray:
        """The values a greedy draw compares: penalties, then the grammar mask (docs/sampling.md 1-2)."""
        logits = np.asarray(logits, dtype=np.float32)
        if self.parameters is None:
            return np.where(np.isnan(logits), np.float32(-np.inf), logits)
        z = penalize(logits, self.histogram, self.parameters)
        return np.where(allowed_tokens(self.mask, z.shape[0]), z, np.float32(-np.inf)).astype(np.float32)


def exact_tie(inputs: DrawInputs, reference_id: int, production_id: int) -> bool:
    """Whether a greedy row holds its maximum at both ids exactly: margin zero, so no rounding chose
    between them; the specification's tie-break (the lowest id) did, and production must follow it."""
    if not inputs.greedy:
        return False
    z = inputs.filtered(inputs.logits)
    if not (0 <= reference_id < z.shape[0] and 0 <= production_id < z.shape[0]):
        return False
    top = z.max()
    return bool(np.isfinite(top) and z[reference_id] == top and z[production_id] == top)


def _perturbed(logits: np.ndarray, reference_id: int, production_id: int, delta: float) -> np.ndarray:
    ids = np.arange(logits.shape[0])
    if production_id > reference_id:
        step = np.where(ids < production_id, -delta, delta)
    else:
        step = np.where(ids <= production_id, delta, -delta)
    return (logits.astype(np.float64) + step).astype(np.float32)


def _reached(draw: int, reference_id: int, production_id: int) -> bool:
    return draw >= production_id if production_id > reference_id else 0 <= draw <= production_id


def draw_margin(inputs: DrawInputs, reference_id: int, production_id: int) -> float | None:
    """The smallest per-logit perturbation that turns the reference's draw into `production_id`
    (None when none within the row's logit range does, e.g. a masked or filtered-out id)."""
    logits = np.asarray(inputs.logits, dtype=np.float32)
    finite = logits[np.isfinite(logits)]
    if finite.size == 0 or not 0 <= production_id < logits.shape[0]:
        return None
    high = float(finite.max() - finite.min()) + 1.0
    if not _reached(inputs.draw(_perturbed(logits, reference_id, production_id, high)), reference_id, production_id):
        return None
    low = 0.0
    for _ in range(BISECTION_STEPS):
        middle = (low + high) / 2
        if _reached(inputs.draw(_perturbed(logits, reference_id, production_id, middle)), reference_id,
                    production_id):
            high = middle
        else:
            low = middle
    if inputs.draw(_perturbed(logits, reference_id, production_id, high)) != production_id:
        return None  # the draw passes p by without landing on it: p is filtered out or shadowed
    return high


def is_draw_tie(inputs: DrawInputs, reference_id: int, production_id: int, dtype: str) -> tuple[bool, float | None]:
    """(tie, margin) of two differing sampled ids (see the module docstring); an exact tie (margin 0)
    is never a numeric tie: the rule's tie-break decides it (`exact_tie`)."""
    if exact_tie(inputs, reference_id, production_id):
        return False, 0.0
    margin = draw_margin(inputs, reference_id, production_id)
    return margin is not None and margin <= tie_limit(inputs, dtype), margin


def tie_limit(inputs: DrawInputs, dtype: str) -> float:
    """The largest margin a numeric tie may have: the dtype's tie margin, scaled by the row's largest
    |logit| (at least 1)."""
    logits = np.asarray(inputs.logits, dtype=np.float64)
    finite = logits[np.isfinite(logits)]
    scale = max(1.0, float(np.abs(finite).max())) if finite.size else 1.0
    return tolerance(dtype).tie * scale


@dataclass(frozen=True, slots=True)
class SamplingSite:
    """Where a core's generating programs draw: the `sample` (or `argmax`) operator's input tensors,
    which the reference keeps (`ReferenceEngine.load(keep=...)`) to re-run one row's draw."""

    op: str  # "sample" or "argmax"
    inputs: tuple[str, ...]  # logits, then (sample) seed, positions, parameters, histogram, grammar_mask
    draw_index: int

    def row(self, kept: Mapping[str, np.ndarray], row: int) -> DrawInputs | None:
        if any(name not in kept for name in self.inputs):
            return None
        logits = np.asarray(kept[self.inputs[0]])[row]
        if self.op != "sample":
            return DrawInputs(logits)
        seed, positions, parameters, histogram, mask = (np.asarray(kept[name]) for name in self.inputs[1:])
        return DrawInputs(logits, parameters[row], histogram[row], mask[row], seed=int(seed.reshape(-1)[row]),
                          position=int(positions.reshape(-1)[row]), draw_index=self.draw_index)


def sampling_site(core: CoreSource) -> SamplingSite | None:
    """The first `sample` or `argmax` operator of the core's programs (every generating graph of one
    recipe draws the same way), or None."""
    for handle in core.manifest.graphs:
        program = program_pb2.Program.FromString(core.read(handle.program_resources[0]))
        for operator in program.operators:
            if operator.op in ("sample", "argmax"):
                draw_index = next((a.i for a in operator.attributes if a.name == "draw_index"), 0)
                return SamplingSite(operator.op, tuple(operator.inputs), int(draw_index))
    return None
