"""llama.cpp as a side-by-side peer of the decode and prefill benches, on the same GPU in the same run.

    python bench/decode.py --shapes qwen3-0.6b --llamacpp BIN_DIR --llamacpp-model MODEL.gguf
    python bench/prefill.py --shapes qwen3-0.6b --llamacpp BIN_DIR --llamacpp-model MODEL.gguf

BIN_DIR holds a CUDA build of llama.cpp's `llama-batched-bench`; MODEL.gguf is an F16 model of the
bench's shape (random weights serve: only the rates are compared). `llama-batched-bench` runs with
flash attention on, every layer on the GPU and B sequences at once, each a prompt of PP tokens then TG
generated ones: its S_PP column is the prefill rate (tokens/s over all B prompts), S_TG the decode
rate. Decode is compared at the bench's history (`--context`: PP = context, TG = 128); prefill at the
bench's prompt (PP = prompt, TG = 1).
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

BATCHED_BENCH = "llama-batched-bench"
# | PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | T s | S t/s |
_ROW = re.compile(r"^\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*([\d.]+)\s*\|\s*([\d.]+)\s*\|"
                  r"\s*([\d.]+)\s*\|\s*([\d.]+)\s*\|")


class PeerFailed(RuntimeError):
    """The peer could not be run or printed no rate for a requested batch."""


@dataclass(frozen=True, slots=True)
class PeerRates:
    """One `llama-batched-bench` row: B sequences of PP prompt and TG generated tokens."""

    prompt: int  # PP
    generated: int  # TG
    batch: int  # B
    prefill_tokens_per_second: float  # S_PP t/s
    decode_tokens_per_second: float  # S_TG t/s


def parse_batched_bench(text: str) -> list[PeerRates]:
    """The result rows of `llama-batched-bench`'s table (header and separator lines skipped)."""
    rows = []
    for line in text.splitlines():
        match = _ROW.match(line.strip())
        if match:
            pp, tg, b, _, _, s_pp, _, s_tg = match.groups()
            rows.append(PeerRates(int(pp), int(tg), int(b), float(s_pp), float(s_tg)))
    return rows


def batched_bench(bin_dir: Path, model: Path, *, prompt: int, generated: int, batches: list[int],
                  timeout: float = 1800.0) -> dict[int, PeerRates]:
    """Run `llama-batched-bench` once over `batches`; its row for each batch, by batch."""
    binary = Path(bin_dir) / BATCHED_BENCH
    if not binary.is_file():
        raise PeerFailed(f"{binary}: no such file (--llamacpp names the directory of llama.cpp's binaries)")
    if not Path(model).is_file():
        raise PeerFailed(f"{model}: no such file (--llamacpp-model names a GGUF of the bench's shape)")
    context = max(batches) * (prompt + generated) + 64
    command = [str(binary), "-m", str(model), "-ngl", "99", "-fa", "on", "-c", str(context),
               "-npp", str(prompt), "-ntg", str(generated), "-npl", ",".join(str(b) for b in batches)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise PeerFailed(f"{BATCHED_BENCH}: {error}") from error
    rows = {row.batch: row for row in parse_batched_bench(done.stdout)
            if row.prompt == prompt and row.generated == generated}
    missing = [b for b in batches if b not in rows]
    if done.returncode != 0 or missing:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise PeerFailed(f"{BATCHED_BENCH} exited {done.returncode} without rows for batches {missing}: "
                         + " / ".join(tail))
    return rows


def add_arguments(parser) -> None:
    """The benches' `--llamacpp BIN_DIR` and `--llamacpp-model GGUF ...` options."""
    parser.add_argument("--llamacpp", type=Path, metavar="BIN_DIR",
                        help="also run llama.cpp's llama-batched-bench from this directory (bench/peer.py)")
    parser.add_argument("--llamacpp-model", type=Path, nargs="+", default=[], metavar="GGUF",
                        help="with --llamacpp: an F16 GGUF of each --shapes shape, in the same order")


def check_arguments(parser, args) -> None:
    """One GGUF a shape when the peer runs (a parser error otherwise)."""
    if args.llamacpp is not None and len(args.llamacpp_model) != len(args.shapes):
        parser.error("--llamacpp needs one --llamacpp-model GGUF for each of --shapes")


def run_for_shape(args, shape: str, *, prompt: int, generated: int) -> dict[int, PeerRates] | None:
    """The peer's rates for `shape` at the bench's batches, or None (not asked for, or it failed:
    printed)."""
    if args.llamacpp is None:
        return None
    try:
        return batched_bench(args.llamacpp, args.llamacpp_model[args.shapes.index(shape)], prompt=prompt,
                             generated=generated, batches=args.batches)
    except PeerFailed as error:
        print(f"  llama.cpp: {error}", flush=True)
        return None


def ratio_line(what: str, ours: float, peer: float) -> str:
    """'what: Helios X tok/s, llama.cpp Y tok/s -> Z.ZZx'."""
    return f"{what}: Helios {ours:,.0f} tok/s, llama.cpp {peer:,.0f} tok/s -> {ours / peer:.2f}x"
