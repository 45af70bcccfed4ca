"""Image preparation (host side): request image bytes become the pixel patches a vision program reads.

An image preparation is a reusable image algorithm, never a model identity: the specification's
image-preparation selector names one, and its parameters are the core's image settings. One is
implemented:

    ClipPreparation   decode (Pillow, RGB) -> resize the shortest edge to the image size (bicubic)
                      -> center crop to image size x image size -> rescale to [0, 1] -> normalise by the
                      per-channel mean and std -> patchify into [1 + patches, C * p * p] rows, row 0
                      the class token's all-zero row, patch (i, j) at row 1 + i * grid + j holding its
                      pixels in (channel, row, column) order: the order of a [H, C, p, p] convolution
                      filter read as a [H, C*p*p] product weight.

This is what transformers' CLIP image processor (its Pillow backend) computes, step for step, so
the patches of one image equal its `pixel_values` patchified (tests/frontend/test_image_preparation.py).
Request images arrive as `data:` URLs (`data_url_bytes`); every failure is a `RequestFieldError`
naming the field (an HTTP 400), never a traceback.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
from dataclasses import dataclass

import numpy as np

from helios.frontend.errors import RequestFieldError
from helios.proto import contract_pb2 as C

MEDIA_TYPES = ("image/png", "image/jpeg", "image/webp")
MAX_DECODED_PIXELS = 4096 * 4096  # an image past this is refused before it is decoded
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


class UndecodableImage(RequestFieldError):
    """The image bytes are not a PNG, JPEG or WebP image Pillow can decode."""


class ImageTooLarge(RequestFieldError):
    """The image is larger than the preparation accepts."""


class UnsupportedImageUrl(RequestFieldError):
    """The image URL is not a base64 `data:` URL of an accepted media type."""


def data_url_bytes(url: str, param: str) -> bytes:
    """The bytes of a `data:image/png;base64,...` URL (PNG, JPEG or WebP), or UnsupportedImageUrl."""
    if not url.startswith("data:"):
        raise UnsupportedImageUrl(param, "only data: URLs are accepted (remote image URLs are not fetched)")
    header, comma, payload = url[5:].partition(",")
    if not comma:
        raise UnsupportedImageUrl(param, "a data: URL needs a ',' before its payload")
    media, _, encoding = header.partition(";")
    if media.lower() not in MEDIA_TYPES:
        raise UnsupportedImageUrl(param, f"media type {media or '(none)'!r} is not one of {list(MEDIA_TYPES)}")
    if encoding.lower() != "base64":
        raise UnsupportedImageUrl(param, "the data: URL must be base64 encoded (';base64,')")
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise UnsupportedImageUrl(param, "the data: URL's payload is not valid base64") from None


def image_digest(data: bytes) -> bytes:
    """The SHA-256 of the image bytes: what a prefix key holds for the image's span."""
    return hashlib.sha256(data).digest()


def decode_image(data: bytes, param: str):
    """The RGB Pillow image of PNG, JPEG or WebP bytes, or UndecodableImage / ImageTooLarge."""
    from PIL import Image, UnidentifiedImageError

    try:
        image = Image.open(io.BytesIO(data))
        if image.format not in ("PNG", "JPEG", "WEBP"):
            raise UndecodableImage(param, f"image format {image.format} is not PNG, JPEG or WebP")
        width, height = image.size
        if width * height > MAX_DECODED_PIXELS:
            raise ImageTooLarge(param, f"{width}x{height} pixels exceed the {MAX_DECODED_PIXELS} a request may send")
        image.load()
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as error:
        raise UndecodableImage(param, f"the image cannot be decoded ({type(error).__name__})") from None
    return image.convert("RGB")


@dataclass(frozen=True, slots=True)
class PreparedImage:
    pixels: np.ndarray  # [C, S, S] f32, normalised
    patches: np.ndarray  # [1 + patches, C * p * p] f32, row 0 the class row
    digest: bytes


@dataclass(frozen=True, slots=True)
class ClipPreparation:
    """The CLIP preparation (module docstring) at one image size and patch size."""

    image_size: int
    patch_size: int
    mean: tuple[float, ...] = CLIP_MEAN
    std: tuple[float, ...] = CLIP_STD

    @property
    def grid(self) -> int:
        return self.image_size // self.patch_size

    def pixels(self, image) -> np.ndarray:
        """[3, S, S] f32: resized, center cropped, rescaled and normalised."""
        from PIL import Image

        size = self.image_size
        width, height = image.size
        short, long = min(width, height), max(width, height)
        new_long = int(size * long / short)
        target = (size, new_long) if width <= height else (new_long, size)  # (width, height)
        resized = np.asarray(image.resize(target, resample=Image.Resampling.BICUBIC), np.uint8)  # [h, w, 3]
        top, left = (resized.shape[0] - size) // 2, (resized.shape[1] - size) // 2
        cropped = resized[top:top + size, left:left + size].transpose(2, 0, 1)
        scaled = (cropped.astype(np.float64) * (1 / 255)).astype(np.float32)
        mean = np.asarray(self.mean, np.float32)[:, None, None]
        std = np.asarray(self.std, np.float32)[:, None, None]
        return ((scaled - mean) / std).astype(np.float32)

    def patchify(self, pixels: np.ndarray) -> np.ndarray:
        """[1 + grid^2, C * p * p]: the class row (zeros), then each patch in row-major order."""
        channels, p, grid = pixels.shape[0], self.patch_size, self.grid
        blocks = pixels.reshape(channels, grid, p, grid, p).transpose(1, 3, 0, 2, 4)
        rows = np.zeros((1 + grid * grid, channels * p * p), np.float32)
        rows[1:] = blocks.reshape(grid * grid, channels * p * p)
        return rows

    def prepare(self, data: bytes, param: str) -> PreparedImage:
        """Decode, resize, normalise and patchify one request image (errors name `param`)."""
        pixels = self.pixels(decode_image(data, param))
        return PreparedImage(pixels, self.patchify(pixels), image_digest(data))


def preparation_for(frontend: C.FrontendContract) -> ClipPreparation | None:
    """The implementation the core's image-preparation selector names, built from its image settings
    (validated with the contract); None for IMAGE_PREPARATION_NONE (or unset: a core without images)."""
    if frontend.image_preparation == C.IMAGE_PREPARATION_CLIP:
        s = frontend.image_settings
        return ClipPreparation(s.image_size, s.patch_size, tuple(s.mean), tuple(s.std))
    if frontend.image_preparation in (C.IMAGE_PREPARATION_NONE, C.IMAGE_PREPARATION_UNSPECIFIED):
        return None
    raise ValueError(f"image preparation {frontend.image_preparation} has no implementation")
