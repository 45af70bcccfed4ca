"""Plans on a CPU run one at a time in a process: Triton's interpreter keeps the running kernel's grid
in process-global state, so two threads' interpreted kernels would run each other's programs out of
range (two runtimes' workers in one process, as the HTTP tests serve several side by side)."""

from __future__ import annotations

import os
import sys
import threading

import pytest
import torch

from helios.production.kernels import gather
from helios.production.plan import Launch, LaunchPlan


def _embedding_plan(rows: int, width: int, seed: int) -> tuple[LaunchPlan, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    table = torch.randn(50, width, generator=generator)
    ids = torch.randint(0, 50, (rows,), generator=generator, dtype=torch.int32)
    out = torch.zeros(rows, width)
    run = lambda: gather.embedding(ids, table, out)  # noqa: E731
    plan = LaunchPlan("embedding", (Launch("embedding", (0,), run),), {"ids": ids, "table": table, "out": out}, 1)
    return plan, out, table[ids.long()]


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                    reason="CPU plans run in Triton's interpreter, which the tests use only without a GPU")
def test_two_threads_running_cpu_plans_at_once_each_get_their_own_results():
    assert _embedding_plan(2, 8, 0)[0].interpreted
    plans = [_embedding_plan(48, 64, 1), _embedding_plan(3, 16, 2)]  # different grids
    failures: list[BaseException] = []

    def work(plan: LaunchPlan, out: torch.Tensor, expected: torch.Tensor) -> None:
        try:
            for _ in range(12):
                out.zero_()
                plan.run()
                assert torch.equal(out, expected)
        except BaseException as error:  # noqa: BLE001 - reported below, with the thread's own error
            failures.append(error)

    threads = [threading.Thread(target=work, args=p) for p in plans]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads inside kernels, as a slow interpreted kernel does
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert not failures, failures
