"""bench/host_round.py --prefill: the executor's rounds of one fresh prompt each, every binding staged."""

from __future__ import annotations

import sys


def test_each_round_stages_its_fresh_prompt(monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))  # the bench puts its own folder first on import
    from bench import host_round

    prompt, rounds = 64, 10
    model = host_round.build_model(1, prompt, 16)
    result = host_round.measure_prefill(model, prompt, rounds)
    assert result["prefill_tokens"] == prompt and result["rounds"] == rounds
    assert 0 < result["host_ms_p10"] <= result["host_ms_median"]
    # the last round's prompt (the 13th: three warm-up rounds first) is what the tokens binding holds
    last = rounds + 2
    staged = model.executor.host_view[f"tokens_p{prompt}"].reshape(-1)[:prompt]
    assert staged.tolist() == [(7 + 31 * last + 13 * j) % 250 for j in range(prompt)]
