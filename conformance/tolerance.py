"""Numeric tolerances (host side, NumPy only): how far two correct runtimes may differ.

Both runtimes compute every operator in FP32 and round once to the stored dtype, but they sum in
different orders (blocked kernels against NumPy), so floats agree within a tolerance set by the
stored dtype, and integers agree exactly:

    dtype   relative tolerance (per element, against max(1, |reference|))   numeric-tie margin   round state
    f32     1e-5                                                             1e-4 x max |logit|   1e-4 x scale
    bf16    1e-2                                                             3e-2 x max |logit|   3e-2 x scale
    f16     1e-3                                                             5e-3 x max |logit|   5e-3 x scale

A sampled id that differs is a *numeric tie* when moving each of the reference's logits by at most
the tie margin (scaled by the row's largest |logit|, at least 1) makes the reference's own draw pick
production's id (`conformance.draw`): either runtime's rounding could have chosen either token.
Anything wider is a divergence. The tie margin is looser than the per-element tolerance because
logits carry the error of every layer below them.

A fusion may keep in FP32 an intermediate the unfused operators store and so round (a norm
folded into the product reading it never stores the normalized rows). Its outputs then differ from
the unfused chain by that rounding carried through what follows, not by their own rounding alone:
the case comparing them grants each element an absolute *slack*, the intermediate's rounding bound
(the dtype's unit roundoff u times |intermediate|) propagated to first order (for a product,
u x |rows| @ |W|^T: every input of the sum moved by at most u of itself). f32 u = 2^-24, bf16 2^-8,
f16 2^-11.

The trace audit's round state (the cache records a round wrote, the logits rows it sampled from:
`conformance.state`) carries that error too, so it is compared with the `state` tolerance, the
tie margin's size, against the scale of the whole record (max(1, max |reference| over one
position's heads, or over one logits row)) rather than per element: a small element computed
from large ones carries their absolute error.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from helios.errors import HeliosError


class UnknownPrecision(HeliosError):
    """A dtype without a declared tolerance."""


@dataclass(frozen=True, slots=True)
class Tolerance:
    relative: float  # per element, against max(1, |reference|)
    tie: float  # numeric-tie margin, against max(1, max |logit| of the row)
    state: float = 1e-4  # round state (cache records, logits rows), against max(1, max |reference record|)
    roundoff: float = 2.0**-24  # unit roundoff of the stored dtype (round to nearest): a rounded value is within it, relatively

    def __post_init__(self) -> None:
        if not all(0.0 < v < 1.0 for v in (self.relative, self.tie, self.state, self.roundoff)):
            raise UnknownPrecision(f"tolerances must lie in (0, 1): {self.relative}, {self.tie}, {self.state}, "
                                   f"{self.roundoff}")


TOLERANCES = {
    "f32": Tolerance(relative=1e-5, tie=1e-4, state=1e-4, roundoff=2.0**-24),
    "bf16": Tolerance(relative=1e-2, tie=3e-2, state=3e-2, roundoff=2.0**-8),
    "f16": Tolerance(relative=1e-3, tie=5e-3, state=5e-3, roundoff=2.0**-11),
}


def tolerance(dtype: str) -> Tolerance:
    try:
        return TOLERANCES[dtype]
    except KeyError:
        raise UnknownPrecision(f"no tolerance for dtype {dtype!r} (known: {sorted(TOLERANCES)})") from None


def first_mismatch(reference: np.ndarray, production: np.ndarray, relative: float | None, *,
                   record: bool = False, slack: np.ndarray | None = None) -> tuple[int, ...] | None:
    """Index of the first element outside tolerance (`relative` None: integers, exact), or None.
    The tolerance scales with max(1, |reference|) per element, or with `record`, with max(1, max
    |finite reference|) over the whole array (one record: a position's heads, a logits row); `slack`
    (floats only, broadcast to the shape) is added to each element's allowance: an intermediate a
    fusion leaves unrounded, carried to the element (module docstring). NaN
    matches NaN and infinities match themselves; shapes must agree (else index ())."""
    reference, production = np.asarray(reference), np.asarray(production)
    if reference.shape != production.shape:
        return ()
    if relative is None:
        bad = reference != production
    else:
        r, p = reference.astype(np.float64), production.astype(np.float64)
        if record:
            finite = np.abs(r[np.isfinite(r)])
            scale: float | np.ndarray = max(1.0, float(finite.max())) if finite.size else 1.0
        else:
            scale = np.maximum(1.0, np.abs(r))
        same = (r == p) | (np.isnan(r) & np.isnan(p))
        with np.errstate(invalid="ignore"):
            allowed = relative * scale if slack is None else relative * scale + np.asarray(slack, np.float64)
            close = np.abs(r - p) <= allowed
        bad = ~(same | close)
    if not bad.any():
        return None
    return tuple(int(i) for i in np.argwhere(bad)[0])
