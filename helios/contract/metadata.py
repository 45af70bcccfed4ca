"""Rules of the serving metadata beside the model contract (host side): identity and defaults.

`serving_metadata(contract)` yields one ContractError per problem, with its field path; validate.py
runs it first. The served identifier, its aliases and the cache identity must name something, and
each core default must be a value a request could give, since it fills what requests leave out.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import helios.contract.errors as e
from helios.contract.translated import TranslatedContract


def serving_metadata(c: TranslatedContract) -> Iterator[e.ContractError]:
    yield from _identity(c)
    yield from _defaults(c)


def _identity(c: TranslatedContract) -> Iterator[e.ContractError]:
    """The served identifier, its aliases and the cache identity name something: clients address the
    model by them, and equal cache identities share cached prefixes."""
    if not c.served_id:
        yield e.InvalidIdentity("served_id", "the served identifier is empty")
    for j, alias in enumerate(c.aliases):
        if not alias:
            yield e.InvalidIdentity(f"aliases[{j}]", "an alias is empty")
    if not c.cache_identity:
        yield e.InvalidIdentity("cache_identity", "the cache identity is empty (it would match any other)")


# Each sampling default's valid range, as a request value's (helios.runtime.request.SamplingParams).
_SAMPLING_RANGES = {
    "temperature": (lambda v: 0.0 <= v < math.inf, ">= 0 and finite"),
    "top_p": (lambda v: 0.0 < v <= 1.0, "in (0, 1]"),
    "min_p": (lambda v: 0.0 <= v <= 1.0, "in [0, 1]"),
    "repetition_penalty": (lambda v: 0.0 < v < math.inf, "> 0 and finite"),
    "presence_penalty": (lambda v: -2.0 <= v <= 2.0, "in [-2, 2]"),
    "frequency_penalty": (lambda v: -2.0 <= v <= 2.0, "in [-2, 2]"),
}


def _defaults(c: TranslatedContract) -> Iterator[e.ContractError]:
    """Core defaults fill a request's missing settings, so each must be a value a request could give:
    an out-of-range default would fail every request that leaves the setting out."""
    sampling = c.defaults.sampling
    for name, (valid, wanted) in _SAMPLING_RANGES.items():
        value = getattr(sampling, name)
        if value is not None and not valid(value):
            yield e.InvalidDefaults(f"defaults.sampling.{name}", f"{value} must be {wanted}")
    if c.defaults.max_output_tokens == 0:
        yield e.InvalidDefaults("defaults.max_output_tokens", "a default output limit of 0 allows no token")
