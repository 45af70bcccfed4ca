"""Migrating a version-4 logical-resource core to version 6 (host side): `migrate_core`.

The source is opened like any core (trusted key, exact acceptance, its protection key); each
resource is read, verified and decrypted, then written again as one zstd frame, one resource at a
time. The result keeps the publisher namespace, contract, manifest, resource ids, kinds and order,
and is signed by the migrating key: trust in it is the verifier's choice of that key.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from helios.core.errors import UnsupportedFormatVersion
from helios.core.keys import TrustInput
from helios.core.reader import Core, open_core
from helios.core.writer import ResourceInput, write_core
from helios.proto import core_pb2


def _resources(core: Core) -> Iterator[ResourceInput]:
    for resource_id, resource in core.resources.items():
        yield ResourceInput(resource_id, resource.kind, core.read(resource_id))


def migrate_core(
    source: str | os.PathLike,
    destination: str | os.PathLike,
    *,
    trusted_keys: TrustInput | Iterable[TrustInput],
    accept: str,
    signing_key: Ed25519PrivateKey | str | os.PathLike,
    protection_key: bytes | str | os.PathLike | None = None,
) -> None:
    """Writes `destination`, an index-v6 core with the content of the index-v4 core `source`."""
    with open_core(source, trusted_keys=trusted_keys, accept=accept, protection_key=protection_key) as core:
        if core.format != "index-v4":
            raise UnsupportedFormatVersion(
                f"core {os.fspath(source)!r} is {core.format}; only index-v4 cores are migrated (to index-v6)"
            )
        deployment = core_pb2.DeploymentBody(contract=core.contract, manifest=core.manifest)
        write_core(
            destination, publisher=core.publisher, signing_key=signing_key, deployment=deployment,
            resources=_resources(core), format="index-v6",
        )
