"""An image + text prompt through the LLaVA programs: the Llama-family prefill program (with an image
encoder and image inputs) encodes the image into its feature slot, reads the features at the
sentinel rows, and the decode program continues; the runtime's packer fills every input from the
lanes (the image's layout tensors, feature rows and context indices included). The logits equal transformers' LlavaForConditionalGeneration
within 1e-4 relative (fp32) in the reference interpreter and in the production lowering, and 32
greedy tokens equal transformers' greedy generation."""

import io
import tempfile
from pathlib import Path

import numpy as np
import pytest

from helios.frontend.image_layout import FeatureSpanLayout, feature_rows
from helios.frontend.image_preparation import ClipPreparation
from helios.ignition.preparation.contract import (
    Declarations,
    TextGeometry,
    completion_layout,
    paged_history,
)
from helios.ignition.reader import read_checkpoint
from helios.ignition.recipes import llama_family
from helios.ignition.recipes.llava_vision import (
    read_vision_tower,
    vision_resources,
    zero_sentinel_rows,
)
from helios.program.validate import validate_program
from helios.proto import contract_pb2 as C
from helios.proto import manifest_pb2 as M
from helios.reference.interpreter import execute
from helios.runtime.lanes import ImageSubmission, LaneInput
from helios.runtime.packing import GraphPacking
from helios.runtime.request import SamplingParams
from tests.fixtures.checkpoints import build_tokenizer

torch = pytest.importorskip("torch")
PIL = pytest.importorskip("PIL.Image")
IMAGE_TOKEN = 299
SLOTS, PAGES, PAGE_TOKENS = 1, 16, 4


def _model():
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration

    vision = CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                              image_size=28, patch_size=7, projection_dim=16)
    text = LlamaConfig(hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, vocab_size=300, max_position_embeddings=128)
    torch.manual_seed(0)
    model = LlavaForConditionalGeneration(LlavaConfig(vision_config=vision, text_config=text,
                                                      image_token_id=IMAGE_TOKEN)).eval()
    with torch.no_grad():  # sharper logits than the init's, so greedy ids do not ride on near-ties
        model.lm_head.weight.mul_(20.0)
        model.model.multi_modal_projector.linear_2.weight.mul_(20.0)
    return model


def _text_checkpoint(model, directory):
    """The LLaVA's text model as a Llama checkpoint directory (what the text recipe reads)."""
    from transformers import LlamaForCausalLM

    llama = LlamaForCausalLM(model.config.text_config)
    state = {k.replace("model.language_model.", "model."): v for k, v in model.state_dict().items()
             if k.startswith("model.language_model.") or k == "lm_head.weight"}
    llama.load_state_dict(state)
    llama.config.eos_token_id = 0
    llama.save_pretrained(directory)
    build_tokenizer("llama").save(str(Path(directory) / "tokenizer.json"))
    return read_checkpoint(directory)


def _buffers(decl: Declarations) -> dict[str, np.ndarray]:
    out = {}
    for name, d in decl.buffers.items():
        shape = [PAGES if (i == 0 and e == 0) else e for i, e in enumerate(d.shape)]
        out[name] = np.zeros(shape, np.int32 if d.dtype == M.DTYPE_I32 else
                             np.int64 if d.dtype == M.DTYPE_I64 else np.float32)
    return out


def test_an_image_prompt_gives_transformers_logits_and_greedy_tokens():
    from helios.production.buffers import ScratchArena
    from helios.production.lowering import lower_program

    model = _model()
    tower = read_vision_tower(model.config.to_dict())
    with tempfile.TemporaryDirectory() as directory:
        checkpoint = _text_checkpoint(model, directory)
    cfg = llama_family.parse_config(checkpoint)
    geometry = TextGeometry(slots=SLOTS, page_tokens=PAGE_TOKENS, max_pages=PAGES, sampled_tokens=300, logits_width=300)
    decl = Declarations()
    completion_layout(decl, geometry, width=1, speculative=False)
    histories = [paged_history(decl, geometry, layer=i, kv_heads=cfg.kv_heads, head_dim=cfg.head_dim,
                               dtype=M.DTYPE_F32) for i in range(cfg.layers)]
    layout = FeatureSpanLayout(IMAGE_TOKEN, IMAGE_TOKEN, tower.features)
    buffer = io.BytesIO()
    PIL.fromarray(np.random.default_rng(5).integers(0, 256, (30, 36, 3), dtype=np.uint8)).save(buffer, format="PNG")
    prepared = ClipPreparation(tower.image_size, tower.patch_size).prepare(buffer.getvalue(), "image")
    laid = layout.lay_out([1, 17, IMAGE_TOKEN, 42, 7, 99], [prepared.digest], "messages")
    prompt = len(laid.tokens)
    prefill, bindings, _ = llama_family.text_program(
        cfg, geometry, decl, graph="prefill", packed_tokens=prompt, weight_dtype="f32", histories=histories,
        pending_token="host", image_store_rows=SLOTS * tower.features, encoder=tower)
    sources = {b.source for b in bindings}
    assert {C.VALUE_SOURCE_IMAGE_CONTEXT_INDICES, C.VALUE_SOURCE_IMAGE_FEATURE_INDICES,
            C.VALUE_SOURCE_IMAGE_TENSOR} <= sources
    decode, decode_bindings, _ = llama_family.text_program(cfg, geometry, decl, graph="decode", packed_tokens=1,
                                             weight_dtype="f32", histories=histories, pending_token="host")

    stored = {k: v.float().numpy() for k, v in model.state_dict().items()}
    text_weights = {k.replace("model.language_model.", "model."): v for k, v in stored.items()
                    if k.startswith("model.language_model.") or k == "lm_head.weight"}
    text_weights["model.embed_tokens.weight"] = zero_sentinel_rows(text_weights["model.embed_tokens.weight"],
                                                                   (IMAGE_TOKEN,))
    weights = {**text_weights, **vision_resources(tower, stored)}

    with torch.no_grad():
        ids = torch.tensor([laid.tokens])
        pixels = torch.from_numpy(prepared.pixels[None])
        expected = model(input_ids=ids, pixel_values=pixels).logits[0, -1].numpy()
        generated = model.generate(input_ids=ids, pixel_values=pixels, max_new_tokens=32, do_sample=False,
                                   min_new_tokens=32)[0, prompt:].tolist()

    manifest = M.ExecutionManifest(buffers=list(decl.buffers.values()))

    def packing(graph: str, program, graph_bindings, packed: int) -> GraphPacking:
        contract = C.GraphContract(name=graph, operation=C.OPERATION_PREFILL if packed > 1 else C.OPERATION_DECODE,
                                   capacity=C.GraphCapacity(batch_capacity=1, packed_token_capacity=packed),
                                   value_bindings=graph_bindings)
        return GraphPacking.resolve(contract, manifest, physical_rows=SLOTS)

    prefill_packing = packing("prefill", prefill, bindings, prompt)
    decode_packing = packing("decode", decode, decode_bindings, 1)
    image = ImageSubmission(
        tensors=(("patch_group", np.zeros(tower.rows, np.int32)), ("patches", prepared.patches)),
        feature_rows=feature_rows(tower.rows, tower.features, 0, skip_class=True))

    def lane(consumed: int, tokens: tuple[int, ...], prompt_rows: int, **extra) -> LaneInput:
        return LaneInput(slot=0, generation=0, consumed=consumed, tokens=tokens, prompt_tokens_in_round=prompt_rows,
                         samples=True, page_ids=tuple(range(PAGES)), seed=0, sampling=SamplingParams(temperature=0.0),
                         output_limit=32, eos_ids=(0,), prompt_token_ids=laid.tokens, **extra)

    def run(executor):
        """The prefill (encoding the image first), then 31 decode steps, every input packed from the
        lanes by the runtime's packer; (the prefill's last logits, the 32 greedy ids)."""
        values = _buffers(decl)
        for graph_packing in (prefill_packing, decode_packing):
            graph_packing.initialize(values)
        prefill_packing.pack([lane(0, laid.tokens, prompt, image=image,
                                   image_context=tuple(laid.context_indices([0], tower.features).tolist()))], values)
        env = executor(prefill, values)
        first = np.array(env["logits"][0])
        tokens = [int(np.argmax(first))]
        for step in range(31):
            decode_packing.pack([lane(prompt + step, (tokens[-1],), 0)], values)
            tokens.append(int(np.argmax(executor(decode, values)["logits"][0])))
        return first, tokens

    def reference(program, values):
        return execute(program, values, validate_program(program))

    first, tokens = run(lambda program, values: reference(program, {**values, **weights}))
    relative = np.max(np.abs(first - expected)) / np.max(np.abs(expected))
    assert relative < 1e-4, relative
    assert tokens == generated and len(set(generated)) > 3

    from tests.production.helpers import DEVICE

    arena = ScratchArena(DEVICE)
    resident = {**{llama_family.weight_resource(k): torch.from_numpy(v).to(DEVICE) for k, v in text_weights.items()},
                **{k: torch.from_numpy(v).to(DEVICE) for k, v in vision_resources(tower, stored).items()}}
    plans: dict = {}
    buffers: dict = {}  # one device tensor a buffer, shared by the programs (the cache planes among them)

    def production(program, values):
        """Each program lowered once over device copies of the run's arrays; the host's packing is
        copied in before each run and every buffer back after it (on a CPU the copies are no-ops)."""
        for k, v in values.items():
            if k not in buffers:
                buffers[k] = torch.from_numpy(v).to(DEVICE)
            buffers[k].copy_(torch.from_numpy(v))
        if program.graph not in plans:
            plans[program.graph] = lower_program(program, validate_program(program), weights=resident,
                                                 buffers=buffers, arena=arena, device=DEVICE)
        plan = plans[program.graph]
        plan.run()
        for k, v in values.items():
            v[...] = buffers[k].cpu().numpy()
        return {name: t.cpu().numpy().copy() for name, t in plan.scratch.items() if name == "logits"}

    first, tokens = run(production)
    relative = np.max(np.abs(first - expected)) / np.max(np.abs(expected))
    assert relative < (1e-4 if DEVICE.type == "cpu" else 2e-3), relative  # a GPU's fp32 products may use TF32
    assert tokens == generated
