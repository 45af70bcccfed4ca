"""Missing graph variants (host side): the serving metadata's extents each have their captured graphs.

"Missing graph variants and inconsistent contracts fail startup." `missing_variants(contract)` yields
one MissingGraphVariant per extent or operation no captured graph serves; validate.py runs it with
the other rules.
"""

from __future__ import annotations

from collections.abc import Iterator

import helios.contract.errors as e
from helios.contract.enums import Operation
from helios.contract.translated import TranslatedContract

_PROMPT_OPERATIONS = (Operation.PREFILL, Operation.MIXED)
_GENERATION_OPERATIONS = (Operation.DECODE, Operation.SPECULATIVE, Operation.MIXED)


def missing_variants(c: TranslatedContract) -> Iterator[e.ContractError]:
    """Missing graph variants fail startup: the serving metadata's extents each have their graphs.

    A core consumes prompts (a PREFILL or MIXED graph) and generates (a DECODE, SPECULATIVE or MIXED
    graph); every declared speculative width W has a SPECULATIVE graph of that W and every
    SPECULATIVE graph's W is declared; the selected concurrency is covered by a generation graph's
    batch capacity; the declared prefill chunk fits a prompt graph.
    """
    graphs = [(i, g) for i, g in enumerate(c.graphs) if isinstance(g.operation, Operation)]
    prompt = [g for _, g in graphs if g.operation in _PROMPT_OPERATIONS]
    generation = [g for _, g in graphs if g.operation in _GENERATION_OPERATIONS]
    if not prompt:
        yield e.MissingGraphVariant("model.graphs", "no PREFILL or MIXED graph consumes prompts")
    if not generation:
        yield e.MissingGraphVariant("model.graphs", "no DECODE, SPECULATIVE or MIXED graph generates tokens")
    widths = {g.speculative.verify_tokens for _, g in graphs if g.speculative is not None}
    for j, width in enumerate(c.speculative_widths):
        if width not in widths:
            yield e.MissingGraphVariant(f"speculative_widths[{j}]", f"no SPECULATIVE graph has width W = {width}")
    for i, g in graphs:
        if g.speculative is not None and g.speculative.verify_tokens not in c.speculative_widths:
            yield e.MissingGraphVariant(f"model.graphs[{i}].speculative.verify_tokens",
                                        f"width W = {g.speculative.verify_tokens} is not among the declared "
                                        f"speculative_widths {list(c.speculative_widths)}")
    widest = max((g.batch_capacity for g in generation), default=0)
    if generation and c.max_concurrency > widest:
        yield e.MissingGraphVariant("max_concurrency", f"{c.max_concurrency} request slots, but the widest "
                                    f"generation graph covers B = {widest}")
    longest = max((g.packed_token_capacity for g in prompt if g.operation == Operation.PREFILL),
                  default=max((g.packed_token_capacity for g in prompt), default=0))
    if prompt and c.prefill_tokens > longest:
        yield e.MissingGraphVariant("prefill_tokens", f"a {c.prefill_tokens}-token prefill chunk fits no prompt "
                                    f"graph (the largest consumes {longest})")
