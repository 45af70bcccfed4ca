"""The image selectors and their data: CLIP preparation with its settings and the feature-span layout
validate, round-trip and select their implementations; each inconsistency is rejected at its path."""

import pytest

from helios.contract import PreparedContract
from helios.contract import errors as e
from helios.frontend.image_layout import FeatureSpanLayout, layout_for
from helios.frontend.image_preparation import CLIP_MEAN, CLIP_STD, ClipPreparation, preparation_for
from helios.proto import contract_pb2 as c
from tests.contract import valid


def _vision_serving():
    s = valid.serving()
    s.model.vision.CopyFrom(c.VisionContract(feature_slots=2, features_per_window=16, patches_per_feature=1,
                                             patch_capacities=[17]))
    f = s.model.frontend
    f.image_preparation, f.image_layout = c.IMAGE_PREPARATION_CLIP, c.IMAGE_LAYOUT_FEATURE_SPAN
    f.image_settings.CopyFrom(c.ImageSettings(image_size=28, patch_size=7, mean=CLIP_MEAN, std=CLIP_STD))
    f.image_token_layout.CopyFrom(c.ImageTokenLayout(feature_ids=[62]))
    return s


def test_the_selectors_validate_round_trip_and_name_their_implementations():
    s = _vision_serving()
    contract = PreparedContract.decode(s, valid.manifest())
    assert contract.frontend.image_settings.image_size == 28
    assert contract.to_proto()[0].model.frontend.image_settings == s.model.frontend.image_settings
    preparation = preparation_for(s.model.frontend)
    assert isinstance(preparation, ClipPreparation) and (preparation.image_size, preparation.grid) == (28, 4)
    assert preparation.std == pytest.approx(CLIP_STD)
    assert layout_for(s.model.frontend, s.model.vision) == FeatureSpanLayout(62, 62, 16)
    plain = valid.serving()
    PreparedContract.decode(plain, valid.manifest())
    assert preparation_for(plain.model.frontend) is None and layout_for(plain.model.frontend, plain.model.vision) is None
    assert not plain.model.frontend.HasField("image_settings")
    assert not PreparedContract.decode(plain, valid.manifest()).to_proto()[0].model.frontend.HasField("image_settings")


def _without_settings(s):
    s.model.frontend.ClearField("image_settings")


def _patch_not_dividing(s):
    s.model.frontend.image_settings.patch_size = 5


def _settings_without_preparation(s):
    s.model.frontend.image_preparation = c.IMAGE_PREPARATION_NONE
    s.model.frontend.image_layout = c.IMAGE_LAYOUT_NONE


def _feature_id_not_a_sentinel(s):
    s.model.frontend.image_token_layout.feature_ids[:] = [61]


def _layout_without_preparation(s):
    s.model.frontend.image_preparation = c.IMAGE_PREPARATION_NONE
    s.model.frontend.ClearField("image_settings")


def _no_feature_slots(s):
    s.model.vision.feature_slots = 0


@pytest.mark.parametrize(("mutate", "path"), [
    (_without_settings, "model.frontend.image_settings.patch_size"),
    (_patch_not_dividing, "model.frontend.image_settings.patch_size"),
    (_settings_without_preparation, "model.frontend.image_settings"),
    (_feature_id_not_a_sentinel, "model.frontend.image_token_layout.feature_ids"),
    (_layout_without_preparation, "model.frontend.image_layout"),
    (_no_feature_slots, "model.vision"),
])
def test_inconsistent_image_data_is_rejected_at_its_path(mutate, path):
    s = _vision_serving()
    mutate(s)
    with pytest.raises(e.IncompatibleFrontend) as caught:
        PreparedContract.decode(s, valid.manifest())
    assert caught.value.path == path
