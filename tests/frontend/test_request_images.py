"""`RequestImages` (host only): a request's image parts read, prepared and laid out by the core's
image selectors; each refusal a 400 naming its field. Remote URLs are read only when allowed (here
from a loopback server started by the test: nothing outside the machine is fetched)."""

from __future__ import annotations

import base64
import http.server
import io
import threading

import numpy as np
import pytest

from helios.frontend.errors import ImagesNotServed, RequestFieldError
from helios.frontend.image_layout import ImageCountMismatch, TooManyImages
from helios.frontend.image_preparation import CLIP_MEAN, CLIP_STD, ImageTooLarge, UnsupportedImageUrl
from helios.frontend.request_images import ImagePart, RemoteImageUnavailable, RequestImages
from helios.proto import contract_pb2 as C

Image = pytest.importorskip("PIL.Image")
SENTINEL = 61


def _frontend() -> C.FrontendContract:
    return C.FrontendContract(
        image_preparation=C.IMAGE_PREPARATION_CLIP, image_layout=C.IMAGE_LAYOUT_FEATURE_SPAN,
        image_settings=C.ImageSettings(image_size=28, patch_size=7, mean=CLIP_MEAN, std=CLIP_STD),
        image_token_layout=C.ImageTokenLayout(feature_ids=[SENTINEL]))


def _vision(capacity: int = 16) -> C.VisionContract:
    return C.VisionContract(feature_slots=2, features_per_window=16, patches_per_feature=1,
                            patch_capacities=[capacity])


def _png(seed: int = 0) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.random.default_rng(seed).integers(0, 256, (20, 33, 3), dtype=np.uint8)).save(buffer, "PNG")
    return buffer.getvalue()


def _part(data: bytes, index: int = 0) -> ImagePart:
    return ImagePart(f"messages.0.content.{index}", "data:image/png;base64," + base64.b64encode(data).decode())


def test_parts_are_prepared_and_laid_out_into_spans_with_their_digests():
    images = RequestImages(_frontend(), _vision())
    prepared = images.prepare([_part(_png(1)), _part(_png(2), 1)])
    tokens, request_images = images.lay_out([1, SENTINEL, 2, SENTINEL, 3], prepared, "messages")
    assert len(tokens) == 3 + 2 * 16 and tokens.count(SENTINEL) == 32
    first, second = request_images
    assert (first.start, second.start, first.features) == (1, 18, 16) and first.digest != second.digest
    assert first.feature_offsets.tolist() == [-1, *range(16)]  # the class row is no feature
    assert dict(first.tensors)["patches"].shape == (17, 3 * 7 * 7)
    with pytest.raises(ImageCountMismatch) as caught:  # the placeholders must number the images
        images.lay_out([1, SENTINEL, 2], prepared, "messages")
    assert caught.value.param == "messages"
    with pytest.raises(ImageCountMismatch):  # a text prompt holding the placeholder on a vision core
        images.lay_out([1, SENTINEL], [], "prompt")


@pytest.mark.parametrize("case", ["text-only core", "too many", "past the patch capacity", "undecodable",
                                  "remote", "media type"])
def test_each_bad_image_names_its_part(case):
    frontend, vision, parts = _frontend(), _vision(), [_part(_png())]
    expected, param = RequestFieldError, "messages.0.content.0"
    if case == "text-only core":
        frontend, vision, expected = C.FrontendContract(), None, ImagesNotServed
    elif case == "too many":
        parts, expected, param = [_part(_png(), i) for i in range(3)], TooManyImages, "messages.0.content.2"
    elif case == "past the patch capacity":  # a core whose captured capacity is below the preparation's
        vision, expected = _vision(capacity=9), ImageTooLarge
    elif case == "undecodable":
        parts = [_part(b"GIF89a not really")]
    elif case == "remote":
        parts, expected = [ImagePart(param, "https://example.invalid/a.png")], UnsupportedImageUrl
    else:
        parts, expected = [ImagePart(param, "data:image/gif;base64,R0lGOD")], UnsupportedImageUrl
    with pytest.raises(expected) as caught:
        RequestImages(frontend, vision).prepare(parts)
    assert caught.value.param == param


def test_remote_urls_are_read_only_when_allowed():
    data = _png(3)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (the handler's protocol)
            if self.path != "/a.png":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        allowed = RequestImages(_frontend(), _vision(), allow_remote=True)
        (remote,) = allowed.prepare([ImagePart("messages.0.content.0", base + "/a.png")])
        (inline,) = allowed.prepare([_part(data)])
        assert remote.digest == inline.digest and np.array_equal(remote.patches, inline.patches)
        with pytest.raises(RemoteImageUnavailable) as caught:
            allowed.prepare([ImagePart("messages.1.content.0", base + "/missing.png")])
        assert caught.value.param == "messages.1.content.0"
        with pytest.raises(UnsupportedImageUrl):  # not allowed: never fetched
            RequestImages(_frontend(), _vision()).prepare([ImagePart("messages.0.content.0", base + "/a.png")])
    finally:
        server.shutdown()
