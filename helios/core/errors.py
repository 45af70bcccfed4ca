"""The core format's errors (host side): one class per violated invariant.

Every class derives from `CoreFormatError` (exit code 3 in `helios verify`). Messages name the
resource and the byte offset where one applies, so a reader of one line knows what broke and where.
"""

from __future__ import annotations

from helios.errors import HeliosError


class CoreFormatError(HeliosError):
    """A core file that is not sound: unsigned, untrusted, unauthorized, malformed or altered."""

    exit_code = 3


# --- keys and trust ---------------------------------------------------------------------------


class KeyFileInvalid(CoreFormatError):
    """A key file that is neither a PEM nor a raw 32-byte Ed25519 / AES-256 key."""


class UntrustedKey(CoreFormatError):
    """The core was signed by a key that is not among the verifier's trusted keys."""


class SignatureInvalid(CoreFormatError):
    """The Ed25519 signature does not verify over the signed bytes."""


class NamespaceNotAccepted(CoreFormatError):
    """The acceptance string differs from the signed publisher namespace."""


class NamespaceInvalid(CoreFormatError):
    """A publisher namespace is empty or holds a character that is not printable (a control
    character, a line or paragraph separator): what a verifier reads and accepts must be visible."""


# --- file layout --------------------------------------------------------------------------------


class BadMagic(CoreFormatError):
    """The file does not start with the core magic."""


class TruncatedFile(CoreFormatError):
    """The file ends before its header or body does."""


class BodyTooLarge(CoreFormatError):
    """The declared body is larger than a reader will hold in memory."""


class BodyMalformed(CoreFormatError):
    """The unsigned CoreBody (or a signed message inside it) does not parse, or is not canonical."""


class UnsupportedFormatVersion(CoreFormatError):
    """CoreBody.format_version or ProtectedIndex.version is one this reader does not know."""


class EnvelopeInvalid(CoreFormatError):
    """A signed envelope or index whose content breaks a rule (ids, lengths, chunk counts)."""


class LocationInvalid(CoreFormatError):
    """The LocationSet does not place every resource exactly once with its signed stored length."""


class LayoutGap(CoreFormatError):
    """Bytes of a core (or sibling) file that no resource location accounts for."""


class LayoutOverlap(CoreFormatError):
    """Two resource locations share bytes, or a location crosses the body."""


class SiblingFileInvalid(CoreFormatError):
    """A sibling file named by the LocationSet is missing or has an unsafe name."""


class CoreFileUnavailable(CoreFormatError):
    """A core, sibling or input file that cannot be read or written (missing, unreadable, no room)."""


class FormatNotWritable(CoreFormatError):
    """`write_core` was asked for a format it does not write."""


class ResourceNotFound(CoreFormatError):
    """A resource id that the signed envelope does not name."""


# --- resources ----------------------------------------------------------------------------------


class StoredLengthMismatch(CoreFormatError):
    """The bytes available for a resource differ from its signed stored length."""


class ChunkDigestMismatch(CoreFormatError):
    """A 4 MiB chunk of stored bytes does not hash to its signed SHA-256."""


class NotAZstdFrame(CoreFormatError):
    """A resource does not start with the zstd frame magic."""


class SkippableFrame(CoreFormatError):
    """A resource starts with (or contains) a zstd skippable frame."""


class FrameHeaderInvalid(CoreFormatError):
    """A zstd frame header with reserved bits set or an impossible field."""


class MissingContentSize(CoreFormatError):
    """A zstd frame header that does not declare its decoded size."""


class WindowTooLarge(CoreFormatError):
    """A zstd frame whose window exceeds 8 MiB."""


class DictionaryNotAllowed(CoreFormatError):
    """A zstd frame that names a dictionary."""


class DecodedLengthMismatch(CoreFormatError):
    """A frame's declared or actual decoded size differs from the signed decoded length."""


class TruncatedFrame(CoreFormatError):
    """A zstd frame that ends before its last block."""


class ExtraFrame(CoreFormatError):
    """A second zstd frame after a resource's one frame."""


class TrailingBytes(CoreFormatError):
    """Bytes after a resource's frame (or after a v4 stream's final chunk) that belong to nothing."""


class FrameCorrupt(CoreFormatError):
    """zstd rejected a frame's content while decoding."""


class BufferSizeMismatch(CoreFormatError):
    """A caller's buffer whose size differs from the resource's decoded length."""


# --- ProtectedIndex version 4 -------------------------------------------------------------------


class ProtectionKeyMissing(CoreFormatError):
    """A version-4 core was opened without its AES-256 protection key."""


class ProtectionKeyMismatch(CoreFormatError):
    """The supplied protection key is not the one the version-4 index names."""


class ChunkAuthenticationFailed(CoreFormatError):
    """An AES-GCM chunk whose tag does not verify at its position (altered, reordered, duplicated)."""


class MissingFinalChunk(CoreFormatError):
    """A version-4 stream that ends without its final chunk."""


class TruncatedChunk(CoreFormatError):
    """A version-4 stream that ends inside a chunk (shorter than its salt or tag)."""


class BytesAfterFinalChunk(CoreFormatError):
    """A version-4 stream with bytes after the chunk sealed as final."""
