"""Conversion between the wire messages and PreparedContract's typed parts (host side).

`model_from_proto` and friends translate without judging: decoding a field never fails here, so that
validation (validate.py) can report every problem with its exact path.
"""

from __future__ import annotations

from helios.contract.enums import (
    Access,
    HistoryKind,
    ImageLayout,
    ImagePreparation,
    Indexing,
    Operation,
    ReasoningParser,
    ToolParser,
    ValueSource,
)
from helios.contract.model import (
    Cache,
    CompletionCursor,
    Frontend,
    Graph,
    HistoryRegion,
    ImageSettings,
    InputVocabulary,
    PageTableView,
    PrefixBoundaryRule,
    PromptSyntax,
    ReasoningSyntax,
    Speculative,
    StateAccess,
    StateView,
    ToolSyntax,
    TunedBinding,
    ValueBinding,
    Vision,
    Vocabulary,
    _enum,
)
from helios.proto import contract_pb2


def _view(m: contract_pb2.StateView) -> StateView:
    return StateView(m.buffer, m.byte_offset, m.row_stride, m.byte_extent)


def _view_proto(v: StateView) -> contract_pb2.StateView:
    return contract_pb2.StateView(buffer=v.buffer, byte_offset=v.byte_offset, row_stride=v.row_stride,
                                  byte_extent=v.byte_extent)


def graph_from_proto(m: contract_pb2.GraphContract) -> Graph:
    spec = m.speculative
    return Graph(
        name=m.name,
        operation=_enum(Operation, m.operation),
        value_bindings=tuple(
            ValueBinding(b.destination, _enum(ValueSource, b.source), _enum(Indexing, b.indexing), b.offset,
                         b.padding, tuple(b.constants), b.image_output)
            for b in m.value_bindings),
        state_accesses=tuple(StateAccess(_view(a.view), _enum(Access, a.access)) for a in m.state_accesses),
        tuned_bindings=tuple(TunedBinding(t.buffer, t.producer) for t in m.tuned_bindings),
        resource_dependencies=tuple(m.resource_dependencies),
        batch_capacity=m.capacity.batch_capacity,
        packed_token_capacity=m.capacity.packed_token_capacity,
        speculative=Speculative(spec.batch_capacity, spec.draft_tokens, spec.verify_tokens,
                                spec.packed_token_capacity, spec.confidence_width, spec.lane_token_limit,
                                spec.draft_capacity) if m.HasField("speculative") else None,
        state_rows_per_request=m.state_rows_per_request,
        draft_cursor=CompletionCursor(m.draft_cursor.committed_state, m.draft_cursor.lag_tokens)
        if m.HasField("draft_cursor") else None,
        pending_token_state=_view(m.pending_token_state) if m.HasField("pending_token_state") else None,
    )


def graph_to_proto(g: Graph) -> contract_pb2.GraphContract:
    m = contract_pb2.GraphContract(
        name=g.name,
        operation=int(g.operation),
        value_bindings=[contract_pb2.ValueBinding(destination=b.destination, source=int(b.source),
                                                  indexing=int(b.indexing), offset=b.offset, padding=b.padding,
                                                  constants=list(b.constants), image_output=b.image_output)
                        for b in g.value_bindings],
        state_accesses=[contract_pb2.StateAccess(view=_view_proto(a.view), access=int(a.access))
                        for a in g.state_accesses],
        tuned_bindings=[contract_pb2.TunedBinding(buffer=t.buffer, producer=t.producer) for t in g.tuned_bindings],
        resource_dependencies=list(g.resource_dependencies),
        capacity=contract_pb2.GraphCapacity(batch_capacity=g.batch_capacity,
                                            packed_token_capacity=g.packed_token_capacity),
        state_rows_per_request=g.state_rows_per_request,
    )
    if g.speculative is not None:
        s = g.speculative
        m.speculative.CopyFrom(contract_pb2.SpeculativeDescriptor(
            batch_capacity=s.batch_capacity, draft_tokens=s.draft_tokens, verify_tokens=s.verify_tokens,
            packed_token_capacity=s.packed_token_capacity, confidence_width=s.confidence_width,
            lane_token_limit=s.lane_token_limit, draft_capacity=s.draft_capacity))
    if g.draft_cursor is not None:
        m.draft_cursor.CopyFrom(contract_pb2.CompletionCursor(committed_state=g.draft_cursor.committed_state,
                                                              lag_tokens=g.draft_cursor.lag_tokens))
    if g.pending_token_state is not None:
        m.pending_token_state.CopyFrom(_view_proto(g.pending_token_state))
    return m


def cache_from_proto(m: contract_pb2.CacheContract) -> Cache:
    return Cache(
        page_tokens=m.page_tokens,
        histories=tuple(HistoryRegion(h.name, _enum(HistoryKind, h.kind), tuple(h.planes), h.tokens_per_record,
                                      h.window_tokens, tuple(h.layers)) for h in m.histories),
        page_table_views=tuple(PageTableView(v.destination, v.page_offset) for v in m.page_table_views),
    )


def cache_to_proto(c: Cache) -> contract_pb2.CacheContract:
    return contract_pb2.CacheContract(
        page_tokens=c.page_tokens,
        histories=[contract_pb2.HistoryRegion(name=h.name, kind=int(h.kind), planes=list(h.planes),
                                              tokens_per_record=h.tokens_per_record, window_tokens=h.window_tokens,
                                              layers=list(h.layers)) for h in c.histories],
        page_table_views=[contract_pb2.PageTableView(destination=v.destination, page_offset=v.page_offset)
                          for v in c.page_table_views],
    )


_TOOL_FIELDS = ToolSyntax.__slots__
_REASONING_FIELDS = ReasoningSyntax.__slots__
_PROMPT_SCALARS = ("assistant_open", "message_end", "header_start", "header_message", "internal_end")


def _plain(value):
    """A scalar field as is; a repeated field as a tuple (the typed model is frozen)."""
    return value if isinstance(value, str | bool | int) else tuple(value)


def frontend_from_proto(m: contract_pb2.FrontendContract) -> Frontend:
    return Frontend(
        tool_parser=_enum(ToolParser, m.tool_parser),
        reasoning_parser=_enum(ReasoningParser, m.reasoning_parser),
        image_preparation=_enum(ImagePreparation, m.image_preparation),
        image_layout=_enum(ImageLayout, m.image_layout),
        tool_syntax=ToolSyntax(**{n: getattr(m.tool_syntax, n) for n in _TOOL_FIELDS}),
        reasoning_syntax=ReasoningSyntax(**{n: _plain(getattr(m.reasoning_syntax, n)) for n in _REASONING_FIELDS}),
        prompt_syntax=PromptSyntax(
            **{n: getattr(m.prompt_syntax, n) for n in _PROMPT_SCALARS},
            prefix_boundaries=tuple(PrefixBoundaryRule(r.role, r.marker) for r in m.prompt_syntax.prefix_boundaries)),
        eos_token_ids=tuple(m.eos_token_ids),
        template_tokens=tuple((t.text, t.id) for t in m.template_tokens),
        image_feature_ids=tuple(m.image_token_layout.feature_ids),
        image_atomic_spans=tuple((s.open_id, s.close_id) for s in m.image_token_layout.atomic_spans),
        image_settings=ImageSettings(m.image_settings.image_size, m.image_settings.patch_size,
                                     tuple(m.image_settings.mean), tuple(m.image_settings.std)),
    )


def frontend_to_proto(f: Frontend) -> contract_pb2.FrontendContract:
    return contract_pb2.FrontendContract(
        tool_parser=int(f.tool_parser),
        reasoning_parser=int(f.reasoning_parser),
        image_preparation=int(f.image_preparation),
        image_layout=int(f.image_layout),
        tool_syntax=contract_pb2.ToolSyntax(**{n: getattr(f.tool_syntax, n) for n in _TOOL_FIELDS}),
        reasoning_syntax=contract_pb2.ReasoningSyntax(**{n: getattr(f.reasoning_syntax, n) for n in _REASONING_FIELDS}),
        prompt_syntax=contract_pb2.PromptSyntax(
            **{n: getattr(f.prompt_syntax, n) for n in _PROMPT_SCALARS},
            prefix_boundaries=[contract_pb2.PrefixBoundaryRule(role=r.role, marker=r.marker)
                               for r in f.prompt_syntax.prefix_boundaries]),
        eos_token_ids=list(f.eos_token_ids),
        template_tokens=[contract_pb2.TemplateToken(text=t, id=i) for t, i in f.template_tokens],
        image_token_layout=contract_pb2.ImageTokenLayout(
            feature_ids=list(f.image_feature_ids),
            atomic_spans=[contract_pb2.AtomicSpan(open_id=o, close_id=c) for o, c in f.image_atomic_spans]),
        # unset when empty, so a core without images serializes as before the field existed
        image_settings=contract_pb2.ImageSettings(
            image_size=f.image_settings.image_size, patch_size=f.image_settings.patch_size,
            mean=list(f.image_settings.mean), std=list(f.image_settings.std))
        if f.image_settings != ImageSettings() else None,
    )


def vocabulary_from_proto(version: int, m: contract_pb2.VocabularyContract) -> Vocabulary:
    # NOTE: version-1 contracts carry only the sampled range; the geometry derives from it
    # (docs/contract-versions.md). Explicit values, where present, are kept and validated.
    logits = m.logits_width or (m.sampled_tokens if version == 1 else 0)
    histogram = m.histogram_width or (m.sampled_tokens if version == 1 else 0)
    words = m.mask_words or ((logits + 31) // 32 if version == 1 else 0)
    return Vocabulary(m.sampled_tokens, logits, histogram, words)


def input_vocabulary_from_proto(version: int, m: contract_pb2.ModelContract) -> InputVocabulary:
    if version == 1 and not m.HasField("input_vocabulary"):
        return InputVocabulary(m.vocabulary.sampled_tokens, ())
    return InputVocabulary(m.input_vocabulary.input_tokens, tuple(m.input_vocabulary.image_sentinels))


def vision_from_proto(m: contract_pb2.VisionContract) -> Vision:
    return Vision(m.feature_slots, m.features_per_window, m.patches_per_feature, tuple(m.patch_capacities))


def vision_to_proto(v: Vision) -> contract_pb2.VisionContract:
    return contract_pb2.VisionContract(feature_slots=v.feature_slots, features_per_window=v.features_per_window,
                                       patches_per_feature=v.patches_per_feature,
                                       patch_capacities=list(v.patch_capacities))
