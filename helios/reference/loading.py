"""The reference runtime's factory (host side, NumPy only): a core becomes a `ModelRuntime`.

    runtime = load_runtime(core, RuntimeOptions(limits))   # helios serve / generate --runtime reference

The sequential worker (`helios.engine.sequential.SequentialRuntime`) over a `ReferenceEngine` whose
cache gives every slot its full context (unless `pages` says otherwise): page shortages then only
come from the core's own limits.
"""

from __future__ import annotations

from helios.core.source import CoreSource
from helios.engine.sequential import SequentialRuntime
from helios.reference.cache import pages_for
from helios.reference.engine import AdmissionRejected, ReferenceEngine
from helios.runtime.options import InvalidRuntimeOptions, RuntimeOptions, adaptive, speculative_width
from helios.runtime.scores import prompt_score_width
from helios.runtime.startup import startup_seconds

_PRODUCTION_ONLY = (("device", "--device"), ("gpu_memory_fraction", "--gpu-memory-fraction"),
                    ("wrap_executor", "--trace"), ("ranks", "--rank-peers / --master"))


def load_runtime(core: CoreSource, options: RuntimeOptions) -> SequentialRuntime:
    """The reference runtime for `core` (see the module docstring)."""
    for field, flag in _PRODUCTION_ONLY:
        if getattr(options, field) is not None:
            raise InvalidRuntimeOptions(f"{flag} is an option of the production runtime; add --runtime production")
    if options.host_cache_gib:
        raise InvalidRuntimeOptions("--host-cache-gib is an option of the production runtime (the sequential "
                                    "reference worker never evicts a cache page); add --runtime production")
    serving = core.contract
    limits = options.limits
    pages = options.pages or limits.max_active * pages_for(serving.context_tokens, serving.model.cache.page_tokens)
    width = speculative_width(tuple(serving.speculative_widths), options)
    engine = ReferenceEngine.load(core, pages=pages, speculative_width=width,
                                  history_drafting=options.history_drafting,
                                  adaptive_speculation=adaptive(tuple(serving.speculative_widths), options))
    contract = engine.contract  # the PreparedContract
    return SequentialRuntime(
        engine,
        limits,
        context_tokens=contract.context_tokens,
        vocab_size=contract.vocabulary.sampled_tokens,
        input_vocab_size=contract.input_vocabulary.input_tokens or None,
        capacity={"pages": pages, "max_concurrency": contract.max_concurrency},
        available=lambda: {"pages": engine.allocator.free},
        rejections=(AdmissionRejected,),
        eos_token_ids=tuple(contract.frontend.eos_token_ids),
        prompt_score_width=prompt_score_width(contract),
        startup_seconds=startup_seconds(engine.startup),
    )


__all__ = ["load_runtime"]
