"""Sealing a prepared model into a signed core (preparation side, host).

Owns the last step of `helios prepare`: validate the serving contract against the execution manifest
(`PreparedContract.decode`; an invalid contract is never sealed), then write one payload core with
`helios.core.write_core`, resources in preparation order. Deterministic: the same prepared model,
publisher and key give a byte-identical file.
"""

from __future__ import annotations

import os

from helios.ignition.prepare import PreparedCore


def seal(prepared: PreparedCore, path: str | os.PathLike, *, publisher: str, signing_key) -> None:
    """Validate `prepared` and write it to `path` as a payload core signed by `signing_key`."""
    from helios.contract import PreparedContract
    from helios.core import ResourceInput, write_core

    PreparedContract.decode(prepared.contract, prepared.manifest)  # raises the first ContractError
    write_core(path, publisher=publisher, signing_key=signing_key, deployment=prepared.deployment,
               resources=(ResourceInput(r.id, r.kind, r.data) for r in prepared.resources), format="payload")
