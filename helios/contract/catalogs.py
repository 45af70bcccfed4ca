"""Informational catalogs (host side): the rebuild manifest and per-rank weight catalogs.

They describe preparation inputs and stored tensor views and never select serving behaviour: a
missing catalog, a version this runtime does not know, or undecodable bytes read as None, and the
serving contract and replay path are the same either way.
"""

from __future__ import annotations

from google.protobuf.message import DecodeError

from helios.proto import core_pb2

KNOWN_WEIGHT_CATALOG_VERSIONS = frozenset({1})
KNOWN_REBUILD_MANIFEST_VERSIONS = frozenset({1})


def read_weight_catalog(data: bytes | None) -> core_pb2.WeightCatalog | None:
    return _read(core_pb2.WeightCatalog, data, KNOWN_WEIGHT_CATALOG_VERSIONS)


def rank_weights(catalogs: list[core_pb2.WeightCatalog | None], decoded_nbytes: dict[str, int]) -> list[dict]:
    """Per rank (the catalogs in rank order): its catalog's entries and the decoded bytes of the weight
    resources they name (a resource two ranks share counts for each)."""
    report = []
    for catalog in catalogs:
        if catalog is None:
            report.append({"weights": 0, "weight_nbytes": 0})
            continue
        report.append({"weights": len(catalog.entries),
                       "weight_nbytes": sum(decoded_nbytes.get(e.resource, 0) for e in catalog.entries)})
    return report


def read_rebuild_manifest(data: bytes | None) -> core_pb2.RebuildManifest | None:
    return _read(core_pb2.RebuildManifest, data, KNOWN_REBUILD_MANIFEST_VERSIONS)


def _read(kind, data, known):
    if data is None:
        return None
    message = kind()
    try:
        message.ParseFromString(data)
    except DecodeError:
        return None
    return message if message.version in known else None
