"""Image preparation: the CLIP preparation equals transformers' CLIP image processor (Pillow backend)
on PNG, JPEG and WebP images of several shapes; bad image inputs are errors naming the field."""

import base64
import io

import numpy as np
import pytest

from helios.frontend.errors import RequestFieldError
from helios.frontend.image_preparation import (
    ClipPreparation,
    ImageTooLarge,
    UndecodableImage,
    UnsupportedImageUrl,
    data_url_bytes,
    image_digest,
)

PIL = pytest.importorskip("PIL.Image")


def _image_bytes(width: int, height: int, fmt: str, seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    PIL.fromarray(pixels).save(buffer, format=fmt, **({"lossless": True} if fmt == "WEBP" else {}))
    return buffer.getvalue()


@pytest.mark.parametrize(("width", "height", "fmt"), [(40, 31, "PNG"), (23, 57, "JPEG"), (28, 28, "WEBP"),
                                                       (90, 64, "PNG")])
def test_clip_preparation_equals_the_transformers_clip_image_processor(width, height, fmt):
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    data = _image_bytes(width, height, fmt)
    preparation = ClipPreparation(image_size=28, patch_size=7)
    prepared = preparation.prepare(data, "messages.0.content.1.image_url")
    processor = CLIPImageProcessorPil(size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28})
    expected = processor(PIL.open(io.BytesIO(data)), return_tensors="np")["pixel_values"][0]
    assert prepared.pixels.shape == expected.shape == (3, 28, 28)
    np.testing.assert_allclose(prepared.pixels, expected, rtol=0, atol=1e-6)
    # patch (i, j) is row 1 + 4i + j, in (channel, row, column) order; row 0 is the class row
    assert prepared.patches.shape == (17, 3 * 7 * 7) and not prepared.patches[0].any()
    np.testing.assert_array_equal(prepared.patches[1 + 4 * 2 + 3], prepared.pixels[:, 14:21, 21:28].reshape(-1))
    assert prepared.digest == image_digest(data) != image_digest(_image_bytes(width, height, fmt, seed=1))


def test_data_urls_of_the_accepted_media_types_decode_and_others_are_refused_naming_the_field():
    data = _image_bytes(8, 8, "PNG")
    url = "data:image/png;base64," + base64.b64encode(data).decode()
    assert data_url_bytes(url, "image_url") == data
    for bad, message in (("https://example.invalid/cat.png", "remote image URLs are not fetched"),
                         ("data:text/plain;base64,aGk=", "media type 'text/plain'"),
                         ("data:image/png,rawbytes", "base64 encoded"),
                         ("data:image/png;base64,@@@", "not valid base64")):
        with pytest.raises(UnsupportedImageUrl, match=message) as caught:
            data_url_bytes(bad, "messages.0.content.1.image_url.url")
        assert caught.value.param == "messages.0.content.1.image_url.url"


def test_undecodable_and_oversized_images_are_errors_naming_the_field(monkeypatch):
    preparation = ClipPreparation(image_size=28, patch_size=7)
    with pytest.raises(UndecodableImage) as caught:
        preparation.prepare(b"\x89PNG\r\n\x1a\nnot really", "messages.1.content.0.image_url")
    assert caught.value.param == "messages.1.content.0.image_url" and isinstance(caught.value, RequestFieldError)
    gif = io.BytesIO()
    PIL.new("RGB", (4, 4)).save(gif, format="GIF")
    with pytest.raises(UndecodableImage, match="GIF is not PNG, JPEG or WebP"):
        preparation.prepare(gif.getvalue(), "image")
    import helios.frontend.image_preparation as module

    monkeypatch.setattr(module, "MAX_DECODED_PIXELS", 100)
    with pytest.raises(ImageTooLarge, match="11x10 pixels exceed the 100"):
        preparation.prepare(_image_bytes(11, 10, "PNG"), "image")
