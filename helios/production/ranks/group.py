"""The ranks' process groups (device side): rendezvous at rank 0's master address, over torch.distributed.

    group = join(master="127.0.0.1:29500", rank=r, size=N, served_id=..., timeout=30.0, device=device)

Rank 0 hosts a `torch.distributed.TCPStore` at the master address; every peer connects to it and
announces the world size it was started with and the core it opened. Rank 0 checks that each of
ranks 1 .. N-1 announced N (the core's `manifest.ranks`) and the same served model, and publishes
its verdict with its load parameters; a mismatch or a rank that does not join within the startup
timeout fails startup on every rank with one line (`RankStartupFailed`). The ranks then form two
process groups over the store:

- `data`: the programs' collectives (`all_reduce`, `all_gather`) and the per-round agreement;
  gloo on a CPU, NCCL on a GPU (capturable in CUDA graphs). Its timeout bounds how long a rank
  waits for a dead or hung peer.
- `control`: gloo, on the host: rank 0's commands (the round plans) to the peers. Its timeout is
  the startup timeout (a peer waits there while rank 0 finishes loading); rank 0 notices a lost
  peer on it at once (a closed connection), and a hung one on the data group.

The groups are `ProcessGroupGloo` / `ProcessGroupNCCL` objects used directly, not the global
default group, so one process may hold several (tests) and nothing else in the process is touched.
"""

from __future__ import annotations

import json
import pickle
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from helios.errors import HeliosError

_PEER = "helios/peer/{}"
_VERDICT = "helios/verdict"
_SEEN = "helios/seen/{}"  # a peer read the verdict (rank 0 keeps the store up until then, briefly)


def _refuse(store, verdict: str, peers, grace: float = 5.0):
    """Publish a refusal, give the peers that joined a moment to read it, and raise it."""
    store.set(_VERDICT, json.dumps({"error": verdict}))
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and not all(store.check([_SEEN.format(p)]) for p in peers):
        time.sleep(0.05)
    raise RankStartupFailed(verdict)


class RankStartupFailed(HeliosError):
    """The ranks could not form: a peer started with another world size or core, or none joined in time."""

    exit_code = 1  # a runtime that refused the core at load


class RankFailed(HeliosError):
    """A collective with the peers failed: a rank died, hung past the timeout, or disagreed."""

    exit_code = 1


def parse_master(master: str) -> tuple[str, int]:
    host, sep, port = master.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise RankStartupFailed(f"--master {master!r}: expected ADDR:PORT")
    return host, int(port)


@dataclass
class RankGroup:
    """One rank's membership: its rank, the world size and the two process groups (module docstring)."""

    rank: int
    size: int
    data: object  # ProcessGroupGloo or ProcessGroupNCCL: the programs' collectives
    control: object  # ProcessGroupGloo: rank 0's commands
    store: object  # the TCPStore (kept alive: the groups rendezvoused through it)
    timeout: float
    parameters: dict  # rank 0's load parameters, as published with its verdict

    def broadcast_object(self, value=None):
        """Rank 0 sends `value` (pickled plain data) to every rank; every rank returns it."""
        if self.rank == 0:
            data = torch.frombuffer(bytearray(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)),
                                    dtype=torch.uint8)
            length = torch.tensor([data.numel()], dtype=torch.int64)
        else:
            length = torch.zeros(1, dtype=torch.int64)
        self.control.broadcast(length, 0).wait()
        if self.rank != 0:
            data = torch.empty(int(length[0]), dtype=torch.uint8)
        self.control.broadcast(data, 0).wait()
        return value if self.rank == 0 else pickle.loads(data.numpy().tobytes())

    def gather_rows(self, local: torch.Tensor) -> list[torch.Tensor]:
        """Every rank's `local` (a 1-D int64 tensor of one length), rank order, on every rank (data group)."""
        parts = [torch.empty_like(local) for _ in range(self.size)]
        self.data.allgather([parts], [local]).wait()
        return parts

    def gather_objects(self, value) -> list:
        """Every rank's `value` (pickled plain data), rank order, on every rank (control group)."""
        data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        lengths = self.every(len(data))
        local = torch.zeros(max(lengths), dtype=torch.uint8)
        local[:len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        parts = [torch.empty_like(local) for _ in range(self.size)]
        self.control.allgather([parts], [local]).wait()
        return [pickle.loads(p[:n].numpy().tobytes()) for p, n in zip(parts, lengths, strict=True)]

    def every(self, value: int) -> list[int]:
        """Every rank's `value`, rank order (control group: host integers)."""
        local = torch.tensor([value], dtype=torch.int64)
        parts = [torch.empty_like(local) for _ in range(self.size)]
        self.control.allgather([parts], [local]).wait()
        return [int(p[0]) for p in parts]

    def minimum(self, value: int) -> int:
        """The smallest of every rank's `value` (control group: host integers)."""
        t = torch.tensor([value], dtype=torch.int64)
        opts = dist.AllreduceOptions()
        opts.reduceOp = dist.ReduceOp.MIN
        self.control.allreduce([t], opts).wait()
        return int(t[0])


def join(*, master: str, rank: int, size: int, served_id: str, device: torch.device, timeout: float,
         startup_timeout: float = 120.0, parameters: dict | None = None,
         abandon: Callable[[], str | None] | None = None) -> RankGroup:
    """Form the ranks' groups (module docstring). Rank 0 passes its load `parameters` (JSON data),
    which every peer receives in `RankGroup.parameters`; `abandon` (rank 0) says why to stop waiting
    for the peers (a spawned peer exited), or None."""
    host, port = parse_master(master)
    if not 0 <= rank < size:
        raise RankStartupFailed(f"rank {rank} is outside a world of {size} ranks")
    wait = timedelta(seconds=startup_timeout)
    try:
        store = dist.TCPStore(host, port, None, rank == 0, timeout=wait, wait_for_workers=False)
    except (RuntimeError, OSError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise RankStartupFailed(f"--master {master}: cannot {'listen' if rank == 0 else 'connect'}: {first}") from None
    if rank == 0:
        deadline = time.monotonic() + startup_timeout
        for peer in range(1, size):
            while not store.check([_PEER.format(peer)]):
                gone = abandon() if abandon is not None else None
                if gone is None and time.monotonic() < deadline:
                    time.sleep(0.05)
                    continue
                verdict = gone or (f"no peer of rank {peer} joined {master} within {startup_timeout:g} s "
                                   f"({size} ranks expected)")
                _refuse(store, verdict, range(1, peer))
            said = json.loads(store.get(_PEER.format(peer)))
            if said["world"] != size:
                _refuse(store, f"peer rank {peer} was started with a world size of {said['world']}, but the core "
                        f"has manifest.ranks = {size}", range(1, peer + 1))
            if said["served_id"] != served_id:
                _refuse(store, f"peer rank {peer} opened the core of {said['served_id']!r}, rank 0 serves "
                        f"{served_id!r}", range(1, peer + 1))
        store.set(_VERDICT, json.dumps({"parameters": parameters or {}}))
        published = parameters or {}
    else:
        try:
            store.set(_PEER.format(rank), json.dumps({"world": size, "served_id": served_id}))
            store.wait([_VERDICT], wait)
            verdict = json.loads(store.get(_VERDICT))
            store.set(_SEEN.format(rank), "1")
        except RuntimeError:  # the store's errors (DistStoreError, DistNetworkError) are RuntimeErrors
            raise RankStartupFailed(f"rank 0 at {master} gave no verdict within {startup_timeout:g} s") from None
        if "error" in verdict:
            raise RankStartupFailed(f"rank 0 refused the ranks: {verdict['error']}")
        published = verdict["parameters"]
    limit = timedelta(seconds=timeout)
    # NOTE: a peer waits on the control group for rank 0's next command; rank 0 sends one at least
    # every second once loaded (its monitor), but its load may outlast a peer's by more than the
    # collective timeout, so the control group waits as long as the startup does.
    control = dist.ProcessGroupGloo(dist.PrefixStore("helios/control", store), rank, size,
                                    timedelta(seconds=max(timeout, startup_timeout)))
    if device.type == "cuda":
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = limit
        data = dist.ProcessGroupNCCL(dist.PrefixStore("helios/data", store), rank, size, options)
    else:
        data = dist.ProcessGroupGloo(dist.PrefixStore("helios/data", store), rank, size, limit)
    return RankGroup(rank, size, data, control, store, timeout, published)
