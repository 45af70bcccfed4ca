"""The execution geometry of a loaded `NativeModel`, as data and as text (`helios inspect --runtime`).

Reads only what `NativeModel.load` exposes (`manifests`, `pages`, `startup`, `weight_bytes`,
`linear_decisions`, `max_concurrency`, the device) and never imports torch itself, so the report can be built and
printed anywhere a loaded model is at hand. The report is JSON-ready: the selected graphs with their
capacities, the buffers with their loaded shapes (cache buffers carry the page count sized at load),
the cache's page geometry and byte size, the startup phases with their durations, and the path
chosen for each small matrix product shape, and the measured round cost of each DECODE and
SPECULATIVE graph (the adaptive speculative choice's table) when the load measured them, beside
each graph's served rounds when they were probed (`helios inspect --runtime --served-rounds N`,
helios/engine/served_probe.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from helios.proto import contract_pb2, manifest_pb2
from helios.runtime.costs import ServedCost

M = manifest_pb2

# Bytes per element of the manifest's dtypes (the names the manifest proto gives them).
_ELEMENT_BYTES = {"F32": 4, "BF16": 2, "F16": 2, "I32": 4, "I64": 8, "U8": 1, "U32": 4, "F64": 8}


def _dtype_name(value: int) -> str:
    return M.DType.Name(value).removeprefix("DTYPE_")


def _operation_name(value: int) -> str:
    return contract_pb2.Operation.Name(value).removeprefix("OPERATION_").lower()


def _nbytes(buffer: manifest_pb2.BufferDescriptor) -> int | None:
    size = _ELEMENT_BYTES.get(_dtype_name(buffer.dtype))
    if size is None:
        return None
    for extent in buffer.shape:
        size *= int(extent)
    return size


def runtime_report(model: Any, served: Sequence[ServedCost] = ()) -> dict[str, Any]:
    """What `model` (a loaded `NativeModel`) runs: graphs, buffers, cache, startup, product paths, and
    `served` (helios/engine/served_probe.py: each graph's served rounds, when probed)."""
    manifest = model.manifests[0]
    contract = model.contract
    page_tokens = contract.cache.page_tokens
    cache_buffers = [b for b in manifest.buffers if b.role == M.BUFFER_ROLE_CACHE]
    cache_bytes = sum(_nbytes(b) or 0 for b in cache_buffers)
    buffers = [{"name": b.name, "role": M.BufferRole.Name(b.role).removeprefix("BUFFER_ROLE_").lower(),
                "dtype": _dtype_name(b.dtype), "shape": [int(e) for e in b.shape], "bytes": _nbytes(b),
                "per_frame": b.per_frame} for b in manifest.buffers]
    graphs = [{"name": g.name, "operation": _operation_name(g.operation), "batch_capacity": g.batch_capacity,
               "packed_token_capacity": g.packed_token_capacity} for g in manifest.graphs]
    decisions = [{"shape": d.shape.describe(), "path": d.path, "label": d.label, "triton_us": d.triton_us,
                  "torch_us": d.torch_us} for d in model.linear_decisions]
    return {
        "device": str(model.device),
        "ranks": manifest.ranks,
        "frames": manifest.transport.frames,
        "weight_bytes": model.weight_bytes,
        "weight_bytes_per_rank": list(getattr(model, "rank_weight_bytes", (model.weight_bytes,))),
        "max_concurrency": model.max_concurrency,
        "context_tokens": contract.context_tokens,
        "cache": {"pages": model.pages, "page_tokens": page_tokens, "token_capacity": model.pages * page_tokens,
                  "planes": len(cache_buffers), "bytes": cache_bytes},
        "graphs": graphs,
        "buffers": buffers,
        "startup": [{"phase": p.name, "seconds": round(p.seconds, 4)} for p in model.startup],
        "linear_decisions": decisions,
        # the round costs measured at load (`LoadOptions.measure_costs`; empty when not measured)
        "round_costs": [{"graph": c.graph, "operation": c.operation_name, "lanes": c.lanes, "width": c.width,
                         "seconds": c.seconds} for c in costs.entries] if (costs := model.executor.round_costs()) else [],
        # served rounds' wall time, host work included (`--served-rounds`; empty when not probed)
        "served_round_costs": [{"graph": c.graph, "operation": c.operation_name, "lanes": c.lanes, "width": c.width,
                                "rounds": c.rounds, "seconds": c.seconds} for c in served],
    }


def _mib(nbytes: int | None) -> str:
    if nbytes is None:
        return "?"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:,.1f} {unit}"
    return f"{nbytes} B"


def format_runtime_report(report: dict[str, Any]) -> str:
    """`runtime_report` as the readable text `helios inspect --runtime` prints."""
    cache = report["cache"]
    lines = [
        f"device            {report['device']} (ranks {report['ranks']}, execution frames {report['frames']})",
        f"weights           {_mib(report['weight_bytes'])}" + (
            " (per rank: " + ", ".join(f"rank {r} {_mib(b)}" for r, b in enumerate(report["weight_bytes_per_rank"]))
            + "; the rest of this report is rank 0's, every rank loads the same graphs and pages)"
            if len(report.get("weight_bytes_per_rank", ())) > 1 else ""),
        f"cache             {cache['pages']:,} pages x {cache['page_tokens']} tokens = {cache['token_capacity']:,} "
        f"tokens in {cache['planes']} planes, {_mib(cache['bytes'])}",
        f"concurrency       {report['max_concurrency']} requests, context {report['context_tokens']:,} tokens",
        "startup           " + ", ".join(f"{p['phase']} {p['seconds']:.2f} s" for p in report["startup"])
        + f" (total {sum(p['seconds'] for p in report['startup']):.2f} s)",
        "",
    ]
    lines += _table([("graph", "operation", "batch", "packed tokens")] + [
        (g["name"], g["operation"], str(g["batch_capacity"]), str(g["packed_token_capacity"]))
        for g in report["graphs"]])
    lines.append("")
    lines += _table([("buffer", "role", "dtype", "shape", "size")] + [
        (b["name"], b["role"], b["dtype"], "x".join(map(str, b["shape"])) or "scalar", _mib(b["bytes"]))
        for b in report["buffers"]])
    if report["linear_decisions"]:
        lines.append("")
        # a norm prologue's row: "fused" (the triton column) or "apart" (the torch column: the norm kernel,
        # then the product's Triton launch)
        lines += _table([("matrix product", "path", "triton / fused us", "torch / apart us")] + [
            (d["shape"], d["label"], _us(d["triton_us"]), _us(d["torch_us"]))
            for d in report["linear_decisions"]])
    if report.get("round_costs") or report.get("served_round_costs"):
        # the load-time table, and beside it each graph's served rounds when they were probed
        served = {c["graph"]: c for c in report.get("served_round_costs", ())}
        table = {c["graph"]: c for c in report.get("round_costs", ())}
        header = ("round cost", "operation", "lanes", "width", "ms") + (("served ms", "served rounds") if served else ())
        rows = []
        for c in sorted([*table.values(), *(c for g, c in served.items() if g not in table)],
                        key=lambda c: (c["operation"], c["width"], c["lanes"])):
            measured = f"{table[c['graph']]['seconds'] * 1e3:.3f}" if c["graph"] in table else "-"
            row = (c["graph"], c["operation"], str(c["lanes"]), str(c["width"]), measured)
            if served:
                s = served.get(c["graph"])
                row += (f"{s['seconds'] * 1e3:.3f}", str(s["rounds"])) if s else ("-", "0")
            rows.append(row)
        lines.append("")
        lines += _table([header] + rows)
    return "\n".join(lines)


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]


__all__ = ["format_runtime_report", "runtime_report"]
