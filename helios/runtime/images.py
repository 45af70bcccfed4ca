"""A request's images as the engines see them (host side, NumPy only): where each sits in the prompt,
what its encoder rounds bind, and which feature-store rows it occupies while admitted.

The frontend's image layout (`helios.frontend.image_layout`) turns each request image into a
`RequestImage`: its atomic sentinel span (start, features), the image bytes' digest, the layout's
named tensors (IMAGE_TENSOR) and each encoder row's feature within the image. An engine admitting
the request gives its images feature slots (`helios.engine.feature_slots`) and holds an
`AdmittedImages`:

    context   each prompt position's feature-store row (IMAGE_CONTEXT_INDICES), -1 for text
    encoded   images whose features are in the store: those whose span the admission's reused
              prefix already holds count as encoded (no later row reads them)

A round encodes at most one image (the next one, inside a PREFILL graph that binds IMAGE_TENSOR) and
its lane's chunk never reaches an image not encoded by then:

    spans     ....[ image e ]......[ image e+1 ]....
    a round   encodes e; its chunk ends at or before image e+1's first sentinel

Prefix keys mix in the digests of the spans a page overlaps (`page_content`), and a reused prefix
never ends inside a span (`prefix_boundary`: spans are atomic), so two prompts that differ only in
an image never share a page.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from helios.runtime.lanes import ImageSubmission
from helios.runtime.request import RequestImage

__all__ = ["AdmittedImages", "RequestImage", "page_content", "prefix_boundary"]


def page_content(images: Sequence[RequestImage], start: int, end: int) -> bytes:
    """What the prefix key of the page holding positions [start, end) mixes in: for each image span it
    overlaps, the span's offset from the page start and the image's digest (empty for text pages)."""
    return b"".join((image.start - start).to_bytes(8, "little", signed=True) + image.digest
                    for image in images if image.start < end and image.end > start)


def prefix_boundary(images: Sequence[RequestImage], limit: int) -> int:
    """The largest boundary <= limit that splits no image span."""
    for image in images:
        if image.start < limit < image.end:
            return image.start
    return limit


class AdmittedImages:
    """A request's images in one admission (module docstring): their feature-store rows and how
    many are encoded."""

    __slots__ = ("context", "encoded", "images", "rows")

    def __init__(self, images: Sequence[RequestImage], slots: Sequence[int], slot_rows: int, prompt: int,
                 consumed: int) -> None:
        """`slots`: each image's feature slot, whose rows are [slot * slot_rows, + features);
        `consumed`: the positions the admission starts from (their images need no encoding)."""
        self.images = tuple(images)
        self.rows = tuple(slot * slot_rows for slot in slots)  # each image's first feature-store row
        context = np.full(prompt, -1, np.int64)
        for image, first in zip(self.images, self.rows, strict=True):
            context[image.start:image.end] = np.arange(first, first + image.features)
        self.context: tuple[int, ...] = tuple(context.tolist())
        self.encoded = sum(1 for image in self.images if image.end <= consumed)

    @property
    def pending(self) -> bool:
        """Whether an image is still to encode (the request's next rounds are encoding PREFILL rounds)."""
        return self.encoded < len(self.images)

    def room(self, frontier: int, *, encodes: bool) -> int | None:
        """The most tokens a chunk from `frontier` may consume (None: any number): up to the next image
        not encoded by the round's end (`encodes`: the round encodes the next image)."""
        following = self.encoded + 1 if encodes else self.encoded
        if following >= len(self.images):
            return None
        return max(self.images[following].start - frontier, 0)

    def encode(self) -> ImageSubmission:
        """The next image's submission (its tensors and feature-store rows); it counts as encoded."""
        image, first = self.images[self.encoded], self.rows[self.encoded]
        offsets = np.asarray(image.feature_offsets, np.int64)
        rows = np.where(offsets >= 0, offsets + first, -1).astype(np.int32)
        self.encoded += 1
        return ImageSubmission(tensors=image.tensors, feature_rows=rows)
