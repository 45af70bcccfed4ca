"""Writing cores (host side): `write_core` streams resources into a signed core file.

Deterministic: the same inputs give the same bytes (resources keep the order given, Protobuf is
serialized with `deterministic=True`, zstd level 3 is single-threaded, Ed25519 signatures are
deterministic, version-4 salts are derived from the key and the content). Resources may come from
an iterator one at a time; only one resource's encoded bytes are held at once. The file is written
beside `path` and renamed into place once complete.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from helios.core.chunks import CHUNK_NBYTES, chunk_digests
from helios.core.envelope import (
    FORMATS,
    INDEX_FORMAT_VERSION,
    PAYLOAD_FORMAT_VERSION,
    ZSTD_INDEX_VERSION,
    SignedContent,
    check_content,
    check_namespace,
    sign,
)
from helios.core.errors import EnvelopeInvalid, FormatNotWritable
from helios.core.frame import encode_resource
from helios.core.keys import load_private_key, protection_key_id, raw_public_key, resolve_protection_key
from helios.core.layout import HEADER_NBYTES, encode_header, write_body
from helios.core.protected import DEFAULT_ENCRYPTED_CHUNK_NBYTES, PROTECTED_VERSION, seal_resource
from helios.proto import core_pb2


@dataclass(frozen=True, slots=True)
class ResourceInput:
    """One resource to pack: its id, its ResourceKind and its decoded bytes."""

    id: str  # unique within the core; names the resource to readers
    kind: int  # a core_pb2.ResourceKind value other than RESOURCE_KIND_UNSPECIFIED
    data: bytes | bytearray | memoryview  # the decoded bytes (any C-contiguous buffer through memoryview)

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise EnvelopeInvalid(f"a resource id is a non-empty string, not {self.id!r}")
        if self.kind not in core_pb2.ResourceKind.values() or self.kind == 0:
            raise EnvelopeInvalid(f"resource {self.id!r}: kind {self.kind!r} is not a ResourceKind other than UNSPECIFIED")
        if not isinstance(self.data, bytes | bytearray | memoryview):
            raise EnvelopeInvalid(
                f"resource {self.id!r}: data is bytes, bytearray or a memoryview, not {type(self.data).__name__}"
            )
        if isinstance(self.data, memoryview) and not self.data.c_contiguous:
            raise EnvelopeInvalid(f"resource {self.id!r}: a memoryview of data must be C-contiguous")


@dataclass(frozen=True, slots=True)
class StoredResource:
    """One resource already encoded as it will be stored (a zstd frame, or a sealed version-4 stream)."""

    id: str  # unique within the core
    kind: int  # a core_pb2.ResourceKind value
    decoded_nbytes: int  # the decoded length to sign
    stored: bytes  # the stored bytes, committed chunk by chunk

    def __post_init__(self) -> None:
        if self.decoded_nbytes < 0:
            raise EnvelopeInvalid(f"resource {self.id!r}: negative decoded length {self.decoded_nbytes}")


def write_core(
    path: str | os.PathLike,
    *,
    publisher: str,
    signing_key: Ed25519PrivateKey | str | os.PathLike,
    deployment: core_pb2.DeploymentBody,
    resources: Iterable[ResourceInput],
    format: str = "payload",
    protection_key: bytes | str | os.PathLike | None = None,
    encrypted_chunk_nbytes: int = DEFAULT_ENCRYPTED_CHUNK_NBYTES,
) -> None:
    """Writes a signed core at `path`.

    `format` is "payload" (format 2, PayloadEnvelope with DeploymentBody), "index-v6" or "index-v4"
    (format 3, ModelIndex carrying the deployment's contract and manifest and a ProtectedIndex).
    "index-v4" seals each resource with the AES-256 `protection_key` (bytes or a key file) in
    `encrypted_chunk_nbytes`-byte chunks instead of a zstd frame.
    """
    if format not in FORMATS:
        raise FormatNotWritable(f"format {format!r} is not one of {', '.join(FORMATS)}")
    check_namespace(publisher)  # before any resource is encoded
    key = resolve_protection_key(protection_key, f"format {format!r}") if format == "index-v4" else None

    def encoded() -> Iterator[StoredResource]:
        for resource in resources:
            if not isinstance(resource, ResourceInput):
                raise EnvelopeInvalid(f"resources are ResourceInput values, not {type(resource).__name__}")
            # NOTE: no local keeps the bytes across the yield, so at most one resource is held.
            yield StoredResource(
                resource.id, resource.kind, memoryview(resource.data).nbytes,
                encode_resource(resource.data) if key is None
                else seal_resource(resource.data, resource.id, key, encrypted_chunk_nbytes),
            )
            del resource

    write_stored_core(
        path, publisher=publisher, signing_key=signing_key, deployment=deployment, resources=encoded(),
        format=format, encrypted_chunk_nbytes=encrypted_chunk_nbytes if key is not None else 0,
        protection_key_id=protection_key_id(key) if key is not None else b"",
    )


def write_stored_core(
    path: str | os.PathLike,
    *,
    publisher: str,
    signing_key: Ed25519PrivateKey | str | os.PathLike,
    deployment: core_pb2.DeploymentBody,
    resources: Iterable[StoredResource],
    format: str = "payload",
    encrypted_chunk_nbytes: int = 0,
    protection_key_id: bytes = b"",
) -> None:
    """Writes a signed core of resources already encoded, committing and signing the bytes as given.

    The low level of `write_core` (and of tools that copy stored frames without decoding them). It
    checks the envelope rules but not the frames: a reader checks those before decoding.
    """
    if format not in FORMATS:
        raise FormatNotWritable(f"format {format!r} is not one of {', '.join(FORMATS)}")
    if not isinstance(signing_key, Ed25519PrivateKey):
        signing_key = load_private_key(signing_key)
    path = os.fspath(path)
    partial = f"{path}.partial"
    try:
        with open(partial, "wb") as file:
            file.write(encode_header(0, 0))
            offset = HEADER_NBYTES
            executable: list[core_pb2.ExecutableResource] = []
            locations = core_pb2.LocationSet()
            seen: set[str] = set()
            for resource in resources:
                if resource.id in seen:
                    raise EnvelopeInvalid(f"resource id {resource.id!r} is given twice")
                seen.add(resource.id)
                executable.append(
                    core_pb2.ExecutableResource(
                        id=resource.id, kind=resource.kind, stored_nbytes=len(resource.stored),
                        decoded_nbytes=resource.decoded_nbytes, chunk_nbytes=CHUNK_NBYTES,
                        chunk_sha256=chunk_digests(resource.stored),
                    )
                )
                locations.locations.add(resource_id=resource.id, offset=offset, nbytes=len(resource.stored))
                file.write(resource.stored)
                offset += len(resource.stored)
                del resource
            content = SignedContent(
                format, publisher, tuple(executable), deployment.contract, deployment.manifest,
                encrypted_chunk_nbytes, protection_key_id,
            )
            check_content(content)
            body = _body(content, deployment)
            body.locations.CopyFrom(locations)
            body.public_key = raw_public_key(signing_key.public_key())
            body.signature = sign(body, signing_key)
            write_body(file, body, offset)
        os.replace(partial, path)
    except BaseException:
        if os.path.exists(partial):
            os.unlink(partial)
        raise


def _body(content: SignedContent, deployment: core_pb2.DeploymentBody) -> core_pb2.CoreBody:
    """A CoreBody holding the serialized signed envelope or index (not yet signed or located)."""
    if content.format == "payload":
        envelope = core_pb2.PayloadEnvelope(
            publisher_namespace=content.publisher, resources=content.resources, deployment=deployment
        )
        return core_pb2.CoreBody(
            format_version=PAYLOAD_FORMAT_VERSION, signed_envelope=envelope.SerializeToString(deterministic=True)
        )
    protected = content.format == "index-v4"
    index = core_pb2.ModelIndex(
        publisher_namespace=content.publisher,
        contract=content.contract,
        manifest=content.manifest,
        index=core_pb2.ProtectedIndex(
            version=PROTECTED_VERSION if protected else ZSTD_INDEX_VERSION,
            resources=content.resources,
            encrypted_chunk_nbytes=content.encrypted_chunk_nbytes,
            protection_key_id=content.protection_key_id,
        ),
    )
    return core_pb2.CoreBody(
        format_version=INDEX_FORMAT_VERSION, signed_index=index.SerializeToString(deterministic=True)
    )
