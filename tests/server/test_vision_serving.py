"""Images served end to end on the tiny LLaVA core (fp32, Triton interpreted on a CPU): a chat
request with an image part gives transformers' LlavaForConditionalGeneration logits (within 1e-4
relative) and its 32 greedy tokens in the reference engine; the official openai client streams the
same 32 tokens from an in-process `helios serve` of either runtime while bad image requests, sent
in the middle of that stream, each answer 400 naming the part (the stream is not affected); and
`helios generate --image FILE` gives transformers' tokens."""

from __future__ import annotations

import base64
import dataclasses
import io
import json
import os
import struct
import zlib

import numpy as np
import pytest

from helios.frontend.image_preparation import preparation_for
from helios.frontend.openai_request import parse_chat_request
from helios.runtime.limits import AdmissionLimits
from helios.runtime.options import RuntimeOptions
from helios.runtime.request import SamplingParams
from tests.server.inprocess import serving_state

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():  # the production kernels run in the Triton interpreter on a CPU
    os.environ["TRITON_INTERPRET"] = "1"
openai = pytest.importorskip("openai")
Image = pytest.importorskip("PIL.Image")
TOKENS = 32


def _png(width: int, height: int, seed: int) -> bytes:
    buffer = io.BytesIO()
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def _oversized_png(width: int, height: int) -> bytes:
    """A PNG whose header declares `width` x `height` pixels (past what a request may send): the
    preparation refuses it from its header, before decoding any pixel."""
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + header
    ihdr = struct.pack(">I", len(header)) + chunk + struct.pack(">I", zlib.crc32(chunk))
    data = zlib.compress(b"\0" * 4)
    idat = struct.pack(">I", len(data)) + b"IDAT" + data + struct.pack(">I", zlib.crc32(b"IDAT" + data))
    end = struct.pack(">I", 0) + b"IEND" + struct.pack(">I", zlib.crc32(b"IEND"))
    return b"\x89PNG\r\n\x1a\n" + ihdr + idat + end


def _url(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()


IMAGE = _png(36, 30, seed=5)
QUESTION = "what?"


def _messages(*images: str) -> list[dict]:
    parts = [{"type": "image_url", "image_url": {"url": url}} for url in images]
    return [{"role": "user", "content": [*parts, {"type": "text", "text": QUESTION}]}]


def _preparer(core):
    from conformance.e2e import preparer_for

    return preparer_for(core)


@dataclasses.dataclass
class Oracle:
    """transformers' answers for the image prompt: the prompt the frontend laid out, its last logits
    and 32 greedy tokens."""

    prompt: tuple[int, ...]
    logits: np.ndarray
    tokens: list[int]
    model: object
    pixels: object

    def greedy(self, prompt, count: int) -> list[int]:
        with torch.no_grad():
            ids = torch.tensor([list(prompt)])
            out = self.model.generate(input_ids=ids, pixel_values=self.pixels, max_new_tokens=count,
                                      min_new_tokens=count, do_sample=False)
        return out[0, len(prompt):].tolist()


@pytest.fixture(scope="module")
def oracle(llava_core) -> Oracle:
    from transformers import LlavaForConditionalGeneration

    directory, core = llava_core
    chat = _preparer(core).prepare_chat(parse_chat_request({"messages": _messages(_url(IMAGE))}), "oracle")
    prompt = chat.runtime_request.generation.prompt_token_ids
    model = LlavaForConditionalGeneration.from_pretrained(directory).eval()
    pixels = torch.from_numpy(preparation_for(core.contract.model.frontend).prepare(IMAGE, "image").pixels[None])
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([list(prompt)]), pixel_values=pixels).logits[0, -1].numpy()
    oracle = Oracle(prompt, logits, [], model, pixels)
    oracle.tokens = oracle.greedy(prompt, TOKENS)
    assert len(set(oracle.tokens)) > 3
    return oracle


def test_the_reference_engine_gives_transformers_logits_and_greedy_tokens(llava_core, oracle):
    """The prompt's image span starts inside the first 16-token chunk and ends in the second: the
    first PREFILL round encodes the image, the second reads the rest of its features from the store."""
    from helios.reference.engine import ReferenceEngine

    _, core = llava_core
    chat = _preparer(core).prepare_chat(parse_chat_request({"messages": _messages(_url(IMAGE))}), "r")
    generation = dataclasses.replace(chat.runtime_request.generation, max_tokens=TOKENS, ignore_eos=True,
                                     sampling=SamplingParams(temperature=0.0))
    (image,) = generation.images
    assert image.start // 16 != (image.end - 1) // 16  # the span crosses a chunk boundary
    engine = ReferenceEngine.load(core, keep=("logits",))
    tokens = list(engine.generate(generation))
    last_prefill = max(i for i, name in enumerate(engine.kept_graphs) if name.startswith("prefill"))
    sampled = core.contract.model.vocabulary.sampled_tokens
    logits, expected = engine.kept[last_prefill]["logits"][0, :sampled], oracle.logits[:sampled]
    relative = np.max(np.abs(logits - expected)) / np.max(np.abs(expected))
    assert relative < 1e-4, relative
    assert tokens == oracle.tokens
    assert engine.feature_slots.free == engine.feature_slots.capacity  # released with the request


def _bad_requests(client, served_id: str) -> dict[str, tuple[int, str, str]]:
    """Each bad image request's (status, param, message)."""
    remote = "https://example.invalid/cat.png"  # never fetched: remote URLs are refused without the option
    cases = {
        "undecodable": _messages(_url(b"not an image at all")),
        "too large": _messages(_url(_oversized_png(5000, 5000))),
        "too many": _messages(_url(IMAGE), _url(IMAGE)),
        "remote": _messages(remote),
    }
    out = {}
    for name, messages in cases.items():
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(model=served_id, messages=messages, max_tokens=2)
        body = caught.value.body
        out[name] = (caught.value.status_code, body["param"], body["message"])
    return out


@pytest.mark.parametrize("runtime", ["reference", "production"])
def test_the_openai_client_streams_an_image_answer_while_bad_images_are_refused(llava_core, oracle, runtime):
    from helios.cli.compose import load_runtime
    from helios.server.state import ServerState

    _, core = llava_core
    device = {"device": "cpu"} if runtime == "production" and not torch.cuda.is_available() else {}
    served = load_runtime(core, runtime, RuntimeOptions(AdmissionLimits(max_active=2, queue_capacity=4), **device))
    served_id = core.contract.served_id
    with serving_state(ServerState(runtime=served, preparer=_preparer(core))) as (base, _):
        client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=120)
        stream = client.chat.completions.create(
            model=served_id, messages=_messages(_url(IMAGE)), stream=True, max_tokens=TOKENS, temperature=0,
            extra_body={"return_token_ids": True, "ignore_eos": True})
        chunks = iter(stream)
        received = [next(chunks)]
        bad = _bad_requests(client, served_id)  # while the image request is in flight
        received += list(chunks)
    ids, text = [], []
    for chunk in received:
        if chunk.choices:
            ids += chunk.choices[0].model_extra.get("token_ids") or []
            text.append(chunk.choices[0].delta.content or "")
    assert ids == oracle.tokens and "".join(text)
    assert {name: (status, param) for name, (status, param, _) in bad.items()} == {
        "undecodable": (400, "messages.0.content.0"), "too large": (400, "messages.0.content.0"),
        "too many": (400, "messages.0.content.1"), "remote": (400, "messages.0.content.0")}
    assert "cannot be decoded" in bad["undecodable"][2] and "exceed" in bad["too large"][2]
    assert "image feature slots" in bad["too many"][2] and "not fetched" in bad["remote"][2]


def test_helios_generate_with_an_image_gives_transformers_tokens(llava_core, oracle, tmp_path, capsys):
    from helios.cli import main

    directory, _ = llava_core
    key, core = tmp_path / "publisher.key", tmp_path / "llava.hcore"
    assert main(["keys", "new", "--out", str(key)]) == 0
    assert main(["prepare", str(directory), "--out", str(core), "--publisher", "acme/tests", "--key", str(key),
                 "--dtype", "fp32", "--page-tokens", "4", "--batch-capacities", "1", "--prefill-capacities", "64",
                 "--context-tokens", "96"]) == 0
    image = tmp_path / "image.png"
    image.write_bytes(IMAGE)
    capsys.readouterr()
    assert main(["generate", str(core), "--accept", "acme/tests", "--trust", f"{key}.pub", "--prompt", QUESTION,
                 "--chat", "--image", str(image), "--max-tokens", "8", "--temperature", "0", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert tuple(out["prompt_token_ids"]) == oracle.prompt  # the CLI lays the image out as the server does
    assert out["token_ids"] == oracle.tokens[:len(out["token_ids"])] and out["token_ids"]
    # a file that is no image: one line naming the option
    (tmp_path / "notes.png").write_text("not an image")
    assert main(["generate", str(core), "--accept", "acme/tests", "--trust", f"{key}.pub", "--prompt", QUESTION,
                 "--chat", "--image", str(tmp_path / "notes.png"), "--max-tokens", "2"]) != 0
    err = capsys.readouterr().err
    assert "--image" in err and "cannot be decoded" in err and err.strip().count("\n") == 0
