"""The training form of the demo's Llama computes what the saved Llama computes.

`helios.demo.training_model.TrainingLlama` stacks q, k and v (and gate and up) into one product
each and fuses the norms, for fewer launches a training step; what is saved, evaluated and served
is `LlamaForCausalLM`. Both forms must give the same logits and the same gradients for the same
weights, at every shape the trainer takes (grouped and ungrouped heads), and the weights must map
both ways without loss.
"""

from __future__ import annotations

import pytest
import torch

from helios.demo.train import ModelShape, build_model
from helios.demo.training_model import TrainingLlama, as_hf, from_hf, hf_state_dict

VOCAB, PAD, EOS = 97, 0, 1
SHAPES = {
    "grouped": ModelShape(hidden_size=64, intermediate_size=96, num_layers=2, num_heads=4, num_kv_heads=2),
    "ungrouped": ModelShape(hidden_size=48, intermediate_size=80, num_layers=3, num_heads=3, num_kv_heads=3),
}


def _inputs(seed: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (3, 19), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_both_forms_give_the_same_logits_and_gradients(name):
    torch.manual_seed(7)
    shape = SHAPES[name]
    model = TrainingLlama(shape, VOCAB)
    with torch.no_grad():  # norms away from 1, so a norm weight mapped to the wrong place shows
        for parameter in model.parameters():
            if parameter.dim() == 1:
                parameter.uniform_(0.5, 1.5)
    hf = as_hf(model, build_model(shape, VOCAB, PAD, EOS))
    inputs = _inputs(1)
    ours = model(input_ids=inputs).logits
    theirs = hf(input_ids=inputs).logits
    assert torch.allclose(ours, theirs, atol=1e-5, rtol=1e-4), (ours - theirs).abs().max()
    hidden = model.model(input_ids=inputs).last_hidden_state
    assert torch.allclose(model.lm_head(hidden), ours, atol=1e-6)

    ours.square().mean().backward()
    theirs.square().mean().backward()
    ours_grad = hf_state_dict(_grads(model))
    theirs_grad = {k: p.grad for k, p in hf.named_parameters()}
    assert set(ours_grad) == set(theirs_grad)
    for key, grad in theirs_grad.items():
        assert torch.allclose(ours_grad[key], grad, atol=1e-6, rtol=1e-4), key


def _grads(model: TrainingLlama) -> TrainingLlama:
    """A copy of `model` whose parameters hold `model`'s gradients (read through `hf_state_dict`)."""
    copy = TrainingLlama(model.shape, model.vocab_size)
    with torch.no_grad():
        for target, source in zip(copy.parameters(), model.parameters(), strict=True):
            target.copy_(source.grad)
    return copy


def test_the_weights_map_both_ways_without_loss():
    shape = SHAPES["grouped"]
    hf = build_model(shape, VOCAB, PAD, EOS)
    model = from_hf(hf, shape)
    back = hf_state_dict(model)
    for key, tensor in hf.state_dict().items():
        if key != "lm_head.weight":  # tied: the embedding
            assert torch.equal(back[key], tensor), key
    assert torch.equal(hf.state_dict()["lm_head.weight"], back["model.embed_tokens.weight"])
    inputs = _inputs(2)
    assert torch.allclose(model(input_ids=inputs).logits, hf(input_ids=inputs).logits, atol=1e-5, rtol=1e-4)


def test_the_head_is_the_embedding_and_counted_once():
    model = TrainingLlama(SHAPES["grouped"], VOCAB)
    hf = build_model(SHAPES["grouped"], VOCAB, PAD, EOS)
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in hf.parameters())
    assert "lm_head" not in "".join(model.state_dict())


def test_a_stacked_model_trains_in_the_loop_and_is_saved_as_the_llama_it_computes(tmp_path):
    import numpy as np
    from transformers import AutoModelForCausalLM

    from helios.demo import CHECKPOINT_DIR, train

    torch.manual_seed(3)
    plan = train.TrainingPlan(form="stacked")
    model = train.training_model(plan.form, SHAPES["grouped"], VOCAB, PAD, EOS)
    assert isinstance(model, TrainingLlama)
    optimizer = train._optimizer(model, plan, 1e-2, "cpu")
    corpus = train.EncodedCorpus(tokens=np.arange(5, 35, dtype=np.int16), offsets=np.array([0, 12, 30]),
                                 prompt_lengths=np.array([4, 7], dtype=np.int32))
    inputs, targets = train.make_batch(np.array([0, 1]), corpus, PAD)
    autocast = torch.autocast("cpu", enabled=False)
    losses = []
    for _ in range(3):
        loss = train._completion_loss(model, inputs, targets, autocast)
        train._step(model, optimizer, loss)
        losses.append(loss.item())
    assert losses[-1] < losses[0]

    train.save_checkpoint(model, CHECKPOINT_DIR, tmp_path, PAD, EOS)
    saved = AutoModelForCausalLM.from_pretrained(tmp_path)
    expected = hf_state_dict(model)
    for key, tensor in saved.state_dict().items():
        source = expected["model.embed_tokens.weight" if key == "lm_head.weight" else key]
        assert torch.equal(tensor, source.to(torch.bfloat16)), key
    assert isinstance(model, TrainingLlama) and model.model.embed.weight.dtype == torch.float32  # not converted


def test_a_plan_names_a_known_training_form():
    from helios.demo import train

    with pytest.raises(train.InvalidTrainingPlan, match="form must be one of hf, stacked"):
        train.TrainingPlan(form="fast")


def test_a_stacked_model_is_validated_mid_training_as_the_llama_it_computes(capsys):
    """The loop scores validation prompts twice during a run; a model in the stacked form, which has
    no `generate`, answers them as the Llama it computes, and stays in training mode after."""
    from tokenizers import Tokenizer

    from helios.demo import CHECKPOINT_DIR, train

    tokenizer = Tokenizer.from_file(str(CHECKPOINT_DIR / "tokenizer.json"))
    pad, eos = tokenizer.token_to_id(train.PAD_TOKEN), tokenizer.token_to_id(train.EOS_TOKEN)
    torch.manual_seed(5)
    model = train.training_model("stacked", SHAPES["grouped"], tokenizer.get_vocab_size(), pad, eos)
    train._validate(model, tokenizer, "at step 7", 2, pad, eos)
    assert "validation (2 prompts, held-out phrasings) at step 7:" in capsys.readouterr().out
    assert model.training
