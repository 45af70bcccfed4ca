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
