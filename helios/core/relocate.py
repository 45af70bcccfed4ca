"""Moving resources between a core file and sibling files (host side): `relocate_core`.

Only the unsigned LocationSet and the placement of stored bytes change; the signed envelope and the
signature are copied as they are, so no key is needed. The stored bytes are copied in 4 MiB pieces,
never decoded. Every output file is written beside its final name and renamed into place at the
end, and each is tiled exactly by the resources it holds.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from helios.core.errors import LocationInvalid
from helios.core.layout import (
    HEADER_NBYTES,
    check_sibling_name,
    encode_header,
    read_container,
    sibling_names,
    write_body,
)
from helios.proto import core_pb2

_COPY_NBYTES = 4 << 20


def _copy(source_fd: int, offset: int, nbytes: int, sink) -> None:
    while nbytes:
        piece = os.pread(source_fd, min(nbytes, _COPY_NBYTES), offset)
        if not piece:
            raise LocationInvalid(f"file offset {offset}: the file ends {nbytes} bytes before a resource does")
        sink.write(piece)
        offset += len(piece)
        nbytes -= len(piece)


def relocate_core(path: str | os.PathLike, placement: Mapping[str, str]) -> None:
    """Rewrites core `path` so that each resource id in `placement` lies in the named sibling file
    ("" puts it back in the core file); the other resources stay in the file they are in.

    Sibling files are written in the core's directory, each holding its resources in LocationSet
    order. A sibling file that no resource uses any more is left on disk untouched.
    """
    path = Path(path)
    fds = {"": os.open(path, os.O_RDONLY)}
    outputs: dict[str, object] = {}
    partial: dict[str, Path] = {}
    try:
        container = read_container(fds[""])
        for name in sibling_names(container.body):
            fds[name] = os.open(path.parent / name, os.O_RDONLY)
        locations = {loc.resource_id: loc for loc in container.body.locations.locations}
        for rid, name in placement.items():
            if rid not in locations:
                raise LocationInvalid(f"core {os.fspath(path)!r} has no resource {rid!r} to relocate")
            if name:
                check_sibling_name(name, rid)
        targets = {rid: placement.get(rid, loc.file) for rid, loc in locations.items()}
        for name in dict.fromkeys(["", *targets.values()]):
            final = path if not name else path.parent / name
            partial[name] = final.with_name(final.name + ".partial")
            outputs[name] = open(partial[name], "wb")
        outputs[""].write(encode_header(0, 0))
        cursors = {name: HEADER_NBYTES if not name else 0 for name in outputs}
        body = core_pb2.CoreBody()
        body.CopyFrom(container.body)
        del body.locations.locations[:]
        for rid, source in locations.items():
            name = targets[rid]
            _copy(fds[source.file], source.offset, source.nbytes, outputs[name])
            body.locations.locations.add(resource_id=rid, file=name, offset=cursors[name], nbytes=source.nbytes)
            cursors[name] += source.nbytes
        write_body(outputs[""], body, cursors[""])
        for output in outputs.values():
            output.close()
        for name, temporary in partial.items():
            os.replace(temporary, path if not name else path.parent / name)
        partial.clear()
    finally:
        for output in outputs.values():
            output.close()
        for fd in fds.values():
            os.close(fd)
        for temporary in partial.values():
            temporary.unlink(missing_ok=True)
