"""The core file format (host side): signed, chunk-committed, zstd-framed cores with exact authorization.

Write with `write_core`, open with `open_core` (verify, authorize, lay out; resources verified and
decoded lazily), look without trust with `inspect_core`. The byte layout is in docs/format.md.
"""

from __future__ import annotations

from helios.core.chunks import CHUNK_NBYTES
from helios.core.envelope import FORMATS, authorize
from helios.core.errors import (
    BadMagic,
    BodyMalformed,
    BodyTooLarge,
    BufferSizeMismatch,
    BytesAfterFinalChunk,
    ChunkAuthenticationFailed,
    ChunkDigestMismatch,
    CoreFileUnavailable,
    CoreFormatError,
    DecodedLengthMismatch,
    DictionaryNotAllowed,
    EnvelopeInvalid,
    ExtraFrame,
    FormatNotWritable,
    FrameCorrupt,
    FrameHeaderInvalid,
    KeyFileInvalid,
    LayoutGap,
    LayoutOverlap,
    LocationInvalid,
    MissingContentSize,
    MissingFinalChunk,
    NamespaceNotAccepted,
    NotAZstdFrame,
    ProtectionKeyMismatch,
    ProtectionKeyMissing,
    ResourceNotFound,
    SiblingFileInvalid,
    SignatureInvalid,
    SkippableFrame,
    StoredLengthMismatch,
    TrailingBytes,
    TruncatedChunk,
    TruncatedFile,
    TruncatedFrame,
    UnsupportedFormatVersion,
    UntrustedKey,
    WindowTooLarge,
)
from helios.core.frame import MAX_WINDOW_NBYTES
from helios.core.inspect import format_inspection, inspect_core
from helios.core.keys import (
    PROTECTION_KEY_ENV,
    generate_keypair,
    generate_protection_key,
    load_private_key,
    load_protection_key,
    load_public_key,
    load_trusted_keys,
)
from helios.core.migrate import migrate_core
from helios.core.reader import Core, open_core
from helios.core.relocate import relocate_core
from helios.core.source import CoreSource, ResourceEntry
from helios.core.writer import ResourceInput, StoredResource, write_core, write_stored_core

__all__ = [
    "CHUNK_NBYTES", "FORMATS", "MAX_WINDOW_NBYTES", "PROTECTION_KEY_ENV",
    "Core", "CoreSource", "ResourceEntry", "ResourceInput", "StoredResource", "authorize", "write_stored_core", "format_inspection", "generate_keypair", "generate_protection_key",
    "inspect_core", "load_private_key", "load_protection_key", "load_public_key", "load_trusted_keys",
    "migrate_core", "open_core", "relocate_core", "write_core",
    "BadMagic", "BodyMalformed", "BodyTooLarge", "BufferSizeMismatch", "BytesAfterFinalChunk",
    "ChunkAuthenticationFailed", "ChunkDigestMismatch", "CoreFileUnavailable", "CoreFormatError", "DecodedLengthMismatch",
    "DictionaryNotAllowed", "EnvelopeInvalid", "ExtraFrame", "FormatNotWritable", "FrameCorrupt",
    "FrameHeaderInvalid", "KeyFileInvalid", "LayoutGap", "LayoutOverlap", "LocationInvalid",
    "MissingContentSize", "MissingFinalChunk", "NamespaceNotAccepted", "NotAZstdFrame",
    "ProtectionKeyMismatch", "ProtectionKeyMissing", "ResourceNotFound", "SiblingFileInvalid",
    "SignatureInvalid", "SkippableFrame", "StoredLengthMismatch", "TrailingBytes", "TruncatedChunk",
    "TruncatedFile", "TruncatedFrame", "UnsupportedFormatVersion", "UntrustedKey", "WindowTooLarge",
]
