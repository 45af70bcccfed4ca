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
