"""`PreparationOptions(pending_token="device")`: the contract declares the pending-token state view
and no PENDING_TOKEN binding, the manifest a STATE row and two frames; every text program reads the
state and writes what it samples."""

from __future__ import annotations

import pytest

from helios.contract import PreparedContract
from helios.engine.catalog import GraphCatalog
from helios.ignition.prepare import InvalidPreparationOptions, PreparationOptions, prepare_checkpoint
from helios.proto import contract_pb2, core_pb2, manifest_pb2, program_pb2

C, M = contract_pb2, manifest_pb2
OPTIONS = PreparationOptions(dtype="fp32", page_tokens=4, batch_capacities=(1, 2), prefill_capacities=(8,),
                             pending_token="device")


@pytest.fixture(scope="module")
def prepared(tiny_checkpoint):
    return prepare_checkpoint(tiny_checkpoint("qwen3"), OPTIONS)


def test_the_contract_declares_a_device_owned_pending_token(prepared):
    contract = PreparedContract.decode(prepared.contract, prepared.manifest)  # validates every rule
    assert prepared.manifest.transport.frames == 2
    # the pending tokens, and the snapshots' continuation planes (docs/snapshots.md)
    (state,) = [b for b in prepared.manifest.buffers if b.role == M.BUFFER_ROLE_STATE
                and not b.name.startswith("continuation.")]
    assert (state.name, state.dtype, list(state.shape)) == ("pending_tokens", M.DTYPE_I32, [2])
    for g in prepared.contract.model.graphs:
        sources = {b.source for b in g.value_bindings}
        assert C.VALUE_SOURCE_PENDING_TOKEN not in sources, g.name
        if g.operation in (C.OPERATION_INITIALIZATION, C.OPERATION_RESTORATION):  # they produce no pending token
            assert not g.HasField("pending_token_state")
            continue
        view = g.pending_token_state
        assert (view.buffer, view.byte_offset, view.row_stride, view.byte_extent) == ("pending_tokens", 0, 4, 4)
        access = [a for a in g.state_accesses if a.view.buffer == "pending_tokens"]
        assert [a.access for a in access] == [C.ACCESS_READ_WRITE]
    assert GraphCatalog.from_graphs(contract.graphs).device_pending
    rebuild = core_pb2.RebuildManifest.FromString(prepared.read("rebuild_manifest"))
    assert "--pending-token=device" in rebuild.arguments


def test_every_text_program_reads_the_state_and_writes_the_sampled_token_back(prepared):
    for handle in prepared.manifest.graphs:
        program = program_pb2.Program.FromString(prepared.read(handle.program_resources[0]))
        ops = [(o.op, list(o.inputs), list(o.outputs)) for o in program.operators]
        if handle.operation in (C.OPERATION_INITIALIZATION, C.OPERATION_RESTORATION):
            assert all("pending_tokens" not in o[1] + o[2] for o in ops)
            continue
        assert ops[0] == ("gather", ["pending_tokens", "token_lane"], ["pending_rows"])
        assert ops[1] == ("where", ["prompt_mark", "tokens", "pending_rows"], ["packed_tokens"])
        assert ops[2][0] == "embedding" and ops[2][1][0] == "packed_tokens"
        assert ("where", ["sampling_decision", "sampled", "pending_tokens"], ["pending_decided"]) in ops
        assert ("where", ["endpoint", "pending_decided", "pending_tokens"], ["pending_tokens"]) in ops


def test_device_pending_is_the_default_host_stays_available_and_other_owners_are_refused(tiny_checkpoint):
    assert PreparationOptions().pending_token == "device"
    with pytest.raises(InvalidPreparationOptions, match="--pending-token"):
        PreparationOptions(pending_token="both")
    host = prepare_checkpoint(tiny_checkpoint("qwen3"), PreparationOptions(
        dtype="fp32", page_tokens=4, batch_capacities=(1, 2), prefill_capacities=(8,), pending_token="host"))
    assert host.manifest.transport.frames == 1
    assert all(b.role != M.BUFFER_ROLE_STATE or b.name.startswith("continuation.") for b in host.manifest.buffers)

