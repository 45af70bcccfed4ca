"""Image layout (host side): where a prompt's images sit among its tokens, and what they feed.

An image layout is a reusable token algorithm, never a model identity: the specification's
image-layout selector names one, its data is the core's image token layout (feature ids, atomic
spans). One is implemented:

    FeatureSpanLayout   each image placeholder id of the rendered prompt (LLaVA's `<image>`) becomes a
                        run of `features` sentinel ids, one per image feature, in image order.

`lay_out` produces a `LaidOutPrompt`: the expanded token ids (the positions are their indices), the
atomic span of each image (a prefix boundary never splits one: `prefix_boundary`), the feature
mapping (`context_indices`: each context position's row of the request's feature store, -1 for a
text position; `feature_rows`: each vision-program row's store row) and the content bytes a prefix
page holding part of an image mixes into its key (`page_content`: the image bytes' digest and the
span's offset), so two prompts that differ only in an image never share a cached page.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from helios.frontend.errors import ImagesNotServed, RequestFieldError
from helios.frontend.image_preparation import PreparedImage
from helios.proto import contract_pb2 as C
from helios.runtime.images import RequestImage


class ImageCountMismatch(RequestFieldError):
    """The prompt's image placeholders and the request's images differ in number."""


class TooManyImages(RequestFieldError):
    """A request holds more images than the core has feature slots."""


def check_image_count(images: int, feature_slots: int, param: str) -> None:
    """Refuse a request's images on a text-only core (0 slots) or past the core's feature slots."""
    if images and not feature_slots:
        raise ImagesNotServed(param, "this model has no vision: image content parts are not accepted")
    if images > feature_slots:
        raise TooManyImages(param, f"{images} images exceed the model's {feature_slots} image feature slots")


@dataclass(frozen=True, slots=True)
class ImageSpan:
    start: int  # the position of the span's first sentinel
    length: int  # features of the image
    image: int  # the image's index in the request
    digest: bytes  # the image bytes' digest

    @property
    def end(self) -> int:
        return self.start + self.length


@dataclass(frozen=True, slots=True)
class LaidOutPrompt:
    tokens: tuple[int, ...]
    spans: tuple[ImageSpan, ...]

    def context_indices(self, slots: Sequence[int], features: int) -> np.ndarray:
        """[len(tokens)] i32: position p of image i's span reads store row slots[i] * features + (p -
        start); text positions -1 (IMAGE_CONTEXT_INDICES)."""
        index = np.full(len(self.tokens), -1, np.int32)
        for span in self.spans:
            first = slots[span.image] * features
            index[span.start:span.end] = np.arange(first, first + span.length, dtype=np.int32)
        return index

    def prefix_boundary(self, limit: int) -> int:
        """The largest boundary <= limit that splits no image span."""
        for span in self.spans:
            if span.start < limit < span.end:
                return span.start
        return limit

    def page_content(self, start: int, end: int) -> bytes:
        """What the prefix key of the page holding positions [start, end) mixes in: for each image span
        it overlaps, the span's offset from the page start and the image's digest (empty for text)."""
        parts = [(span.start - start).to_bytes(8, "little", signed=True) + span.digest
                 for span in self.spans if span.start < end and span.end > start]
        return b"".join(parts)


def feature_rows(rows: int, features: int, slot: int, *, skip_class: bool) -> np.ndarray:
    """[rows] i32: each vision-program row's feature-store row for an image in `slot` (IMAGE_FEATURE_INDICES);
    the class row -1 when the layout skips it, rows past the image's features -1."""
    index = np.full(rows, -1, np.int32)
    first = 1 if skip_class else 0
    count = min(features, rows - first)
    index[first:first + count] = np.arange(slot * features, slot * features + count, dtype=np.int32)
    return index


@dataclass(frozen=True, slots=True)
class FeatureSpanLayout:
    """Each placeholder id becomes `features` sentinel ids (module docstring)."""

    placeholder_id: int
    sentinel_id: int
    features: int

    def lay_out(self, tokens: Sequence[int], digests: Sequence[bytes], param: str) -> LaidOutPrompt:
        """The expanded prompt of `tokens` holding one placeholder per image of `digests`."""
        placeholders = sum(1 for t in tokens if t == self.placeholder_id)
        if placeholders != len(digests):
            raise ImageCountMismatch(param, f"the prompt holds {placeholders} image placeholders for "
                                     f"{len(digests)} images")
        out: list[int] = []
        spans: list[ImageSpan] = []
        for token in tokens:
            if token == self.placeholder_id:
                spans.append(ImageSpan(len(out), self.features, len(spans), digests[len(spans)]))
                out.extend([self.sentinel_id] * self.features)
            else:
                out.append(int(token))
        return LaidOutPrompt(tuple(out), tuple(spans))

    def request_images(self, laid: LaidOutPrompt, prepared: Sequence[PreparedImage]) -> tuple[RequestImage, ...]:
        """What the engines bind for each image of `laid` (`helios.runtime.images`): its span, digest,
        the layout's tensors `patches` (the preparation's rows) and `patch_group` (every row in the
        image's one group, 0), and each encoder row's feature: the rows after the class row when the
        span is shorter than the rows (the class row is dropped), else every row."""
        out = []
        for span in laid.spans:
            image = prepared[span.image]
            rows = image.patches.shape[0]
            offsets = feature_rows(rows, span.length, 0, skip_class=span.length < rows)
            out.append(RequestImage(span.start, span.length, span.digest,
                                    (("patch_group", np.zeros(rows, np.int32)), ("patches", image.patches)),
                                    offsets))
        return tuple(out)


def layout_for(frontend: C.FrontendContract, vision: C.VisionContract) -> FeatureSpanLayout | None:
    """The implementation the core's image-layout selector names, from its image token layout data
    (the one feature id is the placeholder and the sentinel) and the vision contract's features per
    window; None for IMAGE_LAYOUT_NONE (or unset: a core without images)."""
    if frontend.image_layout == C.IMAGE_LAYOUT_FEATURE_SPAN:
        sentinel = frontend.image_token_layout.feature_ids[0]
        return FeatureSpanLayout(sentinel, sentinel, vision.features_per_window)
    if frontend.image_layout in (C.IMAGE_LAYOUT_NONE, C.IMAGE_LAYOUT_UNSPECIFIED):
        return None
    raise ValueError(f"image layout {frontend.image_layout} has no implementation")
