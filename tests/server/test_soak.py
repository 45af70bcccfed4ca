"""Soak (issue acceptance): about 1,000 requests, a fifth of them dropped mid-stream or mid-wait,
against the in-process server; afterwards no slot, request or admission permit is held, and the
process's memory in the second half grows by at most 100 MB between its mean and its maximum. (The
scripted engine has no cache pages; the page accounting of dropped requests is checked on the
reference and production engines by tests/server/test_e2e.py.)"""

from __future__ import annotations

import asyncio
import random
import statistics
from pathlib import Path

import httpx
import pytest
from tokenizers import Tokenizer

from helios.runtime.limits import AdmissionLimits
from tests.frontend import tinyfront
from tests.runtime.scripted import ScriptedEngine
from tests.server.inprocess import serving

TOKENIZER = Tokenizer.from_str(tinyfront.byte_level_tokenizer_json())
EOS = tinyfront.token_id("<|im_end|>")
REQUESTS = 1000
CONCURRENCY = 16


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.mark.slow
def test_soak_with_disconnects_leaks_nothing() -> None:
    reply = TOKENIZER.encode("A reply of some length, streamed or not.", add_special_tokens=False).ids
    engine = ScriptedEngine(reply + [EOS], delay_s=0.0005)
    with serving(engine, limits=AdmissionLimits(max_active=4, queue_capacity=16)) as (base, state):
        chance = random.Random(23)
        samples: list[float] = []
        outcomes: dict[str, int] = {}

        async def one(client: httpx.AsyncClient, index: int) -> None:
            body = {"messages": [{"role": "user", "content": f"request {index}"}], "max_tokens": 16}
            drop = chance.random() < 0.2
            stream = chance.random() < 0.5
            try:
                if stream:
                    async with client.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as response:
                        async for line in response.aiter_lines():
                            if drop and line.startswith("data: "):
                                break  # the client goes away mid-stream
                    outcome = "dropped" if drop else str(response.status_code)
                    outcomes[outcome] = outcomes.get(outcome, 0) + 1
                elif drop:
                    await asyncio.wait_for(client.post("/v1/chat/completions", json=body), 0.005)
                else:
                    response = await client.post("/v1/chat/completions", json=body)
                    outcomes[str(response.status_code)] = outcomes.get(str(response.status_code), 0) + 1
            except (TimeoutError, httpx.HTTPError):
                outcomes["dropped"] = outcomes.get("dropped", 0) + 1
            if index >= REQUESTS // 2 and index % 10 == 0:
                samples.append(rss_mib())

        async def main() -> None:
            gate = asyncio.Semaphore(CONCURRENCY)
            async with httpx.AsyncClient(base_url=base, timeout=30) as client:

                async def bounded(index: int) -> None:
                    async with gate:
                        await one(client, index)

                await asyncio.gather(*(bounded(i) for i in range(REQUESTS)))

        asyncio.run(main())

        def idle() -> bool:
            held = state.runtime.residency()
            return state.admission.in_use == 0 and not held.requests and held.active == 0 and not engine.slots_in_use

        for _ in range(200):
            if idle():
                break
            asyncio.run(asyncio.sleep(0.05))
        held = state.runtime.residency()
        assert idle(), (state.admission.in_use, held)
        assert sorted(held.free_slots) == list(range(4))
        assert outcomes.get("200", 0) > REQUESTS // 2 and outcomes.get("dropped", 0) > REQUESTS // 10, outcomes
        assert set(outcomes) <= {"200", "429", "dropped"}, outcomes
        assert max(samples) - statistics.mean(samples) <= 100, samples


@pytest.mark.slow
def test_soak_on_a_core_returns_every_page(tiny_checkpoint) -> None:
    """The same traffic, smaller, against a tiny real core under the batching scheduler (the
    production runtime's engine over the reference executor): afterwards every cache page is
    allocatable again, and no slot, request or permit is held."""
    from conformance.e2e import preparer_for
    from helios.engine.worker import BatchingRuntime
    from helios.ignition.prepare import PreparationOptions, prepare_checkpoint
    from helios.reference.engine import ReferenceEngine
    from helios.server.guard import GuardPolicy
    from helios.server.state import ServerState
    from tests.server.inprocess import serving_state

    core = prepare_checkpoint(tiny_checkpoint("qwen2"), PreparationOptions(
        dtype="fp32", page_tokens=4, batch_capacities=(1, 2, 4), prefill_capacities=(8, 32), context_tokens=64))
    pages = 24
    engine = ReferenceEngine.load(core, pages=pages)
    runtime = BatchingRuntime.for_executor(engine.executor, engine.contract,
                                           AdmissionLimits(max_active=4, queue_capacity=16), pages=pages)
    state = ServerState(runtime=runtime, preparer=preparer_for(core), policy=GuardPolicy.for_address("127.0.0.1"))
    chance = random.Random(7)
    outcomes: dict[str, int] = {}
    served = core.contract.served_id

    async def one(client: httpx.AsyncClient, index: int) -> None:
        body = {"model": served, "prompt": f"req {index} " * chance.randrange(1, 5), "max_tokens": 6,
                "temperature": 0.8, "seed": index}
        drop = chance.random() < 0.2
        try:
            if drop:
                async with client.stream("POST", "/v1/completions", json={**body, "stream": True}) as response:
                    async for line in response.aiter_lines():
                        if line.startswith("data: "):
                            break  # the client goes away mid-stream
                outcomes["dropped"] = outcomes.get("dropped", 0) + 1
            else:
                response = await client.post("/v1/completions", json=body)
                outcomes[str(response.status_code)] = outcomes.get(str(response.status_code), 0) + 1
        except (TimeoutError, httpx.HTTPError):
            outcomes["dropped"] = outcomes.get("dropped", 0) + 1

    with serving_state(state) as (base, _):
        async def main() -> None:
            gate = asyncio.Semaphore(8)
            async with httpx.AsyncClient(base_url=base, timeout=60) as client:
                async def bounded(index: int) -> None:
                    async with gate:
                        await one(client, index)
                await asyncio.gather(*(bounded(i) for i in range(200)))

        asyncio.run(main())

        def idle() -> bool:
            return state.admission.in_use == 0 and not runtime.requests_held() and runtime.scheduler.idle

        for _ in range(200):
            if idle():
                break
            asyncio.run(asyncio.sleep(0.05))
        assert idle(), (state.admission.in_use, runtime.requests_held(), runtime.scheduler.residency())
        held = runtime.scheduler.residency()
        assert sorted(held.free_slots) == list(range(4)) and not held.outstanding
        metrics = runtime.metrics()
        assert metrics.available["pages"] == metrics.capacity["pages"] == pages  # every page allocatable
        assert outcomes.get("200", 0) > 100 and outcomes.get("dropped", 0) > 20, outcomes
        assert set(outcomes) <= {"200", "429", "dropped"}, outcomes
