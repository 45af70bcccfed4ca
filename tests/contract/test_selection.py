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
