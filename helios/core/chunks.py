"""Chunk commitments of stored resource bytes (host side): compute, verify, and read verified.

A resource's stored bytes are cut into 4 MiB chunks (the last may be shorter), each committed by its
SHA-256 in the signed envelope. `verify_all` checks every digest (chunks hashed on a thread pool:
hashlib releases the GIL) before a single byte is decoded. `VerifiedReader` then yields the bytes
to the decoder: either the chunks the first pass kept (small resources), or, so that memory stays at
a few chunks, each chunk read from the file and hashed again one chunk ahead of the decoder. Either
way the decoder sees only bytes that matched their digest; bytes changed in the file after the
first pass are rejected instead of used.
"""

from __future__ import annotations

import hashlib
import os
from collections import deque
from concurrent.futures import Executor, Future

from helios.core.errors import ChunkDigestMismatch, StoredLengthMismatch

CHUNK_NBYTES = 4 << 20


def chunk_count(stored_nbytes: int, chunk_nbytes: int = CHUNK_NBYTES) -> int:
    return -(-stored_nbytes // chunk_nbytes)


def chunk_digests(stored: bytes | memoryview) -> list[bytes]:
    """SHA-256 of each 4 MiB chunk of `stored`."""
    view = memoryview(stored)
    return [hashlib.sha256(view[i : i + CHUNK_NBYTES]).digest() for i in range(0, len(view), CHUNK_NBYTES)]


class StoredBytes:
    """The stored bytes of one resource: a range of an open file and the signed chunk digests."""

    __slots__ = ("_fd", "offset", "nbytes", "resource_id", "digests", "file_label")

    def __init__(
        self, fd: int, offset: int, nbytes: int, resource_id: str, digests: list[bytes], file_label: str
    ) -> None:
        self._fd = fd
        self.offset = offset  # first stored byte, in the file
        self.nbytes = nbytes  # signed stored length
        self.resource_id = resource_id
        self.digests = digests  # signed SHA-256 per 4 MiB chunk
        self.file_label = file_label  # "" for the core file, else the sibling file name

    def where(self, position: int) -> str:
        file = f" of {self.file_label!r}" if self.file_label else ""
        return f"resource {self.resource_id!r} at file offset {self.offset + position}{file}"

    def read_at(self, position: int, nbytes: int) -> bytes:
        """Unverified stored bytes from `position`, clamped to the resource's end (for structure checks)."""
        nbytes = max(0, min(nbytes, self.nbytes - position))
        return os.pread(self._fd, nbytes, self.offset + position) if nbytes else b""

    def _checked_chunk(self, index: int, again: bool) -> bytes:
        start = index * CHUNK_NBYTES
        expected = min(CHUNK_NBYTES, self.nbytes - start)
        data = os.pread(self._fd, expected, self.offset + start)
        if len(data) != expected:
            raise StoredLengthMismatch(
                f"{self.where(start + len(data))}: the file ends inside chunk {index} "
                f"({len(data)} of {expected} bytes)"
            )
        if hashlib.sha256(data).digest() != self.digests[index]:
            changed = " (the file changed after it was verified)" if again else ""
            raise ChunkDigestMismatch(
                f"{self.where(start)}: chunk {index} of {len(self.digests)} does not match its signed "
                f"SHA-256{changed}"
            )
        return data

    def verify_all(self, executor: Executor | None, keep: bool = False) -> list[bytes] | None:
        """Checks every chunk digest; raises for the lowest-numbered chunk that fails.

        With `keep`, returns the verified chunks so that they can be decoded without reading and
        hashing them again (for resources small enough to hold twice).
        """
        indices = range(len(self.digests))

        def check(index: int) -> bytes:
            return self._checked_chunk(index, again=False)

        results = map(check, indices) if executor is None or len(indices) < 2 else executor.map(check, indices)
        if keep:
            return list(results)
        deque(results, maxlen=0)  # NOTE: raises the lowest failing chunk's error; drops the bytes
        return None


class VerifiedReader:
    """`read(n)` over a resource's stored bytes: chunks verified in the first pass (`verified`), or
    each chunk read and hashed again, one ahead of the consumer, before it is released."""

    __slots__ = ("_stored", "_executor", "_next", "_pending", "_verified", "_chunk", "_position")

    _AHEAD = 2

    def __init__(self, stored: StoredBytes, executor: Executor | None, verified: list[bytes] | None = None) -> None:
        self._stored = stored
        self._executor = executor
        self._next = 0
        self._pending: deque[Future[bytes]] = deque()
        self._verified = deque(verified) if verified is not None else None
        self._chunk = b""
        self._position = 0
        if executor is not None and verified is None:
            for _ in range(self._AHEAD):
                self._submit()

    def _submit(self) -> None:
        if self._next < len(self._stored.digests):
            self._pending.append(self._executor.submit(self._stored._checked_chunk, self._next, True))
            self._next += 1

    def _advance(self) -> bool:
        if self._verified is not None:
            if not self._verified:
                return False
            self._chunk = self._verified.popleft()  # NOTE: released as consumed
        elif self._executor is None:
            if self._next >= len(self._stored.digests):
                return False
            self._chunk = self._stored._checked_chunk(self._next, again=True)
            self._next += 1
        else:
            if not self._pending:
                return False
            self._chunk = self._pending.popleft().result()
            self._submit()
        self._position = 0
        return True

    def read(self, nbytes: int) -> bytes:
        """Up to `nbytes` verified bytes (fewer only at the end of the resource)."""
        pieces = []
        while nbytes > 0:
            if self._position == len(self._chunk) and not self._advance():
                break
            if self._position == 0 and nbytes >= len(self._chunk):
                piece = self._chunk  # NOTE: whole chunks pass without a copy
            else:
                piece = self._chunk[self._position : self._position + nbytes]
            self._position += len(piece)
            nbytes -= len(piece)
            pieces.append(piece)
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    def close(self) -> None:
        for future in self._pending:
            future.cancel()
        self._pending.clear()
