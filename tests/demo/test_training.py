"""Tokenizer training and the training script's data plumbing: deterministic, completion-only
targets, every example used once per epoch, a schedule that warms up and decays."""

from __future__ import annotations

import numpy as np
import pytest

from helios.demo.corpus import training_texts
from helios.demo.tokenizer import MARKUP_TOKENS, SPECIAL_TOKENS, train_tokenizer


def test_tokenizer_training_is_deterministic_and_keeps_markers_whole():
    texts = training_texts(0, 0, 300)
    first, second = train_tokenizer(texts, vocab_size=600), train_tokenizer(texts, vocab_size=600)
    assert first.to_str() == second.to_str()
    assert [first.token_to_id(token) for token in SPECIAL_TOKENS] == [0, 1, 2]
    for token in (*SPECIAL_TOKENS, *MARKUP_TOKENS):
        assert len(first.encode(token).ids) == 1
    # every digit is a token of its own, so numbers are digit sequences
    assert first.encode("Ones: 47 + 38").tokens[-6:] == ["4", "7", "Ġ+", "Ġ", "3", "8"]


def test_batches_train_on_completions_only():
    train = pytest.importorskip("helios.demo.train")
    corpus = train.EncodedCorpus(
        tokens=np.array([5, 6, 7, 8, 9, 10, 11, 12, 13], dtype=np.int16),
        offsets=np.array([0, 5, 9]),
        prompt_lengths=np.array([3, 2], dtype=np.int32),
    )
    inputs, targets = train.make_batch(np.array([0, 1]), corpus, pad_id=0)
    assert inputs.tolist() == [[5, 6, 7, 8], [10, 11, 12, 0]]
    # sequence 0: prompt 5 6 7, completion 8 9; sequence 1: prompt 10 11, completion 12 13
    assert targets.tolist() == [[-100, -100, 8, 9], [-100, 12, 13, -100]]


def test_epochs_use_every_full_batch_once_and_the_schedule_decays():
    train = pytest.importorskip("helios.demo.train")
    lengths = np.random.default_rng(0).integers(10, 500, size=1000)
    batches = train.batch_order(lengths, 8, np.random.default_rng(1))
    used = np.concatenate(batches)
    assert len(used) == len(set(used.tolist())) == 1000
    rates = [train.learning_rate(1e-3, 100, 1000, step) for step in range(1000)]
    assert rates[0] < rates[50] < rates[99] == pytest.approx(1e-3)
    assert rates[999] == pytest.approx(1e-4, rel=1e-3) and rates[500] > rates[900]


def test_training_plans_are_validated():
    train = pytest.importorskip("helios.demo.train")
    with pytest.raises(train.InvalidTrainingPlan, match="reserved"):
        train.TrainingPlan(seed=1)
    with pytest.raises(train.InvalidTrainingPlan, match="minutes"):
        train.TrainingPlan(minutes=0)
    with pytest.raises(train.InvalidTrainingPlan, match="drafter_learning_rate"):
        train.TrainingPlan(drafter_learning_rate=2.0)
    with pytest.raises(train.InvalidTrainingPlan, match="heads"):
        train.ModelShape(hidden_size=100, num_heads=3)


def test_streamed_encoding_equals_encoding_in_one_process(tmp_path, monkeypatch):
    """Two workers, a first wave of FIRST_WAVE slices each and the rest joined later: the same corpus,
    in the same order, as one process encoding every slice."""
    train = pytest.importorskip("helios.demo.train")
    from helios.demo.corpus import training_texts
    from helios.demo.tokenizer import write_tokenizer_files

    write_tokenizer_files(train_tokenizer(training_texts(0, 0, 300), vocab_size=600), tmp_path)
    monkeypatch.setattr(train, "SLICE", 40)  # small slices: the tasks carry their ranges to the workers
    plan = train.TrainingPlan(examples=train.SLICE * (2 * train.FIRST_WAVE + 1) + 7)
    alone = train.CorpusEncoding(plan, tmp_path / "tokenizer.json", workers=1)
    assert not alone.pending
    streamed = train.CorpusEncoding(plan, tmp_path / "tokenizer.json", workers=2)
    first = streamed.first
    assert len(first.lengths) < len(alone.first.lengths)
    rest = None
    while rest is None:
        rest = streamed.rest()
    assert not streamed.pending and streamed.rest() is None
    joined = train.extended(first, rest)
    for field in ("tokens", "offsets", "prompt_lengths"):
        assert np.array_equal(getattr(joined, field), getattr(alone.first, field)), field


def test_the_completion_loss_computes_logits_at_completion_rows_only():
    """The loss over the selected rows equals cross-entropy over every position with the prompt and
    padding ignored, and the lm_head product sees only the completion rows."""
    train = pytest.importorskip("helios.demo.train")
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    model = train.build_model(train.ModelShape(hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2,
                                               num_kv_heads=1), vocab_size=50, pad_id=0, eos_id=2)
    corpus = train.EncodedCorpus(tokens=np.array([5, 6, 7, 8, 9, 10, 11, 12, 13], dtype=np.int16),
                                 offsets=np.array([0, 5, 9]), prompt_lengths=np.array([3, 2], dtype=np.int32))
    inputs, targets = train.make_batch(np.array([0, 1]), corpus, pad_id=0)
    seen = []
    model.lm_head.register_forward_hook(lambda module, args, out: seen.append(args[0].shape[0]))
    autocast = torch.autocast("cpu", enabled=False)
    loss = train._completion_loss(model, inputs, targets, autocast)
    full = model(input_ids=inputs).logits
    expected = F.cross_entropy(full.view(-1, full.shape[-1]), targets.view(-1), ignore_index=-100)
    assert seen[0] == int((targets != -100).sum()) == 4
    assert torch.allclose(loss, expected, atol=1e-6)


def test_the_compiled_completion_loss_equals_the_eager_one_over_varying_lengths():
    """`--compile`: the losses' forward and backward through torch.compile (the aot_eager backend here:
    the same graph capture and autograd as inductor, without code generation) give the eager loss and
    gradients, for batches of several lengths; an unknown backend is refused by the plan."""
    train = pytest.importorskip("helios.demo.train")
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = train.build_model(train.ModelShape(hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                                               num_kv_heads=2), 200, 0, 1)
    autocast = torch.autocast("cpu", enabled=False)
    compiled = train.completion_loss_function("aot_eager", autocast)
    eager = train.completion_loss_function("", autocast)
    for length in (21, 34):
        inputs = torch.randint(2, 200, (3, length))
        targets = torch.full((3, length), -100)
        targets[:, length // 2:] = inputs[:, length // 2:]
        rows = train.completion_rows(targets)
        results = []
        for loss_of in (compiled, eager):
            model.zero_grad()
            loss = loss_of(model, inputs, targets, rows)
            loss.backward()
            results.append((loss.detach(), [parameter.grad.clone() for parameter in model.parameters()]))
        torch.testing.assert_close(results[0][0], results[1][0])
        for got, want in zip(results[0][1], results[1][1], strict=True):
            torch.testing.assert_close(got, want)
    with pytest.raises(train.InvalidTrainingPlan, match="compile backend 'fast'"):
        train.TrainingPlan(compile="fast")
