"""Opening cores (host side): `open_core` verifies, authorizes and lays out; `Core` reads lazily.

`open_core` reads only the header and the body: it checks the signature against the caller's
trusted keys, authorizes the acceptance string, checks the signed envelope and that the LocationSet
tiles every file. Resource bytes are touched only when a resource is read: `Core.read_into` checks
every chunk digest, then the frame structure (or the version-4 key), and only then decodes into the
caller's buffer. A resource stored in at most 64 MiB is decoded from the chunks the digest pass
read; a larger one is read again, each chunk hashed again as the decoder consumes it, so memory
stays at the caller's buffer plus 64 MiB at most per resource being read. On any error the caller's
buffer is zeroed, so no unverified byte is left in it. Hashing runs on a small thread pool beside
the decoding thread (hashlib and zstd release the GIL).

`Core.read_each_into` reads many resources at once: each one is verified and decoded, whole, by
one of a few decoding threads straight into the buffer the caller hands out for it, and is yielded
only once complete and verified; at most `decoders` resources are in flight, so memory stays
bounded however large the core. A core under 16 MiB of decoded bytes is read on the caller's
thread alone.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from types import MappingProxyType

from helios.core.chunks import CHUNK_NBYTES, StoredBytes, VerifiedReader
from helios.core.envelope import SignedContent, authorize, parse_signed, verify_signature
from helios.core.errors import (
    BufferSizeMismatch,
    CoreFileUnavailable,
    ProtectionKeyMismatch,
    ResourceNotFound,
    SiblingFileInvalid,
    UntrustedKey,
)
from helios.core.frame import check_frame, decode_into
from helios.core.keys import TrustInput, load_trusted_keys, protection_key_id, resolve_protection_key
from helios.core.layout import Container, Placement, check_locations, read_container, sibling_names
from helios.core.protected import unseal_into
from helios.proto import contract_pb2, core_pb2, manifest_pb2

_SCRATCH_NBYTES = 1 << 20
_KEEP_VERIFIED_NBYTES = 64 << 20  # resources stored in at most this are hashed and read once
_PARALLEL_MIN_NBYTES = 16 << 20  # read_each_into reads fewer decoded bytes than this on one thread


def _zero(view: memoryview) -> None:
    zeros = bytes(min(len(view), _SCRATCH_NBYTES))
    for start in range(0, len(view), _SCRATCH_NBYTES):
        piece = view[start : start + _SCRATCH_NBYTES]
        piece[:] = zeros[: len(piece)]


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def default_workers() -> int:
    """Hashing threads beside the caller's decoding thread: one per core, at most four."""
    return max(1, min(4, _usable_cpus()))


def default_decoders() -> int:
    """Resources `read_each_into` decodes at once: one per usable core, at most eight (memory stays
    at eight resources' buffers plus their verified chunks)."""
    return max(1, min(8, _usable_cpus()))


class Core:
    """A verified, authorized core. Resources are read (and verified) on demand."""

    def __init__(
        self,
        path: str,
        fds: dict[str, int],
        container: Container,
        content: SignedContent,
        placements: dict[str, Placement],
        protection_key: bytes | None,
        workers: int,
        decoders: int = 1,
    ) -> None:
        self.path = path
        self._fds = fds  # "" -> the core file; sibling name -> its file
        self._container = container
        self._content = content
        self._placements = placements
        self._protection_key = protection_key
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix="helios-core") if workers > 0 else None
        self._decoders = max(1, decoders)  # resources read_each_into decodes at once
        self.resources = MappingProxyType({r.id: r for r in content.resources})  # id -> ExecutableResource

    @property
    def publisher(self) -> str:
        return self._content.publisher

    @property
    def format(self) -> str:
        """The format: "payload", "index-v6" or "index-v4"."""
        return self._content.format

    @property
    def contract(self) -> contract_pb2.ServingContract:
        return self._content.contract

    @property
    def manifest(self) -> manifest_pb2.ExecutionManifest:
        return self._content.manifest

    @property
    def public_key(self) -> bytes:
        """The raw Ed25519 key (one of the trusted keys) that signed this core."""
        return bytes(self._container.body.public_key)

    @property
    def body(self) -> core_pb2.CoreBody:
        return self._container.body

    def placement(self, resource_id: str) -> Placement:
        self._resource(resource_id)
        return self._placements[resource_id]

    def _resource(self, resource_id: str) -> core_pb2.ExecutableResource:
        resource = self.resources.get(resource_id)
        if resource is None:
            raise ResourceNotFound(f"resource {resource_id!r} is not in core {self.path!r}")
        if not self._fds:
            raise ValueError(f"core {self.path!r} is closed")
        return resource

    def _stored(self, resource: core_pb2.ExecutableResource) -> StoredBytes:
        placement = self._placements[resource.id]
        return StoredBytes(
            self._fds[placement.file], placement.offset, placement.nbytes, resource.id,
            list(resource.chunk_sha256), placement.file,
        )

    def _first_pass(
        self, resource_id: str, executor: ThreadPoolExecutor | None
    ) -> tuple[core_pb2.ExecutableResource, StoredBytes, list[bytes] | None]:
        """Checks every chunk digest of one resource; keeps the chunks of a small one."""
        resource = self._resource(resource_id)
        stored = self._stored(resource)
        return resource, stored, stored.verify_all(executor, keep=stored.nbytes <= _KEEP_VERIFIED_NBYTES)

    def _second_pass(
        self, resource: core_pb2.ExecutableResource, stored: StoredBytes, verified: list[bytes] | None,
        out: memoryview | None,
    ) -> None:
        """Checks the frame (or the version-4 stream) and decodes verified bytes into `out`."""
        reader = VerifiedReader(stored, self._executor, verified)
        del verified
        try:
            if self._protection_key is not None:
                unseal_into(
                    reader.read, stored.nbytes, out, resource.decoded_nbytes, resource.id,
                    self._protection_key, self._content.encrypted_chunk_nbytes, stored.where,
                )
            else:
                check_frame(stored.read_at, stored.nbytes, resource.decoded_nbytes, stored.where)
                if out is None:
                    out = memoryview(bytearray(min(max(resource.decoded_nbytes, 1), _SCRATCH_NBYTES)))
                decode_into(reader.read, out, resource.decoded_nbytes, stored.where, CHUNK_NBYTES)
        finally:
            reader.close()

    def _output(self, resource_id: str, out: memoryview | bytearray) -> memoryview:
        resource = self._resource(resource_id)
        view = memoryview(out)
        if view.readonly:
            raise BufferSizeMismatch(f"resource {resource_id!r}: the output buffer is read-only")
        view = view.cast("B") if view.format != "B" or view.ndim != 1 else view
        if view.nbytes != resource.decoded_nbytes:
            raise BufferSizeMismatch(
                f"resource {resource_id!r}: the output buffer has {view.nbytes} bytes, the signed decoded "
                f"length is {resource.decoded_nbytes}"
            )
        return view

    def read_into(self, resource_id: str, out: memoryview | bytearray) -> None:
        """Verifies resource `resource_id` and decodes it into `out` (exactly its decoded length)."""
        view = self._output(resource_id, out)
        try:
            self._second_pass(*self._first_pass(resource_id, self._executor), view)
        except BaseException:
            _zero(view)
            raise

    def read_many_into(self, items: Iterable[tuple[str, memoryview | bytearray]]) -> None:
        """`read_into` for each (id, buffer), several resources at once (see `read_each_into`).

        On an error, the failing resource's buffer is zeroed and the lowest-placed failure in
        `items` among those started is raised; every other buffer holds its verified bytes or what
        the caller left in it (a resource never started), never unverified bytes.
        """
        views = [(resource_id, self._output(resource_id, out)) for resource_id, out in items]
        handed = iter(view for _, view in views)
        for _ in self.read_each_into([resource_id for resource_id, _ in views], lambda _: next(handed)):
            pass

    def read_each_into(
        self,
        resource_ids: Sequence[str],
        destination: Callable[[str], memoryview | bytearray],
        *,
        decoders: int | None = None,
    ) -> Iterator[tuple[str, memoryview]]:
        """Verifies and decodes each resource into the buffer `destination(id)` returns; yields
        (id, buffer view) as each one is complete and verified, in the order they complete.

        `destination` is called on the caller's thread, once per id in the order of `resource_ids`,
        just before that resource starts, so the caller can hand out staging buffers lazily and
        reuse them after the resource is yielded. At most `decoders` (default: the core's, from
        `open_core`) resources are in flight; each is decoded by one thread, straight into its
        buffer, with the guarantees of `read_into`. A resource is yielded only after every byte of
        it verified; on an error no further resource starts, those in flight finish (a failing
        one's buffer is zeroed) and the error of the first failing id in `resource_ids` is raised.
        """
        ids = list(resource_ids)
        for resource_id in ids:
            self._resource(resource_id)  # an unknown id fails before any work
        decoders = self._decoders if decoders is None else decoders
        total = sum(self.resources[resource_id].decoded_nbytes for resource_id in ids)
        if decoders <= 1 or len(ids) < 2 or total < _PARALLEL_MIN_NBYTES:
            for resource_id in ids:
                view = self._output(resource_id, destination(resource_id))
                self.read_into(resource_id, view)
                yield resource_id, view
            return
        yield from self._read_parallel(ids, destination, min(decoders, len(ids)))

    def _read_parallel(
        self, ids: list[str], destination: Callable[[str], memoryview | bytearray], decoders: int
    ) -> Iterator[tuple[str, memoryview]]:
        # NOTE: decoding threads hash through self._executor, a separate pool whose tasks never
        # wait on other tasks, so no pool waits on itself.
        running: dict[Future[None], tuple[int, str, memoryview]] = {}
        failures: list[tuple[int, BaseException]] = []
        with ThreadPoolExecutor(decoders, thread_name_prefix="helios-decode") as pool:
            try:
                upcoming = iter(enumerate(ids))
                while True:
                    while not failures and len(running) < decoders:
                        index, resource_id = next(upcoming, (-1, ""))
                        if index < 0:
                            break
                        view = self._output(resource_id, destination(resource_id))
                        running[pool.submit(self.read_into, resource_id, view)] = (index, resource_id, view)
                    if not running:
                        break
                    done, _ = wait(running, return_when=FIRST_COMPLETED)
                    finished = sorted((running.pop(future), future) for future in done)
                    failures.extend((index, f.exception()) for (index, _, _), f in finished if f.exception())
                    if failures:
                        continue  # drain: let what is in flight finish, start nothing new
                    for (_, resource_id, view), _ in finished:
                        yield resource_id, view
            finally:
                wait(running)  # NOTE: a consumer that stops early still waits for the threads it started
        if failures:
            raise min(failures, key=lambda failure: failure[0])[1]

    def read(self, resource_id: str) -> bytes:
        """The verified, decoded bytes of one resource (use `read_into` for large ones: no second copy)."""
        buffer = bytearray(self._resource(resource_id).decoded_nbytes)
        self.read_into(resource_id, buffer)
        return bytes(buffer)

    def verify(self, resource_id: str) -> None:
        """Checks one resource completely (digests, frame, decoding) without keeping its bytes."""
        self._second_pass(*self._first_pass(resource_id, self._executor), None)

    def verify_all(self) -> None:
        for resource_id in self.resources:
            self.verify(resource_id)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
        for fd in self._fds.values():
            os.close(fd)
        self._fds = {}

    def __enter__(self) -> Core:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_fds", None):
            self.close()


def open_core(
    path: str | os.PathLike,
    *,
    trusted_keys: TrustInput | Iterable[TrustInput],
    accept: str,
    protection_key: bytes | str | os.PathLike | None = None,
    workers: int | None = None,
    decoders: int | None = None,
) -> Core:
    """Opens a core: verifies its signature with one of `trusted_keys`, authorizes `accept` exactly,
    checks its envelope and layout. Resource bytes are verified later, when read.

    `trusted_keys`: a public key, its 32 raw bytes, a key file, a directory of `.pub` files, or an
    iterable of these. `protection_key` (version-4 cores only): the AES-256 key or its file, else
    HELIOS_PROTECTION_KEY_FILE. `workers`: hashing threads (default `default_workers()`, 0: none).
    `decoders`: resources `read_each_into` and `read_many_into` decode at once (default
    `default_decoders()`; 1 when `workers` is 0, so that workers=0 reads on the caller's thread alone).
    """
    path = os.fspath(path)
    trusted = load_trusted_keys(trusted_keys)
    if not trusted:
        raise UntrustedKey(f"no trusted public key was given to verify {path!r}")
    try:
        fds: dict[str, int] = {"": os.open(path, os.O_RDONLY)}
    except OSError as error:  # the same exit (3) in every command that reads a core
        raise CoreFileUnavailable(f"{path}: cannot read: {error.strerror}") from None
    try:
        container = read_container(fds[""])
        verify_signature(container.body, trusted)
        content = parse_signed(container.body)
        authorize(content, accept)
        for name in sibling_names(container.body):
            try:
                fds[name] = os.open(Path(path).parent / name, os.O_RDONLY)
            except OSError as error:
                raise SiblingFileInvalid(f"sibling file {name!r} cannot be opened: {error.strerror}") from None
        sizes = {name: os.fstat(fd).st_size for name, fd in fds.items() if name}
        placements = check_locations(container, {r.id: r.stored_nbytes for r in content.resources}, sizes)
        key = None
        if content.format == "index-v4":
            key = resolve_protection_key(protection_key, f"core {path!r}")
            if protection_key_id(key) != content.protection_key_id:
                raise ProtectionKeyMismatch(
                    f"core {path!r}: the protection key given is not the one its index names "
                    f"({content.protection_key_id.hex()})"
                )
        workers = default_workers() if workers is None else workers
        if decoders is None:
            decoders = default_decoders() if workers > 0 else 1
        return Core(path, fds, container, content, placements, key, workers, decoders)
    except BaseException:
        for fd in fds.values():
            os.close(fd)
        raise
