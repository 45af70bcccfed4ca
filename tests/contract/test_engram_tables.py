"""Engram table declarations (ModelContract.engram_tables, docs/engram.md): the test recipe's core
decodes and survives the JSON round trip; each malformed declaration is refused by decoding with
its rule's field path, and both runtimes refuse to load such a core, in one line."""

from __future__ import annotations

import pytest

from helios.contract import PreparedContract
from helios.contract import errors as e
from helios.proto import contract_pb2, manifest_pb2
from tests.runtime.test_speculative_options import _refused_in_one_line


def _buffer(manifest, name):
    return next(b for b in manifest.buffers if b.name == name)


def _orders(s, m):
    s.model.engram_tables[0].orders[:] = [3, 2]


def _multiplier(s, m):
    s.model.engram_tables[0].multipliers[0] &= ~1  # even: the hash would drop a token's low bit


def _frames(s, m):
    _buffer(m, s.model.engram_tables[0].staging).shape[0] = 3  # the specification's frames are two


def _row_index(s, m):
    _buffer(m, s.model.engram_tables[0].row_index).shape[0] = 4  # fewer rows than a prefill packs


def _initialization(s, m):
    s.model.engram_tables[0].graphs.append("initialization")  # no packed tokens to hash


def _dependency(s, m):
    graph = next(g for g in s.model.graphs if g.name == "decode_b1")
    graph.resource_dependencies.remove(s.model.engram_tables[0].resource)


def _bound(s, m):
    graph = next(g for g in s.model.graphs if g.name == "decode_b1")
    graph.value_bindings.append(contract_pb2.ValueBinding(
        destination=s.model.engram_tables[0].row_index, source=contract_pb2.VALUE_SOURCE_SLOT,
        indexing=contract_pb2.INDEXING_PACKED_TOKEN))


MALFORMED = {
    "orders": (_orders, r"engram_tables\[0\]\.orders: Engram table 'engram': orders \[3, 2\] must be distinct, "
               "ascending"),
    "multiplier": (_multiplier, r"engram_tables\[0\]\.multipliers: .* each odd"),
    "frames": (_frames, r"engram_tables\[0\]\.staging: .* \[2, S, 8\] \(its two frames\)"),
    "row_index": (_row_index, r"engram_tables\[0\]\.graphs\[0\]: .*'prefill_p8' packs 8 tokens: the row index "
                  r"needs 8 rows \(has 4\)"),
    "initialization": (_initialization, r"graphs\[5\]: Engram table 'engram': graph 'initialization' is "
                       "INITIALIZATION; only PREFILL"),
    "dependency": (_dependency, r"graphs\[2\]: .*'decode_b1' does not list the table's resource 'engram/table'"),
    "bound": (_bound, r"engram_tables\[0\]\.row_index: .* also written by a value binding"),
}


def _mutated(core, mutate):
    from helios.ignition.prepare import PreparedCore

    serving, manifest = contract_pb2.ServingContract(), manifest_pb2.ExecutionManifest()
    serving.CopyFrom(core.contract)
    manifest.CopyFrom(core.manifest)
    mutate(serving, manifest)
    return PreparedCore(serving, manifest, core.resource_list)


def test_the_test_recipes_declaration_decodes_and_round_trips(engram_core):
    from google.protobuf import json_format

    core, _ = engram_core
    contract = PreparedContract.decode(core.contract, core.manifest)
    (table,) = contract.engram_tables
    assert table.orders == (2, 3) and len(table.multipliers) == 5 and "decode_b2" in table.graphs
    serving, _ = contract.to_proto()
    assert list(serving.model.engram_tables) == list(core.contract.model.engram_tables)
    parsed = json_format.Parse(json_format.MessageToJson(core.contract), contract_pb2.ServingContract())
    assert parsed == core.contract


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_declaration_is_refused_with_its_path(engram_core, case):
    mutate, message = MALFORMED[case]
    core = _mutated(engram_core[0], mutate)
    with pytest.raises(e.InvalidEngramTable, match=message) as caught:
        PreparedContract.decode(core.contract, core.manifest)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("runtime", ["reference", "production"])
def test_a_malformed_declaration_fails_load_in_one_line(engram_core, runtime):
    core = _mutated(engram_core[0], _frames)
    _refused_in_one_line(core, runtime, e.InvalidEngramTable, r"model\.engram_tables\[0\]\.staging: ")


def test_an_older_contract_version_has_no_engram_tables(engram_core):
    core = _mutated(engram_core[0], lambda s, m: setattr(s.model, "version", 2))
    with pytest.raises(e.FieldNotInVersion, match="contract version 2 has no Engram tables"):
        PreparedContract.decode(core.contract, core.manifest)
