"""Vision on a device: the LLaVA encoder and projector at the tower's captured patch capacity, timed
inside its own CUDA graph, and the time to first token of one chat prompt carrying a 448x448 image
through the production runtime (image preparation, the encoding PREFILL round, the prompt's other
chunks). Prints one JSON object.

    python bench/vision.py --checkpoint DIR [--device cuda] [--repeats 20]   # a GPU measurement
    python bench/vision.py --shape clip-l-448                                # the same, random weights
    python bench/vision.py --smoke                                           # CPU, the tests' tiny LLaVA

`--shape clip-l-448` writes a random checkpoint instead: a CLIP ViT-L/14 tower at 448x448 (1,024
patches, 24 layers of width 1024) and its projector over a 28-layer Llama-family text model of the
Qwen3-0.6B widths (the tests' small vocabulary). The checkpoint is a Hugging Face `llava` directory, prepared here (bf16 on a GPU, fp32 on a CPU,
16-token pages, prefill capacities 256 and 1024). Each TTFT send carries another image (a new
digest), so no request reuses another's image pages. `--smoke` checks the path, not the speed
(Triton interpreted on a CPU).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


# --shape: (CLIP vision config fields, Llama text config fields) over the tests' tiny LLaVA's.
SHAPES = {
    "clip-l-448": (dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24, num_attention_heads=16,
                        image_size=448, patch_size=14, projection_dim=768),
                   dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                        num_key_value_heads=8, head_dim=64, max_position_embeddings=4096)),
}


def _png_url(size: int, seed: int) -> str:
    import numpy as np
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)).save(buffer, "PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def encoder_seconds(directory: Path, device: str, dtype: str, repeats: int) -> dict:
    """The encoder and projector of one image (the vision program alone) per launch: CUDA-graph
    replays timed with events on a GPU, eager runs on a CPU."""
    import torch

    from helios.frontend.image_preparation import ClipPreparation
    from helios.ignition.reader import read_checkpoint
    from helios.ignition.recipes.llava import read_llava
    from helios.ignition.recipes.llava_vision import vision_program, vision_resource, vision_resource_names
    from helios.production.buffers import ScratchArena
    from helios.production.lowering import lower_program
    from helios.program.validate import validate_program

    llava = read_llava(read_checkpoint(directory))
    tower = llava.tower
    torch_dtype = torch.bfloat16 if dtype == "bf16" else torch.float32
    target = torch.device(device)
    weights = {name: torch.from_numpy(vision_resource(tower, name, llava.vision.float32)).to(target, torch_dtype)
               for name in vision_resource_names(tower)}
    program = vision_program(tower, feature_slots=1, dtype="bf16" if dtype == "bf16" else "f32")
    operators = validate_program(program)
    patches = ClipPreparation(tower.image_size, tower.patch_size).prepare(
        base64.b64decode(_png_url(448, 0).split(",", 1)[1]), "image").patches
    rows = torch.full((tower.rows,), -1, dtype=torch.int32)
    rows[tower.rows - tower.features:] = torch.arange(tower.features, dtype=torch.int32)
    buffers = {"image_patches": torch.from_numpy(patches).to(target, torch_dtype),
               "patch_group": torch.zeros(tower.rows, dtype=torch.int32, device=target),
               "image_feature_rows": rows.to(target),
               "image_features": torch.zeros((tower.features, tower.text_hidden), dtype=torch_dtype, device=target)}
    plan = lower_program(program, operators, weights=weights, buffers=buffers, arena=ScratchArena(target),
                         device=target)
    times = []
    if target.type == "cuda":
        from helios.production.capture import GraphCapture

        capture = GraphCapture(target)
        capture.capture({"vision": plan})
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            capture.replay("vision")
            end.record()
            torch.cuda.synchronize(target)
            times.append(start.elapsed_time(end) / 1000)
    else:
        for _ in range(repeats):
            began = time.perf_counter()
            plan.run()
            times.append(time.perf_counter() - began)
    return {"patch_capacity": tower.patches, "rows": tower.rows, "layers": tower.layers,
            "encoder_s_median": statistics.median(times), "encoder_s_min": min(times)}


def ttft_seconds(core, device: str, repeats: int, image_size: int = 448) -> dict:
    """Time to first token of a chat prompt with one `image_size` image (a new image each send)."""
    from conformance.e2e import preparer_for
    from helios.frontend.openai_request import parse_chat_request
    from helios.production import load_runtime
    from helios.runtime.events import Finished, TokenEvent
    from helios.runtime.limits import AdmissionLimits
    from helios.runtime.options import RuntimeOptions

    preparer = preparer_for(core)
    runtime = load_runtime(core, RuntimeOptions(AdmissionLimits(max_active=1, queue_capacity=2), device=device))
    runtime.start()

    async def send(request) -> float:
        began, first = time.perf_counter(), None
        async for event in runtime.submit(request):
            if isinstance(event, TokenEvent):
                first = first or time.perf_counter()
            elif not isinstance(event, Finished):
                raise RuntimeError(f"the image request ended with {event}")
        return (first or time.perf_counter()) - began

    times, prompt = [], 0
    try:
        for i in range(repeats + 1):  # the first send warms the host paths and is not counted
            body = {"messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": _png_url(image_size, seed=1 + i)}},
                {"type": "text", "text": "What is in this image?"}]}], "max_tokens": 1, "temperature": 0}
            began = time.perf_counter()
            chat = preparer.prepare_chat(parse_chat_request(body), f"ttft-{i}")  # decode, prepare, lay out
            prepared = time.perf_counter() - began
            prompt = len(chat.runtime_request.generation.prompt_token_ids)
            ttft = prepared + asyncio.run(send(chat.runtime_request))
            if i:
                times.append(ttft)
    finally:
        runtime.shutdown()
    return {"image_pixels": f"{image_size}x{image_size}", "prompt_tokens": prompt,
            "ttft_s_median": statistics.median(times), "ttft_s_min": min(times)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", help="a Hugging Face llava checkpoint directory")
    parser.add_argument("--smoke", action="store_true", help="CPU, the tests' tiny LLaVA")
    parser.add_argument("--shape", choices=sorted(SHAPES), help="a random checkpoint of this shape instead of --checkpoint")
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda when present)")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    if not args.smoke and not args.checkpoint and not args.shape:
        parser.error("give --checkpoint DIR, --shape or --smoke")
    import os

    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from helios.ignition.prepare import PreparationOptions, prepare_checkpoint

    with tempfile.TemporaryDirectory() as scratch:
        if args.smoke:
            from tests.fixtures.checkpoints import make_llava_checkpoint

            directory = make_llava_checkpoint(Path(scratch) / "tiny-llava")
            options = PreparationOptions(dtype="fp32", page_tokens=4, batch_capacities=(1,), prefill_capacities=(64,),
                                         context_tokens=96)
            repeats = min(args.repeats, 2)
        else:
            if args.shape:
                from tests.fixtures.checkpoints import make_llava_checkpoint

                vision_shape, text_shape = SHAPES[args.shape]
                began = time.perf_counter()
                directory = make_llava_checkpoint(Path(scratch) / args.shape, vision_shape=vision_shape,
                                                  text_shape=text_shape)
                print(f"{args.shape}: random checkpoint written in {time.perf_counter() - began:.1f}s", file=sys.stderr)
            else:
                directory = Path(args.checkpoint)
            options = PreparationOptions(dtype="bf16" if device.startswith("cuda") else "fp32", page_tokens=16,
                                         batch_capacities=(1, 2, 4), prefill_capacities=(256, 1024))
            repeats = args.repeats
        core = prepare_checkpoint(directory, options)
        result = {"device": torch.cuda.get_device_name() if device.startswith("cuda") else "cpu",
                  "dtype": options.dtype, **encoder_seconds(directory, device, options.dtype, repeats)}
        print(json.dumps(result), file=sys.stderr, flush=True)  # the encoder's figures, should the TTFT part fail
        result.update(ttft_seconds(core, device, repeats))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
