"""Reading a core without trusting it (host side): `inspect_core` for `helios inspect`.

Everything reported comes from the file as it is. Unless trusted keys are given and the signature
verifies, the report says the signature is unverified and that the publisher namespace and the
resource list are the file's claims, not facts. No resource byte is read or decoded.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from helios.core.envelope import parse_signed, verify_signature
from helios.core.errors import CoreFormatError
from helios.core.keys import TrustInput, load_trusted_keys
from helios.core.layout import check_locations, read_container, sibling_names
from helios.proto import core_pb2


def inspect_core(
    path: str | os.PathLike, trusted_keys: TrustInput | Iterable[TrustInput] | None = None
) -> dict:
    """A plain-data description of a core; `signature.status` is "verified" only with a trusted key."""
    path = os.fspath(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        container = read_container(fd)
    finally:
        os.close(fd)
    body = container.body
    report: dict = {
        "path": path,
        "file_nbytes": container.file_nbytes,
        "format_version": body.format_version,
        "body_offset": container.body_offset,
        "body_nbytes": container.file_nbytes - container.body_offset,
        "signature": {"public_key": bytes(body.public_key).hex(), "status": "unverified",
                      "detail": "no trusted key given: everything below is the file's claim"},
    }
    if trusted_keys is not None:
        try:
            verify_signature(body, load_trusted_keys(trusted_keys))
            report["signature"].update(status="verified", detail="signed by a trusted key")
        except CoreFormatError as error:
            report["signature"].update(status="invalid", detail=f"{type(error).__name__}: {error}")
    try:
        claims = parse_signed(body, strict=False)
    except CoreFormatError as error:
        report["error"] = f"{type(error).__name__}: {error}"
        return report
    contract, manifest, resources = claims.contract, claims.manifest, claims.resources
    placements = {loc.resource_id: loc for loc in body.locations.locations}
    report.update(
        format=claims.format,
        publisher_namespace=claims.publisher,
        resources=[
            {
                "id": r.id,
                "kind": core_pb2.ResourceKind.Name(r.kind) if r.kind in core_pb2.ResourceKind.values() else str(r.kind),
                "stored_nbytes": r.stored_nbytes,
                "decoded_nbytes": r.decoded_nbytes,
                "chunks": len(r.chunk_sha256),
                "file": placements[r.id].file if r.id in placements else None,
                "offset": placements[r.id].offset if r.id in placements else None,
            }
            for r in resources
        ],
        contract={
            "served_id": contract.served_id,
            "aliases": list(contract.aliases),
            "context_tokens": contract.context_tokens,
            "prefill_tokens": contract.prefill_tokens,
            "max_concurrency": contract.max_concurrency,
            "speculative_widths": list(contract.speculative_widths),
            "model_version": contract.model.version,
            "graphs": len(contract.model.graphs),
        },
        manifest={
            "abi_label": manifest.abi_label,
            "ranks": manifest.ranks,
            "buffers": len(manifest.buffers),
            "graphs": len(manifest.graphs),
        },
    )
    try:
        sizes = {name: (Path(path).parent / name).stat().st_size for name in sibling_names(body)}
        check_locations(container, {r.id: r.stored_nbytes for r in resources}, sizes)
        report["layout"] = "every byte accounted for"
    except (CoreFormatError, OSError) as error:
        report["layout"] = f"{type(error).__name__}: {error}"
    report["ranks"] = _rank_programs(manifest, resources)
    return report


def _rank_programs(manifest, resources) -> list[dict]:
    """Each rank's programs (the r-th program resource of every graph handle) and their bytes, as the
    manifest claims; its weights are in its weight catalog, which only a verified read may decode."""
    sizes = {r.id: r.decoded_nbytes for r in resources}
    ranks = []
    for rank in range(manifest.ranks):
        ids = [h.program_resources[rank] for h in manifest.graphs if rank < len(h.program_resources)]
        ranks.append({"rank": rank, "programs": len(ids), "program_nbytes": sum(sizes.get(i, 0) for i in ids)})
    return ranks


def format_inspection(report: dict) -> str:
    """The report as a readable table (what `helios inspect` prints without --json)."""
    signature = report["signature"]
    lines = [
        f"core              {report['path']}",
        f"format            {report.get('format', '?')} (CoreBody.format_version {report['format_version']})",
        f"size              {report['file_nbytes']:,} bytes (body {report['body_nbytes']:,} at {report['body_offset']:,})",
        f"signature         {signature['status'].upper()}: {signature['detail']}",
        f"signer key        {signature['public_key'] or '(none)'}",
    ]
    if "error" in report:
        return "\n".join([*lines, f"error             {report['error']}"])
    claim = "" if signature["status"] == "verified" else "  (claimed, unverified)"
    contract, manifest = report["contract"], report["manifest"]
    lines += [
        f"publisher         {report['publisher_namespace']!r}{claim}",
        f"layout            {report['layout']}",
        f"contract          served_id={contract['served_id']!r} aliases={contract['aliases']} "
        f"context={contract['context_tokens']} prefill={contract['prefill_tokens']} "
        f"concurrency={contract['max_concurrency']} model v{contract['model_version']} "
        f"graphs={contract['graphs']}",
        f"manifest          abi={manifest['abi_label']!r} ranks={manifest['ranks']} "
        f"buffers={manifest['buffers']} graphs={manifest['graphs']}",
        "",
    ]
    rows = [("id", "kind", "stored", "decoded", "chunks", "location")]
    for r in report["resources"]:
        where = "unplaced" if r["offset"] is None else f"{r['file'] or '(this file)'}@{r['offset']}"
        rows.append((r["id"], r["kind"].removeprefix("RESOURCE_KIND_"), f"{r['stored_nbytes']:,}",
                     f"{r['decoded_nbytes']:,}", str(r["chunks"]), where))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        lines.append("  ".join(cell.ljust(w) if i in (0, 1, 5) else cell.rjust(w)
                               for i, (cell, w) in enumerate(zip(row, widths, strict=True))).rstrip())
    total_stored = sum(r["stored_nbytes"] for r in report["resources"])
    total_decoded = sum(r["decoded_nbytes"] for r in report["resources"])
    lines.append(f"{len(report['resources'])} resources, {total_stored:,} bytes stored, {total_decoded:,} decoded")
    lines += ["", *format_ranks(report.get("ranks", []))]
    return "\n".join(lines)


def format_ranks(ranks: list[dict]) -> list[str]:
    """The ranks table: each rank's programs and, when its catalog was read, its weights."""
    lines = [f"ranks             {len(ranks)}"]
    for r in ranks:
        line = f"  rank {r['rank']}  programs {r['programs']} ({r['program_nbytes']:,} bytes)"
        if "catalog" in r:
            line += (f"  catalog {r['catalog'] or '(none)'}  weights {r['weights']} "
                     f"({r['weight_nbytes']:,} bytes)")
        lines.append(line)
    if ranks and not any("catalog" in r for r in ranks):
        lines.append("  weights per rank: read from the weight catalogs with --trust PUBKEY --accept NAMESPACE")
    return lines
