"""Benchmark: verified loading of a core of at least 1 GiB, beside plain zstd and sha256sum (host side).

Builds a payload core of bf16-like weights (random normal values, truncated to bf16: they compress
about as real weights do), then measures, in the same run and over the same bytes, each in a fresh
process so that its peak RSS is its own:

  helios       open_core + Core.read_many_into of every resource into one buffer of the decoded size
               (signature, chunk digests, frame checks, decoding; several resources decoded at once,
               one per usable core up to eight, chunks hashed on a worker pool)
  helios-1t    the same with no worker threads (workers=0): what the other cores buy
  zstd-py      python-zstandard one-shot decompress() of each frame, no checks, output discarded
  zstd-cli     `zstd -d -c` of the concatenated frames to /dev/null (the plain decompressor)
  sha256sum    `sha256sum` of the core file (the plain digest)
  idle         the interpreter with helios.core imported, nothing read (the fixed part of the RSS)

Throughput is decoded bytes per second for the decoders and file bytes per second for sha256sum,
per second of wall time (MB/s) and per second of CPU time summed over threads (MB/CPU-s: the cost,
which the load of other processes on a shared machine disturbs much less than the wall time).
The page cache is warm for every row (the core was just written). With --repeat N each row is run
N times, interleaved, and its fastest run is reported (on a shared machine the others' load only
ever slows a run down). Usage:

    python bench/core_load.py [--decoded-gib 1.0] [--resource-mib 64] [--repeat 1] [--dir DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _weights(nbytes: int, seed: int) -> bytes:
    import numpy as np

    values = np.random.default_rng(seed).standard_normal(nbytes // 2, dtype=np.float32) * 0.02
    return (values.view(np.uint32) >> 16).astype(np.uint16).tobytes()


def build(directory: Path, decoded_nbytes: int, resource_nbytes: int) -> None:
    """Writes bench.key, bench.hcore and frames.zst (the core's frames, concatenated) in `directory`."""
    from helios.core import ResourceInput, generate_keypair, write_core
    from helios.core.layout import read_container
    from helios.proto import core_pb2

    key = directory / "bench.key"
    generate_keypair(key)
    count = -(-decoded_nbytes // resource_nbytes)

    def resources():
        for index in range(count):
            yield ResourceInput(f"weights/{index:04d}", core_pb2.RESOURCE_KIND_WEIGHT, _weights(resource_nbytes, index))

    core = directory / "bench.hcore"
    write_core(core, publisher="bench", signing_key=key, deployment=core_pb2.DeploymentBody(), resources=resources())
    fd = os.open(core, os.O_RDONLY)
    try:
        body_offset = read_container(fd).body_offset
    finally:
        os.close(fd)
    frames = directory / "frames.zst"
    with open(core, "rb") as source, open(frames, "wb") as sink:
        source.seek(24)
        remaining = body_offset - 24
        while remaining:
            piece = source.read(min(remaining, 64 << 20))
            sink.write(piece)
            remaining -= len(piece)


def _cpu_seconds() -> float:
    """User + system CPU time of this process, all threads."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _peak_rss() -> int:
    """This process's own peak resident set (VmHWM), in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def child(kind: str, core: str, key: str, workers: int) -> None:
    """Runs one measurement in this (fresh) process and prints its timing as JSON."""
    import zstandard

    from helios.core import open_core

    start, cpu_start = time.perf_counter(), _cpu_seconds()
    total = 0
    if kind == "helios":
        chosen = None if workers < 0 else workers  # -1: the default thread pool
        with open_core(core, trusted_keys=f"{key}.pub", accept="bench", workers=chosen) as loaded:
            total = sum(r.decoded_nbytes for r in loaded.resources.values())
            buffer = memoryview(bytearray(total))
            items, cursor = [], 0
            for resource_id, entry in loaded.resources.items():
                items.append((resource_id, buffer[cursor : cursor + entry.decoded_nbytes]))
                cursor += entry.decoded_nbytes
            loaded.read_many_into(items)
    elif kind == "zstd-py":  # the frames as the core places them, no checks at all
        with open_core(core, trusted_keys=f"{key}.pub", accept="bench", workers=0) as loaded:
            placements = [(loaded.placement(rid), r.decoded_nbytes) for rid, r in loaded.resources.items()]
        decompressor = zstandard.ZstdDecompressor()
        with open(core, "rb") as file:
            for placement, _ in placements:
                file.seek(placement.offset)
                total += len(decompressor.decompress(file.read(placement.nbytes)))
    seconds, cpu = time.perf_counter() - start, _cpu_seconds() - cpu_start
    print(json.dumps({"seconds": seconds, "cpu_seconds": cpu, "decoded_nbytes": total, "peak_rss": _peak_rss()}))


def measure(argv: list[str], stdout=subprocess.PIPE) -> tuple[float, float, int, str]:
    """(wall seconds, CPU seconds, peak RSS bytes, stdout) of one child process."""
    start = time.perf_counter()
    process = subprocess.Popen(argv, stdout=stdout, stderr=subprocess.PIPE)
    out = process.stdout.read().decode() if stdout == subprocess.PIPE else ""
    err = process.stderr.read().decode()
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        raise SystemExit(f"{argv[0]} failed: {err}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024, out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decoded-gib", type=float, default=1.0, help="decoded size of the core (default 1.0)")
    parser.add_argument("--resource-mib", type=int, default=64, help="decoded size of each resource (default 64)")
    parser.add_argument("--dir", help="where to write the core (default: a temporary directory, removed after)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each row, fastest reported (default 1)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON too")
    parser.add_argument("--child", nargs=4, metavar=("KIND", "CORE", "KEY", "WORKERS"), help=argparse.SUPPRESS)
    parser.add_argument("--build", nargs=3, metavar=("DIR", "DECODED", "RESOURCE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.build:
        build(Path(args.build[0]), int(args.build[1]), int(args.build[2]))
        return 0
    if args.child:
        child(args.child[0], args.child[1], args.child[2], int(args.child[3]))
        return 0

    directory = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="helios-bench-"))
    directory.mkdir(parents=True, exist_ok=True)
    try:
        decoded = int(args.decoded_gib * (1 << 30))
        start = time.perf_counter()
        # NOTE: built in a child, so that this process stays small: a forked child starts its peak
        # RSS count from its parent's, which would hide the plain tools' own figures.
        subprocess.run([sys.executable, str(Path(__file__).resolve()), "--build", str(directory), str(decoded),
                        str(args.resource_mib << 20)], check=True)
        key, core, frames = directory / "bench.key", directory / "bench.hcore", directory / "frames.zst"
        build_seconds = time.perf_counter() - start
        stored = frames.stat().st_size
        me = [sys.executable, str(Path(__file__).resolve()), "--child"]
        commands = [
            ("helios", [*me, "helios", str(core), str(key), "-1"], None),
            ("helios-1t", [*me, "helios", str(core), str(key), "0"], None),
            ("zstd-py", [*me, "zstd-py", str(core), str(key), "0"], None),
            ("idle", [*me, "idle", str(core), str(key), "0"], None),
            ("zstd-cli", ["zstd", "-d", "-c", "-q", str(frames)], decoded),
            ("sha256sum", ["sha256sum", str(core)], core.stat().st_size),
        ]
        best: dict[str, dict] = {}
        for _ in range(args.repeat):
            for name, argv, nbytes in commands:
                if shutil.which(argv[0]) is None:
                    continue
                if nbytes is None:  # a Python child reports its own times and peak RSS
                    wall, _, _, out = measure(argv)
                    inner = json.loads(out)
                    row = {"name": name, "seconds": inner["seconds"], "cpu_seconds": inner["cpu_seconds"],
                           "process_seconds": wall, "nbytes": inner["decoded_nbytes"], "peak_rss": inner["peak_rss"]}
                else:
                    with open(os.devnull, "wb") as null:
                        wall, cpu, rss, _ = measure(argv, stdout=null)
                    row = {"name": name, "seconds": wall, "cpu_seconds": cpu, "process_seconds": wall,
                           "nbytes": nbytes, "peak_rss": rss}
                if name not in best or row["seconds"] < best[name]["seconds"]:
                    best[name] = row
        rows = list(best.values())
        real_decoded = rows[0]["nbytes"]
        print(f"core: {real_decoded / (1 << 30):.2f} GiB decoded, {stored / (1 << 30):.2f} GiB stored "
              f"(ratio {real_decoded / stored:.2f}), {-(-decoded // (args.resource_mib << 20))} resources; "
              f"built in {build_seconds:.1f} s; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; "
              f"best of {args.repeat}")
        print(f"{'what':<10} {'seconds':>8} {'MB/s':>8} {'CPU s':>8} {'MB/CPU-s':>9} {'peak RSS':>10} {'RSS/decoded':>12}")
        for row in rows:
            if row["name"] == "idle":
                print(f"{'idle':<10} {'':>8} {'':>8} {'':>8} {'':>9} {row['peak_rss'] / (1 << 20):>6.0f} MiB "
                      f"{'':>12}  (the interpreter with helios.core imported)")
                continue
            rate = row["nbytes"] / row["seconds"] / 1e6
            per_cpu = row["nbytes"] / max(row["cpu_seconds"], 1e-9) / 1e6
            print(f"{row['name']:<10} {row['seconds']:>8.2f} {rate:>8.0f} {row['cpu_seconds']:>8.2f} {per_cpu:>9.0f} "
                  f"{row['peak_rss'] / (1 << 20):>6.0f} MiB {row['peak_rss'] / real_decoded:>11.2f}x")
        if args.json:
            print(json.dumps({"decoded_nbytes": real_decoded, "stored_nbytes": stored, "rows": rows}))
    finally:
        if not args.dir:
            shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
