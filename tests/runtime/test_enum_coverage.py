"""The standing check of issue #25: every value of the contract's enums that select a mechanism
(history kinds, image preparations, image layouts, operations) is either served by both runtimes or
refused at load in one line naming it. A value the proto gains later, or a number no proto names,
must not load and be served wrong."""

from __future__ import annotations

import pytest

from helios.proto import contract_pb2
from helios.runtime import packing
from tests.runtime.test_speculative_options import _refused_in_one_line, plain_core  # noqa: F401 (fixture)

UNKNOWN = 99  # a number no enum of the proto names

# What the runtimes serve, by enum: every named value but UNSPECIFIED must be here (served, with the
# docs page saying how) — a new value makes this test fail until it is served or refused.
SERVED = {
    "HistoryKind": set(packing.SERVED_HISTORY_KINDS),
    "ImagePreparation": set(packing.SERVED_IMAGE_PREPARATIONS),
    "ImageLayout": set(packing.SERVED_IMAGE_LAYOUTS),
    "Operation": {contract_pb2.OPERATION_INITIALIZATION, contract_pb2.OPERATION_RESTORATION,
                  contract_pb2.OPERATION_PREFILL, contract_pb2.OPERATION_SCORED_PREFILL,
                  contract_pb2.OPERATION_RESUME, contract_pb2.OPERATION_DECODE, contract_pb2.OPERATION_SPECULATIVE,
                  contract_pb2.OPERATION_MIXED},
}


@pytest.mark.parametrize("enum", sorted(SERVED))
def test_every_named_value_is_served(enum):
    values = {value.number for value in contract_pb2.DESCRIPTOR.enum_types_by_name[enum].values
              if not value.name.endswith("_UNSPECIFIED")}
    assert values - SERVED[enum] == set(), f"{enum}: values neither served nor refused at load"


def _mutated(core, change):
    from helios.ignition.prepare import PreparedCore

    contract = contract_pb2.ServingContract()
    contract.CopyFrom(core.contract)
    change(contract)
    return PreparedCore(contract, core.manifest, core.resource_list)


def _history(contract):
    contract.model.cache.histories[0].kind = UNKNOWN


def _preparation(contract):
    contract.model.frontend.image_preparation = UNKNOWN


def _layout(contract):
    contract.model.frontend.image_layout = UNKNOWN


def _operation(contract):
    contract.model.graphs[0].operation = UNKNOWN


@pytest.mark.parametrize(("change", "message"), [
    (_history, r"model\.cache\.histories\[0\]\.kind: unknown history kind 99"),
    (_preparation, r"model\.frontend\.image_preparation: unknown image preparation 99"),
    (_layout, r"model\.frontend\.image_layout: unknown image layout 99"),
    (_operation, r"model\.graphs\[0\]\.operation: unknown operation 99"),
], ids=["history_kind", "image_preparation", "image_layout", "operation"])
@pytest.mark.parametrize("runtime", ["reference", "production"])
def test_an_unknown_value_fails_load_in_one_line_naming_it(plain_core, change, message, runtime):  # noqa: F811
    from helios.contract.errors import UnknownEnumValue

    _refused_in_one_line(_mutated(plain_core, change), runtime, UnknownEnumValue, message)
