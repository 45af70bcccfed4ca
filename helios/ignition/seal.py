"""Sealing a prepared model into a signed core (preparation side, host).

Owns the last step of `helios prepare`: validate the serving contract against the execution manifest
(`PreparedContract.decode`; an invalid contract is never sealed) and check that the core carries every
resource a graph names, then write one payload core with
`helios.core.write_core`, resources in preparation order. Deterministic: the same prepared model,
publisher and key give a byte-identical file.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

from helios.ignition.prepare import PreparedCore
from helios.proto import core_pb2

Progress = Callable[[int, int, str], None]  # (weights converted, weights in all, resource id)


def seal(prepared: PreparedCore, path: str | os.PathLike, *, publisher: str, signing_key,
         progress: Progress | None = None) -> None:
    """Validate `prepared` and write it to `path` as a payload core signed by `signing_key`.

    Weights convert one at a time as the writer consumes them; `progress` hears of each.
    """
    from helios.contract import PreparedContract
    from helios.core import ResourceInput, write_core

    contract = PreparedContract.decode(prepared.contract, prepared.manifest)  # raises the first ContractError
    contract.check_resources(r.id for r in prepared.resources)  # every program and dependency is carried
    total = sum(1 for r in prepared.resources if r.kind == core_pb2.RESOURCE_KIND_WEIGHT)

    def resources() -> Iterator[ResourceInput]:
        done = 0
        if progress is not None:
            progress(0, total, "")
        for resource in prepared.resources:
            data = resource.produce()
            if resource.kind == core_pb2.RESOURCE_KIND_WEIGHT:
                done += 1
                if progress is not None:
                    progress(done, total, resource.id)
            yield ResourceInput(resource.id, resource.kind, data)
            del data

    write_core(path, publisher=publisher, signing_key=signing_key, deployment=prepared.deployment,
               resources=resources(), format="payload")
