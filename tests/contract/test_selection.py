"""Load-time selection: reduce concurrency and width, never raise them; history drafting's requirements."""

from __future__ import annotations

import pytest

from helios.contract import PreparedContract, StartupOptions
from helios.contract import errors as e
from helios.contract.enums import Operation
from tests.contract import valid


def contract():
    return PreparedContract.decode(valid.serving(), valid.manifest())


def test_defaults_expose_everything_and_take_the_maximum_state_rows():
    selection = contract().select()
    assert selection.max_concurrency == 4
    assert selection.speculative_width == 3
    assert selection.state_rows_per_request == 2
    assert [g.name for g in selection.graphs_for(Operation.DECODE)] == ["decode_4"]


def test_lane_rows_bound_one_request_by_operation():
    """The most rows a request holds in a round: one in DECODE, the verify width W in SPECULATIVE (W =
    3 here, P = 12 over four lanes), the packed capacity where a prompt chunk may fill the round."""
    graphs = {g.name: g for g in contract().select().graphs}
    assert graphs["decode_4"].lane_rows == 1
    assert graphs["speculative_4x3"].lane_rows == graphs["speculative_4x3"].speculative.verify_tokens == 3
    assert graphs["prefill_16"].lane_rows == 16


def test_width_one_drops_wider_speculative_graphs():
    selection = contract().select(StartupOptions(speculative_width=1))
    assert selection.graphs_for(Operation.SPECULATIVE) == ()
    assert selection.speculative_width == 1
    assert selection.state_rows_per_request == 1


def test_selection_cannot_raise_concurrency_or_invent_widths():
    with pytest.raises(e.InvalidSelection) as raised:
        contract().select(StartupOptions(max_concurrency=5))
    assert raised.value.path == "max_concurrency"
    with pytest.raises(e.InvalidSelection) as raised:
        contract().select(StartupOptions(speculative_width=2))
    assert raised.value.path == "speculative_width"


def test_history_drafting_needs_learned_speculation():
    with pytest.raises(e.HistoryDraftingUnsupported) as raised:
        contract().select(StartupOptions(speculative_width=1, history_drafting=True))
    assert raised.value.path == "history_drafting"


def test_history_drafting_needs_copied_token_inputs_in_each_wider_graph():
    serving, manifest = valid.serving(), valid.manifest()
    spec = serving.model.graphs[3]
    kept = [b for b in spec.value_bindings if b.destination != "candidate_count"]
    del spec.value_bindings[:]
    spec.value_bindings.extend(kept)
    prepared = PreparedContract.decode(serving, manifest)
    with pytest.raises(e.HistoryDraftingUnsupported) as raised:
        prepared.select(StartupOptions(history_drafting=True))
    assert raised.value.path == "model.graphs[3].value_bindings"
    assert "CANDIDATE_COUNT" in str(raised.value)


def test_history_drafting_accepted_when_inputs_exist():
    assert contract().select(StartupOptions(history_drafting=True)).history_drafting


def test_reduced_concurrency_keeps_every_operation_covered():
    # The fixture's only DECODE and INITIALIZATION graphs have B = 4 while its PREFILL graph has B = 1:
    # one request slot still needs them (a B = 4 graph serves one lane); a global batch limit of 1
    # would hide every graph that decodes.
    selection = contract().select(StartupOptions(max_concurrency=1, speculative_width=1))
    assert selection.max_concurrency == 1
    assert [g.name for g in selection.graphs_for(Operation.DECODE)] == ["decode_4"]
    assert [g.name for g in selection.graphs_for(Operation.INITIALIZATION)] == ["initialize_4"]
    assert [g.name for g in selection.graphs_for(Operation.PREFILL)] == ["prefill_16"]


def test_reduced_concurrency_drops_wider_graphs_of_each_operation():
    serving, manifest = valid.serving(), valid.manifest()
    for name, batch in (("decode_1", 1), ("decode_2", 2)):
        handle = manifest.graphs.add()
        handle.CopyFrom(next(h for h in manifest.graphs if h.name == "decode_4"))
        handle.name, handle.batch_capacity, handle.packed_token_capacity = name, batch, batch
        graph = serving.model.graphs.add()
        graph.CopyFrom(next(g for g in serving.model.graphs if g.name == "decode_4"))
        graph.name = name
        graph.capacity.batch_capacity = graph.capacity.packed_token_capacity = batch
    prepared = PreparedContract.decode(serving, manifest)
    decode = prepared.select(StartupOptions(max_concurrency=2)).graphs_for(Operation.DECODE)
    assert [g.name for g in decode] == ["decode_1", "decode_2"]
    decode = prepared.select(StartupOptions(max_concurrency=3)).graphs_for(Operation.DECODE)
    assert [g.name for g in decode] == ["decode_1", "decode_2", "decode_4"]
