"""Signing, verification and authorization of a core's signed bytes (host side).

The signature is Ed25519 over a domain-separation prefix followed by the exact signed bytes as
stored in CoreBody (`signed_envelope` for format 2, `signed_index` for format 3). The signed bytes
are parsed only after the signature verifies: Protobuf encoding is not canonical, so nothing is
re-encoded before verifying. Trust comes only from the verifier's keys; CoreBody.public_key merely
says which of them to try. `authorize` compares the acceptance string to the signed publisher
namespace exactly: no case folding, trimming or Unicode normalization.
"""

from __future__ import annotations

from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from google.protobuf.message import DecodeError
from google.protobuf.unknown_fields import UnknownFieldSet

from helios.core.chunks import CHUNK_NBYTES, chunk_count
from helios.core.errors import (
    EnvelopeInvalid,
    NamespaceInvalid,
    NamespaceNotAccepted,
    SignatureInvalid,
    UnsupportedFormatVersion,
    UntrustedKey,
)
from helios.core.protected import MAX_ENCRYPTED_CHUNK_NBYTES, PROTECTED_VERSION, sealed_nbytes
from helios.proto import contract_pb2, core_pb2, manifest_pb2

PAYLOAD_FORMAT_VERSION = 2
INDEX_FORMAT_VERSION = 3
ZSTD_INDEX_VERSION = 6
PAYLOAD_DOMAIN = b"helios.core.v2.payload-envelope\0"
INDEX_DOMAIN = b"helios.core.v3.model-index\0"
FORMATS = ("payload", "index-v6", "index-v4")
MAX_RESOURCE_ID_NBYTES = 1024


def _domain(format_version: int) -> bytes:
    if format_version == PAYLOAD_FORMAT_VERSION:
        return PAYLOAD_DOMAIN
    if format_version == INDEX_FORMAT_VERSION:
        return INDEX_DOMAIN
    raise UnsupportedFormatVersion(
        f"CoreBody.format_version {format_version} is unknown: 2 (payload core) and 3 (logical-resource core) are read"
    )


def signed_bytes(body: core_pb2.CoreBody) -> bytes:
    """The bytes the signature covers, after checking that the body carries exactly one kind."""
    _domain(body.format_version)
    envelope, index = body.signed_envelope, body.signed_index
    if body.format_version == PAYLOAD_FORMAT_VERSION and (not envelope or index):
        raise EnvelopeInvalid("a format-2 core carries a signed_envelope and no signed_index")
    if body.format_version == INDEX_FORMAT_VERSION and (not index or envelope):
        raise EnvelopeInvalid("a format-3 core carries a signed_index and no signed_envelope")
    return envelope or index


def sign(body: core_pb2.CoreBody, key: Ed25519PrivateKey) -> bytes:
    return key.sign(_domain(body.format_version) + signed_bytes(body))


def verify_signature(body: core_pb2.CoreBody, trusted: dict[bytes, Ed25519PublicKey]) -> None:
    """Verifies the signature with the trusted key CoreBody.public_key names."""
    data = signed_bytes(body)
    key = trusted.get(bytes(body.public_key))
    if key is None:
        fingerprint = bytes(body.public_key).hex()[:16] or "(none)"
        raise UntrustedKey(
            f"the core is signed by key {fingerprint}…, which is not among the {len(trusted)} trusted key(s)"
        )
    try:
        key.verify(bytes(body.signature), _domain(body.format_version) + data)
    except InvalidSignature:
        raise SignatureInvalid(
            f"the Ed25519 signature does not verify over the {len(data)} signed bytes "
            f"(format {body.format_version})"
        ) from None


@dataclass(frozen=True, slots=True)
class SignedContent:
    """What a verified core's signed bytes say, in one shape for both core kinds."""

    format: str  # "payload", "index-v6" or "index-v4"
    publisher: str  # the signed publisher namespace
    resources: tuple[core_pb2.ExecutableResource, ...]  # in signed order
    contract: contract_pb2.ServingContract
    manifest: manifest_pb2.ExecutionManifest
    encrypted_chunk_nbytes: int  # version 4: plaintext bytes per sealed chunk; else 0
    protection_key_id: bytes  # version 4: names the protection key; else b""

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"format {self.format!r} is not one of {FORMATS}")


def _no_unknown_fields(message, what: str, strict: bool) -> None:
    if strict and len(UnknownFieldSet(message)):
        raise EnvelopeInvalid(f"the signed {what} has fields this reader does not know")


def parse_signed(body: core_pb2.CoreBody, *, strict: bool = True) -> SignedContent:
    """Parses the signed bytes. Call only after `verify_signature`.

    `strict` (always, when loading) also refuses unknown fields and applies `check_content`;
    `inspect_core` parses leniently to show what an unsound core claims.
    """
    data = signed_bytes(body)
    try:
        if body.format_version == PAYLOAD_FORMAT_VERSION:
            envelope = core_pb2.PayloadEnvelope.FromString(data)
            _no_unknown_fields(envelope, "PayloadEnvelope", strict)
            content = SignedContent(
                "payload", envelope.publisher_namespace, tuple(envelope.resources),
                envelope.deployment.contract, envelope.deployment.manifest, 0, b"",
            )
        else:
            index = core_pb2.ModelIndex.FromString(data)
            _no_unknown_fields(index, "ModelIndex", strict)
            _no_unknown_fields(index.index, "ProtectedIndex", strict)
            version = index.index.version
            if version not in (ZSTD_INDEX_VERSION, PROTECTED_VERSION):
                raise UnsupportedFormatVersion(
                    f"ProtectedIndex.version {version} is unknown: 6 (zstd frames) and 4 (AES-GCM chunks) are read"
                )
            content = SignedContent(
                f"index-v{version}", index.publisher_namespace, tuple(index.index.resources),
                index.contract, index.manifest, index.index.encrypted_chunk_nbytes,
                bytes(index.index.protection_key_id),
            )
    except DecodeError as error:
        raise EnvelopeInvalid(f"the signed bytes do not parse: {error}") from None
    if strict:
        for resource in content.resources:
            _no_unknown_fields(resource, f"ExecutableResource {resource.id!r}", strict)
        check_content(content)
    return content


def check_namespace(namespace: str) -> None:
    """A publisher namespace is non-empty and printable (`str.isprintable`: no control characters)."""
    if not namespace:
        raise NamespaceInvalid("the signed publisher namespace is empty")
    bad = next((c for c in namespace if not c.isprintable()), None)
    if bad is not None:
        raise NamespaceInvalid(f"the publisher namespace {namespace!r} holds the unprintable character U+{ord(bad):04X}")


def check_content(content: SignedContent) -> None:
    """The rules every signed envelope or index obeys (a writer checks them too)."""
    check_namespace(content.publisher)
    protected = content.format == "index-v4"
    if protected:
        if not 1 <= content.encrypted_chunk_nbytes <= MAX_ENCRYPTED_CHUNK_NBYTES:
            raise EnvelopeInvalid(
                f"encrypted_chunk_nbytes {content.encrypted_chunk_nbytes} is outside [1, {MAX_ENCRYPTED_CHUNK_NBYTES}]"
            )
        if len(content.protection_key_id) != 16:
            raise EnvelopeInvalid("a version-4 index names its protection key with 16 bytes")
    elif content.encrypted_chunk_nbytes or content.protection_key_id:
        raise EnvelopeInvalid(f"a {content.format} core carries version-4 encryption fields")
    seen: set[str] = set()
    for resource in content.resources:
        rid = resource.id
        if not rid or len(rid.encode()) > MAX_RESOURCE_ID_NBYTES:
            raise EnvelopeInvalid(f"resource id {rid!r} is empty or longer than {MAX_RESOURCE_ID_NBYTES} bytes")
        if rid in seen:
            raise EnvelopeInvalid(f"resource id {rid!r} appears twice in the signed envelope")
        seen.add(rid)
        if resource.kind not in core_pb2.ResourceKind.values() or resource.kind == 0:
            raise EnvelopeInvalid(f"resource {rid!r}: kind {resource.kind} is not a ResourceKind")
        if resource.chunk_nbytes != CHUNK_NBYTES:
            raise EnvelopeInvalid(f"resource {rid!r}: chunk_nbytes is {resource.chunk_nbytes}, not {CHUNK_NBYTES} (4 MiB)")
        count = chunk_count(resource.stored_nbytes)
        if len(resource.chunk_sha256) != count:
            raise EnvelopeInvalid(
                f"resource {rid!r}: {len(resource.chunk_sha256)} chunk digests for {resource.stored_nbytes} "
                f"stored bytes, which need exactly {count}"
            )
        if any(len(digest) != 32 for digest in resource.chunk_sha256):
            raise EnvelopeInvalid(f"resource {rid!r}: a chunk digest is not 32 bytes")
        if protected and resource.stored_nbytes != sealed_nbytes(resource.decoded_nbytes, content.encrypted_chunk_nbytes):
            raise EnvelopeInvalid(
                f"resource {rid!r}: {resource.stored_nbytes} stored bytes cannot seal {resource.decoded_nbytes} "
                f"decoded bytes in {content.encrypted_chunk_nbytes}-byte chunks"
            )


def authorize(content: SignedContent, acceptance: str) -> None:
    """Succeeds only when `acceptance` equals the signed publisher namespace, code point for code point."""
    if not isinstance(acceptance, str) or acceptance != content.publisher:
        raise NamespaceNotAccepted(
            f"the acceptance {acceptance!r} does not equal the signed publisher namespace {content.publisher!r} "
            f"(the comparison is exact)"
        )
