"""The feature-span image layout, feature slots and image digests in prefix keys."""

import numpy as np
import pytest

from helios.engine.feature_slots import FeatureSlots
from helios.engine.page_cache import PageCache
from helios.frontend.image_layout import (
    FeatureSpanLayout,
    ImageCountMismatch,
    ImagesNotServed,
    TooManyImages,
    check_image_count,
    feature_rows,
)

LAYOUT = FeatureSpanLayout(placeholder_id=99, sentinel_id=99, features=4)


def test_each_placeholder_becomes_its_images_sentinel_span_with_its_feature_rows():
    laid = LAYOUT.lay_out([1, 99, 2, 3, 99, 5], [b"a" * 32, b"b" * 32], "messages")
    assert laid.tokens == (1, 99, 99, 99, 99, 2, 3, 99, 99, 99, 99, 5)
    assert [(s.start, s.end, s.image) for s in laid.spans] == [(1, 5, 0), (7, 11, 1)]
    # image 0 in slot 2, image 1 in slot 0 of a store of 4 features a slot
    index = laid.context_indices([2, 0], features=4)
    np.testing.assert_array_equal(index, [-1, 8, 9, 10, 11, -1, -1, 0, 1, 2, 3, -1])
    # the vision program's rows: the class row skipped, patches 1..4 into slot 2's rows
    np.testing.assert_array_equal(feature_rows(6, 4, 2, skip_class=True), [-1, 8, 9, 10, 11, -1])
    np.testing.assert_array_equal(feature_rows(5, 5, 1, skip_class=False), [5, 6, 7, 8, 9])


def test_a_prefix_boundary_never_splits_an_image_span():
    laid = LAYOUT.lay_out([1, 99, 2, 3, 99, 5], [b"a" * 32, b"b" * 32], "messages")
    assert [laid.prefix_boundary(n) for n in (0, 1, 2, 4, 5, 6, 8, 11, 12)] == [0, 1, 1, 1, 5, 6, 7, 11, 12]


def test_image_counts_are_checked_naming_the_field():
    with pytest.raises(ImageCountMismatch, match="1 image placeholders for 2 images") as caught:
        LAYOUT.lay_out([1, 99, 2], [b"a", b"b"], "messages.0.content")
    assert caught.value.param == "messages.0.content"
    with pytest.raises(TooManyImages, match="3 images exceed the model's 2 image feature slots"):
        check_image_count(3, 2, "messages")
    with pytest.raises(ImagesNotServed, match="no vision"):
        check_image_count(1, 0, "messages.1.content.0")
    check_image_count(0, 0, "messages")
    check_image_count(2, 2, "messages")


def test_feature_slots_are_held_per_request_and_released_with_it():
    slots = FeatureSlots(3)
    assert slots.allocate(7, 2) == (0, 1) and slots.free == 1
    assert slots.allocate(8, 2) is None and slots.free == 1  # waits, taking nothing
    assert slots.allocate(9, 1) == (2,)
    slots.release(7)
    assert slots.allocate(8, 2) == (0, 1) and slots.free == 0
    slots.release(8)
    slots.release(9)
    slots.release(9)  # nothing held: nothing returned twice
    assert slots.free == 3
    with pytest.raises(ValueError, match="capacity"):
        slots.allocate(1, 4)


def test_a_page_holding_an_image_span_is_keyed_by_the_image_bytes_digest():
    cache = PageCache(8, 4, "core")
    first = LAYOUT.lay_out([1, 99, 2, 3, 4, 5, 6], [b"x" * 32], "m")
    second = LAYOUT.lay_out([1, 99, 2, 3, 4, 5, 6], [b"y" * 32], "m")
    assert first.tokens == second.tokens
    page = first.tokens[:4]
    keys = {cache.chain_key(b"", page, laid.page_content(0, 4)) for laid in (first, second)}
    assert len(keys) == 2  # equal sentinel ids, different images: different pages
    assert first.page_content(5, 9) == b"" and cache.chain_key(b"", first.tokens[5:9]) == \
        cache.chain_key(b"", first.tokens[5:9], first.page_content(5, 9))  # text pages keep their keys
    # the same image at another offset within the page keys differently too
    shifted = LAYOUT.lay_out([1, 2, 99, 3, 4, 5, 6], [b"x" * 32], "m")
    assert shifted.page_content(0, 4) != first.page_content(0, 4)
