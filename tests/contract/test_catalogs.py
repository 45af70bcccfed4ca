"""Rebuild manifests and weight catalogs are informational: unknown or missing ones change nothing."""

from __future__ import annotations

from helios.contract import PreparedContract
from helios.contract.catalogs import read_rebuild_manifest, read_weight_catalog
from helios.proto import core_pb2
from tests.contract import valid


def test_known_versions_are_read():
    catalog = core_pb2.WeightCatalog(version=1, rank=0, entries=[core_pb2.WeightEntry(resource="w/0")])
    assert read_weight_catalog(catalog.SerializeToString()).entries[0].resource == "w/0"
    assert read_rebuild_manifest(core_pb2.RebuildManifest(version=1, recipe="r").SerializeToString()).recipe == "r"


def test_unknown_missing_or_garbled_catalogs_read_as_none():
    assert read_weight_catalog(core_pb2.WeightCatalog(version=99).SerializeToString()) is None
    assert read_weight_catalog(None) is None
    assert read_weight_catalog(b"\xff\xff\xff") is None
    assert read_rebuild_manifest(core_pb2.RebuildManifest(version=0).SerializeToString()) is None


def test_the_serving_contract_does_not_depend_on_catalogs():
    # The decoder takes only the serving contract and the manifest: catalogs cannot reach it.
    import inspect

    assert list(inspect.signature(PreparedContract.decode).parameters) == ["serving", "manifest"]
    assert PreparedContract.decode(valid.serving(), valid.manifest()) == PreparedContract.decode(
        valid.serving(), valid.manifest())
