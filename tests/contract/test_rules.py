"""One test per rejection rule: mutate the valid contract once, expect that rule's error at that path."""

from __future__ import annotations

import pytest

from helios.contract import PreparedContract
from helios.contract import errors as e
from helios.proto import contract_pb2 as c
from helios.proto import manifest_pb2 as m
from tests.contract import valid


def graph(s, name):
    return next(g for g in s.model.graphs if g.name == name)


def buffer(man, name):
    return next(b for b in man.buffers if b.name == name)


def binding(g, destination):
    return next(b for b in g.value_bindings if b.destination == destination)


def _drop(s, mf, name):
    """Remove one graph from both the contract and the execution catalog."""
    kept = [g for g in s.model.graphs if g.name != name]
    s.model.ClearField("graphs")
    s.model.graphs.extend(kept)
    handles = [h for h in mf.graphs if h.name != name]
    mf.ClearField("graphs")
    mf.graphs.extend(handles)


def _masks(s, mf, *, graph_name="speculative_4x3", shape=(4, 3, 2), dtype=m.DTYPE_I32, without_ids=False):
    """Bind per-position grammar masks (CANDIDATE_GRAMMAR_MASKS) into a fresh buffer of `shape`."""
    mf.buffers.append(m.BufferDescriptor(name="candidate_masks", role=m.BUFFER_ROLE_TRANSPORT, dtype=dtype,
                                         shape=list(shape), per_frame=True))
    g = graph(s, graph_name)
    if without_ids:
        g.value_bindings.remove(binding(g, "candidate_ids"))
    g.value_bindings.append(c.ValueBinding(destination="candidate_masks", source=c.VALUE_SOURCE_CANDIDATE_GRAMMAR_MASKS,
                                           indexing=c.INDEXING_ACTIVE_ROW, padding=-1))


# (id, mutate(serving, manifest), error class, expected path)
CASES = [
    ("candidate-masks-off-speculative", lambda s, mf: _masks(s, mf, graph_name="decode_4"),
     e.CopiedProposalBinding, "model.graphs[2].value_bindings[3].source"),
    ("candidate-masks-without-ids", lambda s, mf: _masks(s, mf, without_ids=True),
     e.CopiedProposalBinding, "model.graphs[3].value_bindings[6].source"),
    ("candidate-masks-wrong-width", lambda s, mf: _masks(s, mf, shape=(4, 2, 2)),
     e.CopiedProposalBinding, "model.graphs[3].value_bindings[7].destination"),
    ("candidate-masks-wrong-words", lambda s, mf: _masks(s, mf, shape=(4, 3, 1)),
     e.CopiedProposalBinding, "model.graphs[3].value_bindings[7].destination"),
    ("candidate-masks-not-i32", lambda s, mf: _masks(s, mf, dtype=m.DTYPE_F32),
     e.CopiedProposalBinding, "model.graphs[3].value_bindings[7].destination"),
    ("candidate-ids-off-speculative", lambda s, mf: graph(s, "decode_4").value_bindings.append(c.ValueBinding(
        destination="candidate_count", source=c.VALUE_SOURCE_CANDIDATE_COUNT, indexing=c.INDEXING_ACTIVE_ROW)),
     e.CopiedProposalBinding, "model.graphs[2].value_bindings[3].source"),
    ("version-0", lambda s, mf: setattr(s.model, "version", 0), e.UnsupportedContractVersion, "model.version"),
    ("version-4", lambda s, mf: setattr(s.model, "version", 4), e.UnsupportedContractVersion, "model.version"),
    ("unspecified-operation", lambda s, mf: setattr(graph(s, "prefill_16"), "operation", 0),
     e.UnspecifiedEnum, "model.graphs[1].operation"),
    ("unspecified-source", lambda s, mf: setattr(graph(s, "prefill_16").value_bindings[0], "source", 0),
     e.UnspecifiedEnum, "model.graphs[1].value_bindings[0].source"),
    ("unspecified-indexing", lambda s, mf: setattr(graph(s, "prefill_16").value_bindings[1], "indexing", 0),
     e.UnspecifiedEnum, "model.graphs[1].value_bindings[1].indexing"),
    ("unspecified-access", lambda s, mf: setattr(graph(s, "decode_4").state_accesses[0], "access", 0),
     e.UnspecifiedEnum, "model.graphs[2].state_accesses[0].access"),
    ("unspecified-history-kind", lambda s, mf: setattr(s.model.cache.histories[0], "kind", 0),
     e.UnspecifiedEnum, "model.cache.histories[0].kind"),
    ("unspecified-tool-parser", lambda s, mf: setattr(s.model.frontend, "tool_parser", 0),
     e.UnspecifiedEnum, "model.frontend.tool_parser"),
    ("unspecified-reasoning-parser", lambda s, mf: setattr(s.model.frontend, "reasoning_parser", 0),
     e.UnspecifiedEnum, "model.frontend.reasoning_parser"),
    ("unspecified-image-preparation", lambda s, mf: setattr(s.model.frontend, "image_preparation", 0),
     e.UnspecifiedEnum, "model.frontend.image_preparation"),
    ("unspecified-image-layout", lambda s, mf: setattr(s.model.frontend, "image_layout", 0),
     e.UnspecifiedEnum, "model.frontend.image_layout"),
    ("unspecified-buffer-dtype", lambda s, mf: setattr(buffer(mf, "tokens"), "dtype", 0),
     e.UnspecifiedEnum, "manifest.buffers[0].dtype"),
    ("unknown-tool-parser", lambda s, mf: setattr(s.model.frontend, "tool_parser", 99),
     e.UnknownEnumValue, "model.frontend.tool_parser"),
    ("unknown-image-layout", lambda s, mf: setattr(s.model.frontend, "image_layout", 42),
     e.UnknownEnumValue, "model.frontend.image_layout"),
    ("unknown-source", lambda s, mf: setattr(graph(s, "decode_4").value_bindings[0], "source", 777),
     e.UnknownEnumValue, "model.graphs[2].value_bindings[0].source"),
    ("unknown-graph", lambda s, mf: setattr(graph(s, "decode_4"), "name", "decode_9"),
     e.UnknownGraph, "model.graphs[2].name"),
    ("missing-graph-contract", lambda s, mf: mf.graphs.append(m.GraphHandle(
        name="decode_8", operation=c.OPERATION_DECODE, program_resources=["p"], batch_capacity=8,
        packed_token_capacity=8)), e.MissingGraphContract, "manifest.graphs[4].name"),
    ("duplicate-buffer", lambda s, mf: mf.buffers.append(m.BufferDescriptor(
        name="tokens", role=m.BUFFER_ROLE_TRANSPORT, dtype=m.DTYPE_I32, shape=[1])),
     e.DuplicateName, f"manifest.buffers[{len(valid.manifest().buffers)}].name"),
    ("operation-mismatch", lambda s, mf: setattr(graph(s, "decode_4"), "operation", c.OPERATION_MIXED),
     e.OperationMismatch, "model.graphs[2].operation"),
    ("capacity-mismatch", lambda s, mf: setattr(graph(s, "decode_4").capacity, "batch_capacity", 2),
     e.CapacityMismatch, "model.graphs[2].capacity"),
    ("unregistered-destination", lambda s, mf: setattr(graph(s, "prefill_16").value_bindings[0], "destination",
                                                        "no_such_buffer"),
     e.UnregisteredDestination, "model.graphs[1].value_bindings[0].destination"),
    ("destination-not-transport", lambda s, mf: setattr(graph(s, "prefill_16").value_bindings[0], "destination",
                                                         "pending"),
     e.UnregisteredDestination, "model.graphs[1].value_bindings[0].destination"),
    ("no-length-source", lambda s, mf: graph(s, "speculative_4x3").value_bindings.remove(
        binding(graph(s, "speculative_4x3"), "prefix_limits")),
     e.LengthSourceCount, "model.graphs[3].value_bindings"),
    ("two-length-sources", lambda s, mf: graph(s, "speculative_4x3").value_bindings.append(c.ValueBinding(
        destination="slots", source=c.VALUE_SOURCE_QUERY_LENGTH, indexing=c.INDEXING_ACTIVE_ROW)),
     e.LengthSourceCount, "model.graphs[3].value_bindings"),
    ("lane-limit-above-d-plus-1", lambda s, mf: (setattr(graph(s, "speculative_4x3").speculative, "draft_tokens", 1),
                                                 setattr(graph(s, "speculative_4x3").speculative, "confidence_width", 1)),
     e.LaneLimitExceeded, "model.graphs[3].speculative.lane_token_limit"),
    ("lane-limit-above-w", lambda s, mf: setattr(graph(s, "speculative_4x3").speculative, "lane_token_limit", 4),
     e.LaneLimitExceeded, "model.graphs[3].speculative.lane_token_limit"),
    ("confidence-width-not-d", lambda s, mf: setattr(graph(s, "speculative_4x3").speculative, "confidence_width", 3),
     e.ConfidenceWidthMismatch, "model.graphs[3].speculative.confidence_width"),
    ("confidence-storage-dtype", lambda s, mf: setattr(buffer(mf, "proposal_confidence"), "dtype", m.DTYPE_BF16),
     e.ConfidenceStorageInvalid, "manifest.buffers[13]"),
    ("confidence-storage-frames", lambda s, mf: buffer(mf, "proposal_confidence").shape.__setitem__(0, 1),
     e.ConfidenceStorageInvalid, "manifest.buffers[13]"),
    ("confidence-storage-slots", lambda s, mf: buffer(mf, "proposal_confidence").shape.__setitem__(1, 3),
     e.ConfidenceStorageInvalid, "manifest.buffers[13]"),
    ("confidence-storage-width", lambda s, mf: buffer(mf, "proposal_confidence").shape.__setitem__(2, 1),
     e.ConfidenceStorageInvalid, "manifest.buffers[13]"),
    ("confidence-storage-missing", lambda s, mf: mf.buffers.remove(buffer(mf, "proposal_confidence")),
     e.ConfidenceStorageInvalid, "model.graphs[3].speculative.confidence_width"),
    ("speculative-descriptor-on-decode", lambda s, mf: graph(s, "decode_4").speculative.CopyFrom(
        graph(s, "speculative_4x3").speculative), e.SpeculativeDescriptorMismatch, "model.graphs[2].speculative"),
    ("speculative-without-descriptor", lambda s, mf: graph(s, "speculative_4x3").ClearField("speculative"),
     e.SpeculativeDescriptorMismatch, "model.graphs[3].speculative"),
    ("tuned-producer-missing", lambda s, mf: setattr(graph(s, "decode_4").tuned_bindings[0], "producer", "nope"),
     e.UnknownProducer, "model.graphs[2].tuned_bindings[0].producer"),
    ("tuned-descriptor-producer", lambda s, mf: (mf.tuning_catalog.append(m.GraphHandle(name="other_tuner")),
                                                 setattr(buffer(mf, "attention_split"), "producer", "other_tuner")),
     e.TunedDescriptorMismatch, "model.graphs[2].tuned_bindings[0].buffer"),
    ("tuned-descriptor-role", lambda s, mf: setattr(buffer(mf, "attention_split"), "role", m.BUFFER_ROLE_STATE),
     e.TunedDescriptorMismatch, "model.graphs[2].tuned_bindings[0].buffer"),
    ("tuned-overlaps-input", lambda s, mf: graph(s, "decode_4").value_bindings.append(c.ValueBinding(
        destination="attention_split", source=c.VALUE_SOURCE_SLOT, indexing=c.INDEXING_ACTIVE_ROW)),
     e.TunedOutputOverlap, "model.graphs[2].tuned_bindings[0].buffer"),
    ("tuned-overlaps-writable-state", lambda s, mf: graph(s, "decode_4").state_accesses.append(c.StateAccess(
        view=c.StateView(buffer="attention_split", byte_extent=4), access=c.ACCESS_WRITE)),
     e.TunedOutputOverlap, "model.graphs[2].tuned_bindings[0].buffer"),
    ("tuned-overlaps-cache", lambda s, mf: s.model.cache.histories[0].planes.append("attention_split"),
     e.TunedOutputOverlap, "model.graphs[2].tuned_bindings[0].buffer"),
    ("tuned-in-version-2", lambda s, mf: setattr(s.model, "version", 2),
     e.FieldNotInVersion, "model.graphs[2].tuned_bindings"),
    ("state-view-outside-buffer", lambda s, mf: setattr(graph(s, "decode_4").pending_token_state, "byte_offset", 64),
     e.StateViewOutOfBounds, "model.graphs[2].pending_token_state"),
    ("state-view-extent-over-stride", lambda s, mf: setattr(graph(s, "decode_4").state_accesses[0].view,
                                                            "byte_extent", 1024),
     e.StateViewOutOfBounds, "model.graphs[2].state_accesses[0].view.byte_extent"),
    ("state-view-unknown-buffer", lambda s, mf: setattr(graph(s, "decode_4").state_accesses[0].view, "buffer", "x"),
     e.UnknownBuffer, "model.graphs[2].state_accesses[0].view.buffer"),
    ("page-table-view-unknown-buffer", lambda s, mf: setattr(s.model.cache.page_table_views[1], "destination", "nope"),
     e.UnknownBuffer, "model.cache.page_table_views[1].destination"),
    ("page-table-binding-without-view", lambda s, mf: s.model.cache.page_table_views.pop(),
     e.UnknownBuffer, "model.graphs[3].value_bindings[4].destination"),
    ("cache-plane-unknown", lambda s, mf: s.model.cache.histories[0].planes.append("k_cache_9"),
     e.UnknownBuffer, "model.cache.histories[0].planes[2]"),
    ("sliding-window-without-extent", lambda s, mf: setattr(s.model.cache.histories[0], "kind",
                                                            c.HISTORY_KIND_SLIDING_WINDOW),
     e.InvalidGeometry, "model.cache.histories[0].window_tokens"),
    ("cursor-unknown-history", lambda s, mf: setattr(graph(s, "speculative_4x3").draft_cursor, "committed_state", "z"),
     e.UnknownHistory, "model.graphs[3].draft_cursor.committed_state"),
    ("pending-token-both-owners", lambda s, mf: graph(s, "decode_4").value_bindings.append(c.ValueBinding(
        destination="tokens", source=c.VALUE_SOURCE_PENDING_TOKEN, indexing=c.INDEXING_ACTIVE_ROW)),
     e.PendingTokenOwnership, "model.graphs[2].pending_token_state"),
    ("xtml-think-without-xtml-tools", lambda s, mf: setattr(s.model.frontend, "reasoning_parser",
                                                            c.REASONING_PARSER_XTML_THINK),
     e.IncompatibleFrontend, "model.frontend.reasoning_parser"),
    ("recipient-without-atem", lambda s, mf: setattr(s.model.frontend, "reasoning_parser",
                                                     c.REASONING_PARSER_RECIPIENT_HEADER),
     e.IncompatibleFrontend, "model.frontend.reasoning_parser"),
    ("atem-without-recipient", lambda s, mf: setattr(s.model.frontend, "tool_parser", c.TOOL_PARSER_ATEM),
     e.IncompatibleFrontend, "model.frontend.tool_parser"),
    ("terminal-marker-not-opener", lambda s, mf: setattr(s.model.frontend.reasoning_syntax, "terminal_marker",
                                                         "<function"),
     e.TerminalMarkerMismatch, "model.frontend.reasoning_syntax.terminal_marker"),
    ("mask-words", lambda s, mf: setattr(s.model.vocabulary, "mask_words", 3),
     e.InvalidGeometry, "model.vocabulary.mask_words"),
    ("logits-narrower-than-vocabulary", lambda s, mf: setattr(s.model.vocabulary, "logits_width", 32),
     e.InvalidGeometry, "model.vocabulary.logits_width"),
    ("sampled-image-sentinel", lambda s, mf: s.model.input_vocabulary.image_sentinels.append(5),
     e.InvalidGeometry, "model.input_vocabulary.image_sentinels[1]"),
    ("eos-outside-vocabulary", lambda s, mf: s.model.frontend.eos_token_ids.append(61),
     e.InvalidGeometry, "model.frontend.eos_token_ids[1]"),
    ("completion-field-missing", lambda s, mf: mf.completion.fields.pop(),
     e.InvalidCompletionLayout, "manifest.completion"),
    ("completion-buffer-not-completion", lambda s, mf: setattr(mf.completion.fields[0], "buffer", "tokens"),
     e.InvalidCompletionLayout, "manifest.completion.fields[0].buffer"),
    ("programs-per-rank", lambda s, mf: setattr(mf, "ranks", 2),
     e.InvalidGeometry, "manifest.graphs[0].program_resources"),
    # Missing graph variants fail startup.
    ("width-without-graph", lambda s, mf: s.speculative_widths.append(5),
     e.MissingGraphVariant, "speculative_widths[1]"),
    ("graph-width-undeclared", lambda s, mf: s.ClearField("speculative_widths"),
     e.MissingGraphVariant, "model.graphs[3].speculative.verify_tokens"),
    ("concurrency-beyond-every-graph", lambda s, mf: setattr(s, "max_concurrency", 8),
     e.MissingGraphVariant, "max_concurrency"),
    ("prefill-chunk-beyond-every-graph", lambda s, mf: setattr(s, "prefill_tokens", 32),
     e.MissingGraphVariant, "prefill_tokens"),
    ("no-prompt-graph", lambda s, mf: _drop(s, mf, "prefill_16"), e.MissingGraphVariant, "model.graphs"),
    ("no-generation-graph", lambda s, mf: (_drop(s, mf, "decode_4"), _drop(s, mf, "speculative_4x3"),
                                           s.ClearField("speculative_widths")),
     e.MissingGraphVariant, "model.graphs"),
    # History regions.
    ("history-name-repeated", lambda s, mf: setattr(s.model.cache.histories[1], "name", "layer0"),
     e.DuplicateName, "model.cache.histories[1].name"),
    ("window-on-a-paged-region", lambda s, mf: setattr(s.model.cache.histories[0], "window_tokens", 8),
     e.InvalidGeometry, "model.cache.histories[0].window_tokens"),
    # Defaults a request could not give.
    ("default-top-p-above-one", lambda s, mf: setattr(s.defaults.sampling, "top_p", 1.5),
     e.InvalidDefaults, "defaults.sampling.top_p"),
    ("default-top-p-zero", lambda s, mf: setattr(s.defaults.sampling, "top_p", 0.0),
     e.InvalidDefaults, "defaults.sampling.top_p"),
    ("default-negative-temperature", lambda s, mf: setattr(s.defaults.sampling, "temperature", -0.5),
     e.InvalidDefaults, "defaults.sampling.temperature"),
    ("default-nan-temperature", lambda s, mf: setattr(s.defaults.sampling, "temperature", float("nan")),
     e.InvalidDefaults, "defaults.sampling.temperature"),
    ("default-min-p-above-one", lambda s, mf: setattr(s.defaults.sampling, "min_p", 1.5),
     e.InvalidDefaults, "defaults.sampling.min_p"),
    ("default-repetition-zero", lambda s, mf: setattr(s.defaults.sampling, "repetition_penalty", 0.0),
     e.InvalidDefaults, "defaults.sampling.repetition_penalty"),
    ("default-presence-beyond-two", lambda s, mf: setattr(s.defaults.sampling, "presence_penalty", 3.0),
     e.InvalidDefaults, "defaults.sampling.presence_penalty"),
    ("default-output-limit-zero", lambda s, mf: setattr(s.defaults, "max_output_tokens", 0),
     e.InvalidDefaults, "defaults.max_output_tokens"),
    # Identity.
    ("empty-served-id", lambda s, mf: setattr(s, "served_id", ""), e.InvalidIdentity, "served_id"),
    ("empty-alias", lambda s, mf: s.aliases.append(""), e.InvalidIdentity, "aliases[1]"),
    ("empty-cache-identity", lambda s, mf: setattr(s, "cache_identity", ""), e.InvalidIdentity, "cache_identity"),
    ("producer-named-like-a-graph", lambda s, mf: setattr(mf.tuning_catalog[0], "name", "decode_4"),
     e.DuplicateName, "manifest.tuning_catalog[0].name"),
    ("producer-programs-per-rank", lambda s, mf: mf.tuning_catalog[0].program_resources.append("program/extra"),
     e.InvalidGeometry, "manifest.tuning_catalog[0].program_resources"),
]


@pytest.mark.parametrize("mutate, error, path", [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_each_rule_rejects_with_its_error_and_path(mutate, error, path):
    serving, manifest = valid.serving(), valid.manifest()
    mutate(serving, manifest)
    problems = PreparedContract.check(serving, manifest)
    assert any(type(p) is error and p.path == path for p in problems), \
        f"expected {error.__name__} at {path}; got {[(type(p).__name__, p.path) for p in problems]}"
    with pytest.raises(e.ContractError):
        PreparedContract.decode(serving, manifest)


def test_per_position_grammar_masks_of_the_right_shape_are_valid():
    serving, manifest = valid.serving(), valid.manifest()
    _masks(serving, manifest)
    assert PreparedContract.check(serving, manifest) == []


def test_the_valid_contract_is_valid():
    contract = PreparedContract.decode(valid.serving(), valid.manifest())
    assert contract.served_id == "tiny"
    assert [g.name for g in contract.graphs] == ["initialize_4", "prefill_16", "decode_4", "speculative_4x3"]


def test_error_message_names_path_and_problem():
    serving, manifest = valid.serving(), valid.manifest()
    graph(serving, "decode_4").value_bindings[0].destination = "nowhere"
    with pytest.raises(e.UnregisteredDestination) as raised:
        PreparedContract.decode(serving, manifest)
    assert str(raised.value) == ("model.graphs[2].value_bindings[0].destination: "
                                 "'nowhere' is not a registered transport buffer")


def test_unknown_resource_dependency():
    contract = PreparedContract.decode(valid.serving(), valid.manifest())
    held = ["program/initialize_4", "program/prefill_16", "program/decode_4", "program/speculative_4x3"]
    contract.check_resources(held)
    with pytest.raises(e.UnknownResource) as raised:
        contract.check_resources(held[:-1])
    assert raised.value.path == "manifest.graphs[3].program_resources[0]"
