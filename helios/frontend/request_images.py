"""A request's images, from content parts to what the engines bind (host side, frontend worker).

Owns `RequestImages`: the core's image preparation and layout (its selectors, never a model
identity) applied to one request. Each image part's URL is read (`data:` URLs; remote URLs only when
the server allows them, `fetch_remote_image`), decoded and prepared, checked against the core's
captured patch capacities, and the rendered prompt's placeholders are laid out into sentinel spans
(`helios.frontend.image_layout`), giving the expanded prompt and its `RequestImage`s. Every failure
is a `RequestFieldError` naming the field (an HTTP 400): an undecodable image, an image past the
captured patch capacities, more images than the core's feature slots, images on a text-only core.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass

from helios.frontend.errors import RequestFieldError
from helios.frontend.image_layout import check_image_count, layout_for
from helios.frontend.image_preparation import (
    ImageTooLarge,
    PreparedImage,
    UnsupportedImageUrl,
    data_url_bytes,
    preparation_for,
)
from helios.proto import contract_pb2
from helios.runtime.images import RequestImage

MAX_REMOTE_IMAGE_BYTES = 20 * 1024 * 1024  # a remote image past this is refused while it is read
REMOTE_TIMEOUT_S = 10.0


class RemoteImageUnavailable(RequestFieldError):
    """A remote image URL the server may fetch could not be fetched."""


@dataclass(frozen=True, slots=True)
class ImagePart:
    """One image content part of a request: where it is (`messages.N.content.M`) and its URL."""

    param: str
    url: str


def fetch_remote_image(url: str, param: str, *, max_bytes: int = MAX_REMOTE_IMAGE_BYTES,
                       timeout: float = REMOTE_TIMEOUT_S) -> bytes:
    """The bytes of an http(s) image URL (servers started with remote images allowed), at most
    `max_bytes`, or RemoteImageUnavailable / UnsupportedImageUrl naming `param`."""
    if not url.startswith(("http://", "https://")):
        raise UnsupportedImageUrl(param, "an image URL must be a data: URL or an http(s) URL")
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (http(s) checked above)
            data = response.read(max_bytes + 1)
    except (urllib.error.URLError, OSError, ValueError) as error:
        raise RemoteImageUnavailable(param, f"the image URL could not be fetched ({type(error).__name__})") from None
    if len(data) > max_bytes:
        raise ImageTooLarge(param, f"the image at the URL is larger than {max_bytes} bytes")
    return data


class RequestImages:
    """The image preparation and layout of one core, applied to requests (module docstring)."""

    def __init__(self, frontend: contract_pb2.FrontendContract, vision: contract_pb2.VisionContract | None, *,
                 allow_remote: bool = False) -> None:
        self.preparation = preparation_for(frontend)
        self.layout = layout_for(frontend, vision) if vision is not None else None
        self.feature_slots = vision.feature_slots if vision is not None and self.layout is not None else 0
        self.patch_capacity = max(vision.patch_capacities, default=0) if vision is not None else 0
        self.allow_remote = allow_remote

    def image_bytes(self, part: ImagePart) -> bytes:
        if part.url.startswith("data:") or not self.allow_remote:
            return data_url_bytes(part.url, part.param)
        return fetch_remote_image(part.url, part.param)

    def prepare(self, parts: Sequence[ImagePart]) -> list[PreparedImage]:
        """Each part's image decoded and prepared; refuses images on a text-only core and more images
        than the core's feature slots (naming the first part past them) before reading any."""
        if not parts:
            return []
        over = parts[min(self.feature_slots, len(parts) - 1)]
        check_image_count(len(parts), self.feature_slots if self.preparation is not None else 0, over.param)
        assert self.preparation is not None
        out = []
        for part in parts:
            prepared = self.preparation.prepare(self.image_bytes(part), part.param)
            patches = prepared.patches.shape[0] - 1  # the class row is no patch
            if patches > self.patch_capacity:
                raise ImageTooLarge(part.param, f"the prepared image has {patches} patches, past the model's "
                                    f"captured patch capacity of {self.patch_capacity}")
            out.append(prepared)
        return out

    def lay_out(self, tokens: Sequence[int], prepared: Sequence[PreparedImage],
                param: str) -> tuple[tuple[int, ...], tuple[RequestImage, ...]]:
        """The prompt with each placeholder expanded into its image's sentinel span, and the images the
        engines bind; the placeholders must number the images (else a 400 naming `param`)."""
        if self.layout is None:
            return tuple(tokens), ()
        laid = self.layout.lay_out(tokens, [p.digest for p in prepared], param)
        return laid.tokens, self.layout.request_images(laid, prepared)

    @property
    def placeholder_id(self) -> int | None:
        return self.layout.placeholder_id if self.layout is not None else None
