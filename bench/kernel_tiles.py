"""Tile sweeps of the decode kernels on a GPU: the skinny products and paged attention.

    python3 bench/kernel_tiles.py                      # both sweeps, Qwen3-0.6B shapes
    python3 bench/kernel_tiles.py --sweep attention --budget 120

Each candidate tile is timed the way a decode step runs it (`product_choice.GraphTimer`: several calls
captured in one CUDA graph, L2 flushed before each, the flush's own time subtracted). For every case
the script prints the tile the code chooses today, the fastest candidates, and each one's bandwidth
(bytes it must read over its time) as a fraction of the device-to-device copy bandwidth measured in
the same run. Every candidate's output is first checked against the default tile's (which the
kernel tests check against the reference operators). What it prints is what `choose_blocks` and
`attention.choose_tile` should pick; the chosen figures go to BENCHMARKS.md with this command.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# (name, group widths N, K) of one decoder layer's products; gated: N is the width of each half
LINEAR_SHAPES = {
    "qwen3-0.6b": [("qkv", (2048, 1024, 1024), 1024), ("o", (1024,), 2048), ("gate_up", (3072,), 1024),
                   ("down", (1024,), 3072)],
    "llama-8b": [("qkv", (4096, 1024, 1024), 4096), ("o", (4096,), 4096), ("gate_up", (14336,), 4096),
                 ("down", (4096,), 14336)],
}
ATTENTION_SHAPES = {"qwen3-0.6b": (16, 8, 128), "llama-8b": (32, 8, 128)}  # heads, kv heads, head dim


def linear_tiles(rows: int, k: int, kinds: tuple[str, ...] = ("fma", "mma")):
    """Candidate tiles: CUDA-core ("fma") tiles, and from two rows tensor-core ("mma") ones."""
    from helios.production.kernels.linear import MMA_MIN, Blocks

    block_m = 1 if rows == 1 else 16 if rows > 8 else 8
    if "fma" in kinds:
        if rows == 1:
            grid = itertools.product((1, 2, 4, 8), (256, 512, 1024, 2048, 4096), (2, 4, 8))
            budget = 16384
        else:
            grid = itertools.product((2, 4, 8, 16), (128, 256, 512, 1024), (4, 8))
            budget = 32768
        for block_n, block_k, warps in grid:
            if block_k <= max(k, 256) and block_m * block_n * block_k <= budget:
                yield Blocks(block_m, block_n, block_k, warps)
    if "mma" in kinds and rows > 1:
        for block_n, block_k, stages, warps in itertools.product((16, 32, 64), (128, 256), (3, 4, 6), (4,)):
            if block_k <= max(k, 256):
                yield Blocks(MMA_MIN, block_n, block_k, warps, mma=True, num_stages=stages)


def sweep_linear(shape: str, rows_list, timer, bandwidth: float, deadline: float,
                 kinds: tuple[str, ...] = ("fma", "mma")) -> list[dict]:
    results = []
    for rows, (name, widths, k) in itertools.product(rows_list, LINEAR_SHAPES[shape]):
        row = _linear_case(shape, rows, name, widths, k, timer, bandwidth, deadline, kinds)
        if row is not None:
            results.append(row)
    return results


def _linear_case(shape: str, rows: int, name: str, widths: tuple[int, ...], k: int, timer, bandwidth: float,
                 deadline: float, kinds: tuple[str, ...]) -> dict | None:
    import torch

    from helios.production.kernels import linear

    device = timer.device
    gated = name == "gate_up"
    x = torch.randn(rows, k, device=device, dtype=torch.bfloat16)
    weights = [torch.randn(n, k, device=device, dtype=torch.bfloat16) * 0.02 for n in (widths * 2 if gated else widths)]
    outs = [torch.empty(rows, n, device=device, dtype=torch.bfloat16) for n in widths]
    read = sum(w.numel() * 2 for w in weights)

    def launch(blocks):
        if gated:
            return linear.gated_launch(x, weights[0], weights[1], outs[0], activation="silu", blocks=blocks)
        return linear.linear_launch(x, weights, outs, blocks=blocks)

    default = linear.choose_blocks(rows, sum(widths), k, cuda=True, gated=gated, tensor_cores=True)
    launch(default)()
    expected = [o.clone() for o in outs]
    timed = []
    for blocks in [default, *[b for b in linear_tiles(rows, k, kinds) if b != default]]:
        if time.perf_counter() > deadline:
            break
        run = launch(blocks)
        try:
            run()
        except Exception as error:  # a tile past the shared memory or registers of the device
            if type(error).__name__ != "OutOfResources":
                raise
            print(f"  {name} M={rows} {blocks}: out of resources, skipped", flush=True)
            continue
        if not all(torch.allclose(o.float(), e.float(), atol=2e-2, rtol=2e-2)
                   for o, e in zip(outs, expected, strict=True)):
            print(f"  {name} M={rows} {blocks}: WRONG OUTPUT, skipped", flush=True)
            continue
        timed.append((timer(run), blocks))
    if not timed:
        return None
    base = timed[0][0]
    best = sorted(timed, key=lambda t: t[0])[:3]
    torch_s = None
    if not gated and len(widths) == 1:
        torch_s = timer(lambda: torch.matmul(x, weights[0].t(), out=outs[0]))
    top = best[0]
    by_kind = {kind: min((t for t in timed if t[1].mma == (kind == "mma")), key=lambda t: t[0], default=None)
               for kind in ("fma", "mma")}
    kinds_line = "".join(f"; best {kind} {t[0] * 1e6:.2f} us ({read / t[0] / bandwidth:.2f})"
                         for kind, t in by_kind.items() if t is not None)
    print(f"  {shape} {name:7s} M={rows:2d}: default {base * 1e6:7.2f} us ({read / base / bandwidth:.2f} of bw) "
          f"best {top[0] * 1e6:7.2f} us ({read / top[0] / bandwidth:.2f}) {top[1]}" + kinds_line
          + (f"; torch {torch_s * 1e6:.2f} us" if torch_s else "") + f"  [{len(timed)} tiles]", flush=True)
    return {"shape": shape, "product": name, "rows": rows, "k": k, "widths": list(widths), "bytes": read,
            "default": asdict(default), "default_us": base * 1e6, "torch_us": torch_s and torch_s * 1e6,
            "best_by_kind": {kind: t and {"blocks": asdict(t[1]), "us": t[0] * 1e6} for kind, t in by_kind.items()},
            "best": [{"blocks": asdict(b), "us": s * 1e6, "of_bandwidth": read / s / bandwidth} for s, b in best],
            "candidates": len(timed)}


def sweep_attention(shape: str, cases, timer, bandwidth: float, deadline: float) -> list[dict]:
    from helios.production.kernels import attention

    tiles = [attention.AttentionTile(block_n=n, num_warps=w, num_stages=s, dot=d)
             for n, w, s, d in itertools.product((32, 64, 128), (2, 4, 8), (None, 3), (True, False))]
    results = []
    for rows, context in cases:
        results += _attention_case(shape, rows, context, tiles, timer, bandwidth, deadline)
    return results


def _attention_case(shape: str, rows: int, context: int, tiles, timer, bandwidth: float,
                    deadline: float) -> list[dict]:
    import torch

    from helios.production.kernels import attention

    heads, kv_heads, head_dim = ATTENTION_SHAPES[shape]
    device = timer.device
    page_tokens = 16
    pages_per_lane = context // page_tokens + 1
    pages = rows * pages_per_lane
    generator = torch.Generator(device="cpu").manual_seed(0)
    table = torch.randperm(pages, generator=generator).reshape(rows, pages_per_lane).to(device=device,
                                                                                     dtype=torch.int32)
    key_cache = torch.randn(pages, page_tokens, kv_heads, head_dim, device=device, dtype=torch.bfloat16)
    value_cache = torch.randn_like(key_cache)
    q = torch.randn(rows, heads * head_dim, device=device, dtype=torch.bfloat16)
    out = torch.empty_like(q)
    lanes = torch.arange(rows, device=device, dtype=torch.int32)
    positions = torch.full((rows,), context - 1, device=device, dtype=torch.int32)
    read = rows * context * kv_heads * head_dim * 2 * 2
    results = []
    for splits in sorted({1, attention.choose_splits(rows, kv_heads, 2048)}):
        scratch = attention.split_scratch(rows, heads, head_dim, splits, device) if splits > 1 else None

        def launch(tile, splits=splits, scratch=scratch):
            return lambda: attention.paged_attention(q, key_cache, value_cache, lanes, positions, table, out,
                                                     scale=head_dim ** -0.5, splits=splits, scratch=scratch,
                                                     tile=tile)

        default = attention.choose_tile(rows, heads // kv_heads, cuda=True)
        launch(default)()
        expected = out.clone()
        timed = []
        for tile in [default, *[t for t in tiles if t != default]]:
            if time.perf_counter() > deadline:
                break
            run = launch(tile)
            run()
            if not torch.allclose(out.float(), expected.float(), atol=2e-2, rtol=2e-2):
                print(f"  attention rows={rows} ctx={context} {tile}: WRONG OUTPUT, skipped", flush=True)
                continue
            timed.append((timer(run), tile))
        if not timed:
            continue
        base = timed[0][0]
        best = sorted(timed, key=lambda t: t[0])[:3]
        results.append({"shape": shape, "rows": rows, "context": context, "splits": splits, "bytes": read,
                        "default": asdict(default), "default_us": base * 1e6,
                        "best": [{"tile": asdict(t), "us": s * 1e6, "of_bandwidth": read / s / bandwidth}
                                 for s, t in best], "candidates": len(timed)})
        print(f"  attention rows={rows:3d} ctx={context:5d} splits={splits:2d}: default {base * 1e6:8.2f} us "
              f"({read / base / bandwidth:.2f} of bw) best {best[0][0] * 1e6:8.2f} us "
              f"({read / best[0][0] / bandwidth:.2f}) {best[0][1]}  [{len(timed)} tiles]", flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sweep", nargs="+", choices=["linear", "attention"], default=["linear", "attention"])
    parser.add_argument("--shapes", nargs="+", choices=sorted(LINEAR_SHAPES), default=["qwen3-0.6b"])
    parser.add_argument("--rows", nargs="+", type=int, default=[1, 8], help="product rows to sweep (default 1 8)")
    parser.add_argument("--attention", nargs="+", default=["1x512", "64x512", "256x512", "256x1024"],
                        metavar="ROWSxCONTEXT", help="attention cases (default 1x512 64x512 256x512 256x1024)")
    parser.add_argument("--tiles", nargs="+", choices=["fma", "mma"], default=["fma", "mma"],
                        help="product tiles to sweep: CUDA-core (fma) and tensor-core (mma; from 2 rows)")
    parser.add_argument("--budget", type=float, default=240.0, help="seconds per sweep before it stops (default 240)")
    parser.add_argument("--json", type=Path, help="write every result here")
    args = parser.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        parser.error("the sweeps time CUDA graphs: they need a CUDA device")
    from decode import copy_bandwidth

    from helios.production.lowering.product_choice import GraphTimer

    device = torch.device("cuda")
    bandwidth = copy_bandwidth(device)
    print(f"device: {torch.cuda.get_device_name(device)}; copy bandwidth {bandwidth / 1e9:.0f} GB/s", flush=True)
    timer = GraphTimer(device, calls=8, replays=5)
    results: dict = {"copy_bandwidth": bandwidth}
    for shape in args.shapes:
        if "linear" in args.sweep:
            results.setdefault("linear", []).extend(
                sweep_linear(shape, args.rows, timer, bandwidth, time.perf_counter() + args.budget,
                             tuple(args.tiles)))
        if "attention" in args.sweep:
            cases = [tuple(int(v) for v in case.split("x")) for case in args.attention]
            results.setdefault("attention", []).extend(
                sweep_attention(shape, cases, timer, bandwidth, time.perf_counter() + args.budget))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
