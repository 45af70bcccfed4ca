"""Production tensor-parallel ranks on the CPU: rank 0 in this process, its peers spawned processes
joined over gloo on loopback (RankPeers.THREADS).

- every family's tiny core prepared with --tp 4 (two key/value heads replicated) and, but qwen3's
  (its --tp 2 runs through `helios generate` in tests/cli/test_tensor_parallel_cli.py), with --tp 2
  (split) generates through production ranks the greedy tokens of the --tp 1 core on the reference
  runtime, and of the same core on the reference's lockstep ranks (fp32);
- a peer that rejects a round's completion: no rank commits it (its request fails, no token of it is
  delivered), and the requests after it go on;
- a killed peer: the runtime is unhealthy (/health answers 503 for it) and the in-flight request
  ends with an error within 10 s.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import time

import pytest

from helios.ignition.prepare import PreparationOptions, prepare_checkpoint
from helios.runtime.events import Failed, TokenEvent
from helios.runtime.interface import PreparedRequest
from helios.runtime.limits import AdmissionLimits
from helios.runtime.options import RankOptions, RuntimeOptions
from helios.runtime.request import GenerationRequest, SamplingParams
from tests.fixtures.checkpoints import FAMILIES
from tests.production.helpers import CPU_FP32

OPTIONS = PreparationOptions(dtype="fp32", page_tokens=4, batch_capacities=(1, 2), prefill_capacities=(8,),
                             context_tokens=48)
PROMPT = (5, 17, 99, 3, 200, 41, 7, 8, 9, 10, 11)  # two prefill chunks of 8, pages of 4
POISON = 250  # a prompt starting with this id: the rejecting peer refuses its rounds
GREEDY = SamplingParams(temperature=0.0)
pytestmark = CPU_FP32  # ranks of one process tree on the CPU; a GPU machine's process compiles the kernels


def reject_poisoned(plan, rows) -> None:
    """The peer's injected fault (RankOptions.peer_check): reject every round carrying a poisoned prompt."""
    if any(lane.prompt_token_ids[:1] == (POISON,) for lane in plan.lanes):
        raise ValueError("injected rejection of a poisoned prompt")


def _sealed(prepared, directory):
    """(the core sealed to a file and opened, the picklable opener each spawned peer calls)."""
    from helios.core import generate_keypair, open_core
    from helios.ignition.seal import seal

    key = directory / "publisher.key"
    generate_keypair(key)
    seal(prepared, directory / "model.hcore", publisher="tests/ranks", signing_key=key)
    opener = functools.partial(open_core, str(directory / "model.hcore"), trusted_keys=[f"{key}.pub"],
                               accept="tests/ranks")
    return opener(), opener


def _production(prepared, directory, **ranks):
    from helios.production import load_runtime

    core, opener = _sealed(prepared, directory)
    runtime = load_runtime(core, RuntimeOptions(AdmissionLimits(max_active=2, queue_capacity=4), device="cpu",
                                                ranks=RankOptions(open_core=opener, timeout=20.0, **ranks)))
    runtime.start()
    return runtime, core


def _reference(prepared, prompt=PROMPT, max_tokens=3):
    from helios.engine.oneshot import generate_tokens
    from helios.reference import load_runtime

    runtime = load_runtime(prepared, RuntimeOptions(AdmissionLimits(max_active=2, queue_capacity=4)))
    return generate_tokens(runtime, GenerationRequest(prompt, max_tokens=max_tokens, sampling=GREEDY))


async def _run(runtime, request_id: str, prompt=PROMPT, max_tokens=3):
    """(tokens, the Failed event or None) of one request on a started runtime."""
    stream = runtime.submit(PreparedRequest(request_id, GenerationRequest(prompt, max_tokens=max_tokens,
                                                                          sampling=GREEDY), observe_tokens=True))
    tokens, failed = [], None
    async for event in stream:
        if isinstance(event, TokenEvent):
            tokens.append(event.token_id)
        elif isinstance(event, Failed):
            failed = event
    return tokens, failed


# qwen3 at --tp 2 is tests/cli/test_tensor_parallel_cli.py's (through `helios generate`), and its
# faulty core below; the others here.
@pytest.mark.parametrize(("family", "ranks"), [(f, 2) for f in FAMILIES if f != "qwen3"] + [(f, 4) for f in FAMILIES])
def test_every_family_generates_the_one_rank_tokens_through_production_ranks(tiny_checkpoint, tmp_path, family,
                                                                             ranks):
    directory = tiny_checkpoint(family)
    expected = _reference(prepare_checkpoint(directory, OPTIONS))
    prepared = prepare_checkpoint(directory, dataclasses.replace(OPTIONS, tensor_parallel=ranks))
    assert _reference(prepared) == expected
    runtime, _ = _production(prepared, tmp_path)
    try:
        tokens, failed = asyncio.run(_run(runtime, "r"))
        assert failed is None and tokens == expected, (family, ranks)
        assert runtime.health().ok
    finally:
        runtime.shutdown()
    assert all(p.exitcode == 0 for p in runtime.executor.processes)  # stopped by rank 0, not killed


@pytest.fixture(scope="module")
def faulty(tiny_checkpoint, tmp_path_factory):
    """A --tp 2 qwen3 core on production ranks whose peer rejects poisoned rounds; (runtime, expected tokens)."""
    prepared = prepare_checkpoint(tiny_checkpoint("qwen3"), dataclasses.replace(OPTIONS, tensor_parallel=2))
    runtime, core = _production(prepared, tmp_path_factory.mktemp("faulty"), peer_check=reject_poisoned)
    yield runtime, core, _reference(prepared), _reference(prepared, max_tokens=30)
    runtime.shutdown()


def test_a_rejecting_rank_fails_its_round_alone_and_no_rank_commits(faulty):
    runtime, _, expected, _ = faulty
    poisoned, failed = asyncio.run(_run(runtime, "poisoned", prompt=(POISON, *PROMPT[1:])))
    assert poisoned == []  # its prefill round was rejected by rank 1: no token of it reached the request
    assert failed is not None and "rank 1 rejected its completion of round" in failed.message
    assert "no rank commits it" in failed.message
    assert runtime.health().ok  # the ranks stayed in step

    assert asyncio.run(_run(runtime, "after"))[0] == expected  # the requests after it go on


def test_a_killed_rank_makes_the_runtime_unhealthy_and_fails_the_request_in_flight(faulty):
    from fastapi.testclient import TestClient

    runtime, core, _, long = faulty
    assert runtime.health().ok

    async def killed_midway():
        stream = runtime.submit(PreparedRequest("long", GenerationRequest(PROMPT, max_tokens=30, sampling=GREEDY),
                                                observe_tokens=True))
        tokens, killed_at = [], None
        async for event in stream:
            if isinstance(event, TokenEvent):
                tokens.append(event.token_id)
                if len(tokens) == 2:
                    runtime.executor.processes[0].kill()
                    killed_at = time.monotonic()
            elif isinstance(event, Failed):
                return tokens, event, time.monotonic() - killed_at
        return tokens, None, None

    tokens, failed, after = asyncio.run(killed_midway())
    assert failed is not None and "the tensor-parallel ranks failed" in failed.message, failed
    assert len(tokens) < len(long) and tokens == long[:len(tokens)]
    assert after < 10.0
    health = runtime.health()
    assert health.status == "failed" and ("rank 1" in health.detail or "collective" in health.detail)
    state = _server_state(runtime, core)
    from helios.server.app import create_app

    with TestClient(create_app(state, on_shutdown=lambda: None)) as client:
        response = client.get("/health")
    assert response.status_code == 503 and response.json()["status"] == "failed"


def _server_state(runtime, core):
    from helios.frontend.bootstrap import Bootstrap
    from helios.frontend.preparation import Preparer
    from helios.server.state import ServerState

    contract = core.contract
    preparer = Preparer(Bootstrap.from_core(core), served_id=contract.served_id, aliases=tuple(contract.aliases),
                        context_tokens=contract.context_tokens, sampled_tokens=contract.model.vocabulary.sampled_tokens,
                        mask_words=contract.model.vocabulary.mask_words)
    return ServerState(runtime=runtime, preparer=preparer)
