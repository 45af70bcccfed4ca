"""RankPeers.THREADS (device side): the serving host's peer ranks, spawned and joined by rank 0.

`spawn_peers` starts ranks 1 .. N-1 as processes of their own (multiprocessing's spawn start
method: a fresh interpreter each, one device each on a GPU host: rank r on `cuda:r`), each running
`serve_peer` against rank 0's master address on loopback. A peer opens the core itself through
`open_core` (a picklable callable: the command line passes the core's path with its trust
options). Each peer's failure is one line on its standard error and a non-zero exit code, which
rank 0's executor watches (executor.py).
"""

from __future__ import annotations

import multiprocessing
import socket
import sys
from collections.abc import Callable


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def peer_device(device: str, rank: int) -> str:
    """Rank r's device on the serving host: the CPU, or the r-th GPU after rank 0's."""
    if not device.startswith("cuda"):
        return device
    first = int(device.partition(":")[2] or 0)
    return f"cuda:{first + rank}"


def _main(open_core: Callable, master: str, rank: int, size: int, device: str, timeout: float,
          startup_timeout: float, check: Callable | None) -> None:
    from helios.errors import HeliosError
    from helios.production.ranks.peer import serve_peer

    try:
        serve_peer(open_core(), master=master, rank=rank, size=size, device=device, timeout=timeout,
                   startup_timeout=startup_timeout, check=check)
    except (HeliosError, RuntimeError, OSError) as error:
        text = str(error).strip()
        print(f"helios rank {rank}: {text.splitlines()[0] if text else type(error).__name__}", file=sys.stderr)
        sys.exit(1)


def spawn_peers(open_core: Callable, *, master: str, size: int, device: str, timeout: float,
                startup_timeout: float, check: Callable | None = None) -> list:
    """Start ranks 1 .. size-1 (module docstring); returns their processes, rank order."""
    context = multiprocessing.get_context("spawn")
    processes = []
    for rank in range(1, size):
        process = context.Process(target=_main, name=f"helios-rank-{rank}", daemon=True,
                                  args=(open_core, master, rank, size, peer_device(device, rank), timeout,
                                        startup_timeout, check))
        process.start()
        processes.append(process)
    return processes
