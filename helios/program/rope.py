"""The rotary operator's frequency table (host side, NumPy only): `rope_frequencies`.

The inverse frequencies and the attention factor are part of the `rotary` operator's definition
(`docs/operators.md`): the reference interpreter rotates with them and the production lowering
uploads them once per rope to the device, so both runtimes compute them here, in one place.
"""

from __future__ import annotations

import math

import numpy as np

F = np.float32


def rope_frequencies(
    *,
    theta: float,
    rotary_dim: int,
    rope_type: str = "default",
    factor: float = 1.0,
    low_freq_factor: float = 1.0,
    high_freq_factor: float = 4.0,
    original_max_position_embeddings: int | None = None,
    beta_fast: float = 32.0,
    beta_slow: float = 1.0,
    mscale: float | None = None,
    mscale_all_dim: float | None = None,
    attention_factor: float | None = None,
    truncate: bool = True,
) -> tuple[np.ndarray, float]:
    """(inv_freq [rotary_dim / 2] f32, attention factor), as transformers' ROPE_INIT_FUNCTIONS compute them.

    `rope_type` (docs/operators.md): "default"; "linear" (every frequency divided by `factor`);
    "frequency_band" (the frequency-band interpolation: wavelengths below the high-frequency bound
    `original_max_position_embeddings / high_freq_factor` keep their frequency, those above the
    low-frequency bound `original_max_position_embeddings / low_freq_factor` divide it by `factor`,
    and those between interpolate smoothly); "yarn".
    """
    d = rotary_dim
    base_powers = _base_powers(theta, d)
    inv_freq = (F(1) / base_powers).astype(F)
    factor_attention = 1.0
    if rope_type == "linear":
        inv_freq = (inv_freq / F(factor)).astype(F)
    elif rope_type == "frequency_band":
        old_context = float(original_max_position_embeddings)  # type: ignore[arg-type]
        low_wavelen = old_context / low_freq_factor
        high_wavelen = old_context / high_freq_factor
        # torch evaluates `scalar / tensor` as `reciprocal(tensor) * scalar` (one more rounding than a
        # division); transformers writes `2 * math.pi / inv_freq` and `old_context_len / wavelen`.
        wavelen = (_reciprocal(inv_freq) * F(2 * math.pi)).astype(F)
        scaled = np.where(wavelen > F(low_wavelen), inv_freq / F(factor), inv_freq).astype(F)
        smooth = ((_reciprocal(wavelen) * F(old_context) - F(low_freq_factor))
                  / F(high_freq_factor - low_freq_factor)).astype(F)
        smoothed = ((F(1) - smooth) * scaled / F(factor) + smooth * scaled).astype(F)
        medium = ~(wavelen < F(high_wavelen)) & ~(wavelen > F(low_wavelen))
        inv_freq = np.where(medium, smoothed, scaled).astype(F)
    elif rope_type == "yarn":
        inv_freq, factor_attention = _yarn(
            theta, d, factor, original_max_position_embeddings, beta_fast, beta_slow, mscale, mscale_all_dim, truncate,
            base_powers,
        )
    elif rope_type != "default":
        raise ValueError(f"unknown rope_type {rope_type!r}")
    if attention_factor is not None:
        factor_attention = float(attention_factor)
    return inv_freq, factor_attention


def _base_powers(theta: float, d: int) -> np.ndarray:
    """theta ** (2i / d) for i < d / 2: the FP32 exponents transformers forms, each power correctly rounded
    to FP32 (computed in FP64). torch's CPU FP32 power can differ from it by one ulp in rare entries."""
    exponents = (np.arange(0, d, 2, dtype=np.int64).astype(F) / F(d)).astype(F)
    return np.power(np.float64(theta), exponents.astype(np.float64)).astype(F)


def _reciprocal(x: np.ndarray) -> np.ndarray:
    return (F(1) / np.asarray(x, dtype=F)).astype(F)


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _yarn(theta, d, factor, original, beta_fast, beta_slow, mscale, mscale_all_dim, truncate, base_powers):
    if mscale and mscale_all_dim:
        attention = float(_yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all_dim))
    else:
        attention = _yarn_mscale(factor)

    def correction_dim(rotations: float) -> float:
        return (d * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(theta))

    low, high = correction_dim(beta_fast or 32), correction_dim(beta_slow or 1)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d - 1)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(d // 2, dtype=F) - F(low)) / F(high - low), F(0), F(1)).astype(F)
    extrapolation_factor = (F(1) - ramp).astype(F)
    extrapolation = (F(1) / base_powers).astype(F)
    interpolation = (F(1) / (F(factor) * base_powers)).astype(F)
    inv_freq = interpolation * (F(1) - extrapolation_factor) + extrapolation * extrapolation_factor
    return inv_freq.astype(F), attention
