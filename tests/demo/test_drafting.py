"""The drafter's training and measurement plumbing on tiny random models: greedy continuations,
one distillation step, and acceptance per draft position (a model drafting for itself accepts all)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
train = pytest.importorskip("helios.demo.train")

from helios.demo.drafting import (  # noqa: E402
    Continuation,
    acceptance_by_position,
    distill_step,
    greedy_continuations,
)

PAD, EOS = 0, 2


def _tiny(seed: int, layers: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    shape = train.ModelShape(hidden_size=32, intermediate_size=64, num_layers=layers, num_heads=2, num_kv_heads=1,
                             max_positions=64)
    return train.build_model(shape, vocab_size=50, pad_id=PAD, eos_id=EOS).eval()


@pytest.fixture(scope="module")
def continuations():
    torch.set_num_threads(1)
    prompts = [[5, 6, 7], [8, 9], [10, 11, 12, 13, 14]]
    return greedy_continuations(_tiny(0, 2), prompts, EOS, PAD, max_new_tokens=6, batch_size=2)


def test_continuations_keep_the_prompts_order_and_stop_at_eos(continuations):
    assert [c.prompt for c in continuations] == [[5, 6, 7], [8, 9], [10, 11, 12, 13, 14]]
    for continuation in continuations:
        assert 1 <= len(continuation.completion) <= 6
        assert EOS not in continuation.completion[:-1]


def test_a_model_drafting_for_itself_is_always_accepted(continuations):
    assert acceptance_by_position(_tiny(0, 2), continuations, PAD, depth=4) == [1.0, 1.0, 1.0, 1.0]


def test_acceptance_of_another_model_falls_with_depth():
    torch.set_num_threads(1)
    # a hand-built continuation the drafter proposes correctly only where it does
    continuation = Continuation([5, 6, 7], [9, 10, 11, 12, 13])
    drafter = _tiny(1, 1)
    predictions = drafter(input_ids=torch.tensor([[5, 6, 7, 9, 10, 11, 12]])).logits.argmax(-1)[0, 2:].tolist()
    matches = [p == t for p, t in zip(predictions, continuation.completion, strict=True)]
    rates = acceptance_by_position(drafter, [continuation], PAD, depth=2)
    assert rates[0] == sum(matches) / 5
    assert rates[1] == sum(a and b for a, b in zip(matches[:-1], matches[1:], strict=True)) / 4
    assert rates[1] <= rates[0]


def test_one_distillation_step_lowers_the_loss_on_its_batch(continuations):
    torch.set_num_threads(1)
    target, drafter = _tiny(0, 2), _tiny(1, 1).train()
    optimizer = torch.optim.AdamW(drafter.parameters(), lr=1e-2)
    autocast = torch.autocast("cpu", enabled=False)
    first = distill_step(drafter, target, continuations, PAD, autocast)
    assert torch.isfinite(first)
    optimizer.zero_grad()
    first.backward()
    optimizer.step()
    assert distill_step(drafter, target, continuations, PAD, autocast).item() < first.item()
