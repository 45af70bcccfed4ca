"""Sealing refuses what could not load: an invalid contract, or a graph naming a resource the core lacks."""

from __future__ import annotations

import pytest

from helios.contract import errors as e
from helios.ignition.prepare import PreparationOptions, PreparedCore, prepare_checkpoint
from helios.ignition.seal import seal

SMALL = PreparationOptions(dtype="fp32", page_tokens=4, batch_capacities=(1,), prefill_capacities=(8,))


def test_a_graph_naming_a_missing_resource_is_never_sealed(tiny_checkpoint, tmp_path):
    prepared = prepare_checkpoint(tiny_checkpoint("qwen2"), SMALL)
    kept = tuple(r for r in prepared.resources if r.id != "weight/model.norm.weight")
    broken = PreparedCore(prepared.contract, prepared.manifest, kept)
    out = tmp_path / "broken.hcore"
    with pytest.raises(e.UnknownResource, match="weight/model.norm.weight"):
        seal(broken, out, publisher="acme/tests", signing_key=None)
    assert not out.exists()


def test_an_invalid_contract_is_never_sealed(tiny_checkpoint, tmp_path):
    prepared = prepare_checkpoint(tiny_checkpoint("qwen2"), SMALL)
    prepared.contract.served_id = ""
    out = tmp_path / "invalid.hcore"
    with pytest.raises(e.InvalidIdentity):
        seal(prepared, out, publisher="acme/tests", signing_key=None)
    assert not out.exists()
