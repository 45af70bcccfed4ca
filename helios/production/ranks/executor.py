"""Rank 0's executor (device side): the executor seam over its own `NativeExecutor` and its peers.

    executor = RankZeroExecutor(model.executor, group, peers=processes)
    executor.submit(plan)         # the plan to every peer (control group), then rank 0's own submission
    rows = executor.collect(plan) # every rank collects; agreement (agreement.py); rank 0's rows

The scheduler runs once, on rank 0: each round plan is sent to the peers as plain data (pickled, one
broadcast of its bytes over the gloo control group), and every rank applies it to its own
`NativeExecutor`: its own packing, staging, page tables, weights, state, cache and completion
buffers, its own program of the graph. The ranks meet inside the programs at the collectives (data
group) and after each collection at the agreement exchange. Per round the host work added is one
pickle and two broadcasts; nothing per operator.

Failure. A collective that raises (a peer died: gloo reports the closed connection at once; a peer
hung: the data group's timeout) fails the round and the executor: every later `submit` and
`collect` raises `RankFailed` at once, and `failure()` (which `BatchingRuntime.health` reads) names
the lost rank. While the engine is idle a monitor thread sends a no-op command every `interval`
seconds, so a peer that died between rounds is noticed within about a second, and watches spawned
peer processes' exit codes. `close()` stops the peers (a stop command) and joins spawned ones.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import torch

from helios.production.executor import NativeExecutor
from helios.production.ranks.agreement import ACCEPTED, UNREADABLE, agree, digest
from helios.production.ranks.group import RankFailed, RankGroup
from helios.runtime.rounds import RoundPlan

SUBMIT, COLLECT, NOOP, STOP, READ = "submit", "collect", "noop", "stop", "read"


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"


class RankZeroExecutor:
    """Rank 0's side of the ranks' executor seam; see the module docstring."""

    def __init__(self, local: NativeExecutor, group: RankGroup, *, peers: Sequence = (), interval: float = 1.0
                 ) -> None:
        self.local = local
        self.group = group
        self.frames = local.frames
        self.processes = tuple(peers)  # spawned peer processes (RankPeers.THREADS); none for PROCESSES
        self._lock = threading.Lock()  # one command on the control group at a time
        self._failure: str | None = None
        self._closed = threading.Event()
        self._interval = interval
        self._monitor = threading.Thread(target=self._watch, name="helios-rank-monitor", daemon=True)
        self._monitor.start()

    # the NativeExecutor's surface the engine and the trace recorder read
    @property
    def graphs(self):
        return self.local.graphs

    @property
    def buffers(self):
        return self.local.buffers

    @property
    def completion(self):
        return self.local.completion

    @property
    def frame_readback(self):
        return self.local.frame_readback

    @property
    def outstanding(self) -> int:
        return self.local.outstanding

    def round_costs(self):
        return self.local.round_costs()

    # ------------------------------------------------------------------------------------ rounds

    def submit(self, plan: RoundPlan) -> None:
        with self._lock:
            self._usable()
            self._send((SUBMIT, plan))
            try:
                self.local.submit(plan)
            except RuntimeError as error:  # a collective inside the program (gloo / NCCL)
                raise self._lost(error) from None

    def collect(self, plan: RoundPlan):
        with self._lock:
            self._usable()
            self._send((COLLECT, plan.sequence))
            rows, failure = None, None
            try:
                rows = self.local.collect(plan)
            except Exception as error:  # rank 0 could not read its rows: agreement still runs
                failure = error
            try:
                agree(self.group, plan.sequence, UNREADABLE if failure else ACCEPTED,
                      0 if failure else digest(rows), _device(self.local))
            except RuntimeError as error:
                raise self._lost(error) from None
            if failure is not None:
                raise failure
            return rows

    def peer_buffers(self, names) -> list[dict]:
        """Every peer's buffers `names` as host arrays, ranks 1 .. N-1 (the conformance recorder's
        per-rank state: what each rank's round wrote into its own cache and state)."""
        with self._lock:
            self._usable()
            self._send((READ, tuple(names)))
            try:
                return self.group.gather_objects(None)[1:]
            except RuntimeError as error:
                raise self._lost(error) from None

    def failure(self) -> str | None:
        """Why the ranks can no longer serve (a lost or failed rank), or None while they can."""
        if self._failure is None:
            for rank, process in enumerate(self.processes, start=1):
                code = process.exitcode
                if code is not None and not self._closed.is_set():
                    self._failure = f"rank {rank} exited with code {code}"
        return self._failure

    def close(self) -> None:
        """Stop the peers and the monitor; join spawned peer processes."""
        if self._closed.is_set():
            return
        self._closed.set()
        with self._lock:
            if self._failure is None:
                try:
                    self._send((STOP,))
                except RankFailed:
                    pass
        for process in self.processes:
            process.join(timeout=self.group.timeout)
            if process.exitcode is None:
                process.kill()
                process.join()

    # ------------------------------------------------------------------------------------ internals

    def _usable(self) -> None:
        failure = self.failure()
        if failure is not None:
            raise RankFailed(f"the tensor-parallel ranks failed: {failure}")
        if self._closed.is_set():
            raise RankFailed("the tensor-parallel ranks were stopped")

    def _send(self, command: tuple) -> None:
        try:
            self.group.broadcast_object(command)
        except RuntimeError as error:
            raise self._lost(error) from None

    def _lost(self, error: BaseException) -> RankFailed:
        if self._failure is None:
            self._failure = f"a collective with the peers failed: {first_line(error)}"
        return RankFailed(f"the tensor-parallel ranks failed: {self._failure}")

    def _watch(self) -> None:
        while not self._closed.wait(self._interval):
            if self.failure() is not None:
                return
            if not self._lock.acquire(blocking=False):
                continue  # a round is running: its collectives watch the peers
            try:
                if self._failure is None and not self._closed.is_set():
                    self._send((NOOP,))
            except RankFailed:
                return
            finally:
                self._lock.release()


def _device(executor: NativeExecutor) -> torch.device:
    return executor.device
