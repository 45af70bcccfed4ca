"""A traced lane round-trips through the trace's JSON form, its image and image context included."""

import json
from dataclasses import replace

import numpy as np

from conformance.trace import lane_from_json, lane_to_json
from helios.runtime.lanes import ImageSubmission
from tests.runtime.test_packing import LANES


def test_a_lane_with_an_image_round_trips_through_json():
    image = ImageSubmission(tensors=(("patch_group", np.zeros(3, np.int32)),
                                     ("patches", np.arange(6, dtype=np.float32).reshape(3, 2) / 7)),
                            feature_rows=np.array([-1, 0, 1], np.int32))
    lane = replace(LANES[0], image=image, image_context=(-1, 0, 1))
    back = lane_from_json(json.loads(json.dumps(lane_to_json(lane))))
    assert back == lane and back.image.tensor("patches").dtype == np.float32
    assert lane_from_json(json.loads(json.dumps(lane_to_json(LANES[1])))) == LANES[1]
    assert back != replace(lane, image=replace(image, feature_rows=np.array([-1, 0, 2], np.int32)))
