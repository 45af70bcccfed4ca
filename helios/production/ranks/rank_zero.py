"""Rank 0 of a tensor-parallel core (device side): the production runtime's load of several ranks.

    model = load_rank_zero(core, options, load)   # NativeModel whose executor is a RankZeroExecutor

With `RankPeers.THREADS` rank 0 picks a free loopback port, spawns ranks 1 .. N-1 (spawn.py) and
joins them; with `RankPeers.PROCESSES` it listens at `--master` and waits for the peers started
elsewhere (`torchrun ... -m helios.production.ranks`, or `helios rank`). Rank 0 publishes its load
parameters (load-time selection, pages, cost measurement) so that every rank loads the same graphs
over the same page ids, then loads its own rank and wraps its executor.
"""

from __future__ import annotations

from helios.core.source import CoreSource
from helios.production.ranks.executor import RankZeroExecutor
from helios.production.ranks.group import RankStartupFailed, join
from helios.production.ranks.spawn import free_loopback_port, spawn_peers
from helios.runtime.options import InvalidRuntimeOptions, RankOptions, RankPeers


def load_rank_zero(core: CoreSource, ranks: RankOptions | None, *, device: str, max_concurrency: int | None,
                   pages: int | None, speculative_width: int | None, history_drafting: bool, measure_costs: bool,
                   gpu_memory_fraction: float | None = None, host_cache_gib: float | None = None):
    import torch

    from helios.contract import StartupOptions
    from helios.production.native_model import LoadOptions, NativeModel

    size = core.manifest.ranks
    ranks = ranks or RankOptions()
    processes = []
    if ranks.peers is RankPeers.THREADS:
        if ranks.open_core is None:
            raise InvalidRuntimeOptions(f"a core of {size} ranks with --rank-peers threads needs a core file "
                                        "each peer opens (RankOptions.open_core)")
        master = ranks.master or f"127.0.0.1:{free_loopback_port()}"
        processes = spawn_peers(ranks.open_core, master=master, size=size, device=device, timeout=ranks.timeout,
                                startup_timeout=ranks.startup_timeout, check=ranks.peer_check)
    else:
        if ranks.peer_check is not None:
            raise InvalidRuntimeOptions("RankOptions.peer_check applies to spawned peers (--rank-peers threads)")
        master = ranks.master
    parameters = {"max_concurrency": max_concurrency, "pages": pages, "speculative_width": speculative_width,
                  "history_drafting": history_drafting, "measure_costs": measure_costs,
                  "gpu_memory_fraction": gpu_memory_fraction, "host_cache_gib": host_cache_gib}
    try:
        group = join(master=master, rank=0, size=size, served_id=core.contract.served_id,
                     device=torch.device(device), timeout=ranks.timeout, startup_timeout=ranks.startup_timeout,
                     parameters=parameters, abandon=lambda: _exited(processes))
    except RankStartupFailed:
        for process in processes:
            process.kill()
        raise
    fraction = {} if gpu_memory_fraction is None else {"gpu_memory_fraction": gpu_memory_fraction}
    startup = StartupOptions(max_concurrency=max_concurrency, speculative_width=speculative_width or 1,
                             history_drafting=history_drafting)
    try:
        model = NativeModel.load(core, LoadOptions(device=device, pages=pages, startup=startup,
                                                   measure_costs=measure_costs, rank=0, group=group,
                                                   host_cache_gib=host_cache_gib, **fraction))
    except BaseException:
        for process in processes:  # peers left waiting for rank 0 would only time out
            process.kill()
        raise
    model.rank_weight_bytes = tuple(group.every(model.weight_bytes))  # each rank's own weights (inspect)
    model.executor = RankZeroExecutor(model.executor, group, peers=processes)
    return model


def _exited(processes) -> str | None:
    for rank, process in enumerate(processes, start=1):
        if process.exitcode is not None:
            return f"peer rank {rank} exited with code {process.exitcode} before joining (its error is on standard error)"
    return None
