"""A small, valid contract and manifest that exercises every rule, for the contract tests to mutate."""

from __future__ import annotations

from helios.proto import contract_pb2 as c
from helios.proto import core_pb2
from helios.proto import manifest_pb2 as m

B = m.BufferDescriptor


def manifest() -> m.ExecutionManifest:
    completion_fields = [
        (m.COMPLETION_FIELD_FRAME_INDEX, "completion_frame", [1]),
        (m.COMPLETION_FIELD_SUBMISSION_SEQUENCE, "completion_sequence", [1]),
        (m.COMPLETION_FIELD_GENERATION, "completion_generation", [4]),
        (m.COMPLETION_FIELD_SAMPLED_IDS, "completion_sampled", [4, 3]),
        (m.COMPLETION_FIELD_OFFERS, "completion_offers", [4]),
        (m.COMPLETION_FIELD_ACCEPTED_DRAFTS, "completion_accepted", [4]),
        (m.COMPLETION_FIELD_EMITTED, "completion_emitted", [4]),
        (m.COMPLETION_FIELD_CONSUMED_ENDPOINT, "completion_endpoint", [4]),
        (m.COMPLETION_FIELD_DRAFT_CURSOR, "completion_cursor", [4]),
        (m.COMPLETION_FIELD_MODEL_RESERVED, "completion_reserved", [4]),
        (m.COMPLETION_FIELD_STATUS, "completion_status", [1]),
    ]
    buffers = [
        B(name="tokens", role=m.BUFFER_ROLE_TRANSPORT, dtype=m.DTYPE_I32, shape=[16], per_frame=True),
        B(name="positions", role=m.BUFFER_ROLE_TRANSPORT, dtype=m.DTYPE_I32, shape=[16], per_frame=True),
        B(name="token_lane", role=m.BUFFER_ROLE_TRANSPORT, dtype=m.DTYPE_I32, shape=[16], per_frame=True),
        B(name="slots", role=m.BUFFER_ROLE_TRANSPORT, dtype=m.DTYPE_I32, shape=[4], per_frame=True),
        B(name="prefix_limits", role=m.BUFFER_ROLE_TRANSPORT, dtype=m.DTYPE_I32, shape=[4], per_frame=True),
        B(name="candidate_ids", role=m.BUFFER_ROLE_TRANSPORT, dtype=m.DTYPE_I32, shape=[4, 3], per_frame=True),
        B(name="candidate_count", role=m.BUFFER_ROLE_TRANSPORT, dtype=m.DTYPE_I32, shape=[4], per_frame=True),
        B(name="page_table", role=m.BUFFER_ROLE_TRANSPORT, dtype=m.DTYPE_I32, shape=[4, 8], per_frame=True),
        B(name="draft_page_table", role=m.BUFFER_ROLE_TRANSPORT, dtype=m.DTYPE_I32, shape=[4, 9], per_frame=True),
        B(name="k_cache_0", role=m.BUFFER_ROLE_CACHE, dtype=m.DTYPE_BF16, shape=[0, 16, 2, 8]),
        B(name="v_cache_0", role=m.BUFFER_ROLE_CACHE, dtype=m.DTYPE_BF16, shape=[0, 16, 2, 8]),
        B(name="pending", role=m.BUFFER_ROLE_STATE, dtype=m.DTYPE_I32, shape=[4, 4]),
        B(name="draft_state", role=m.BUFFER_ROLE_STATE, dtype=m.DTYPE_F32, shape=[4, 64]),
        B(name="proposal_confidence", role=m.BUFFER_ROLE_STATE, dtype=m.DTYPE_F32, shape=[2, 4, 4]),
        B(name="attention_split", role=m.BUFFER_ROLE_TUNED, dtype=m.DTYPE_I32, shape=[4], producer="tune_attention"),
    ] + [B(name=name, role=m.BUFFER_ROLE_COMPLETION, dtype=m.DTYPE_I32, shape=shape, per_frame=True)
         for _, name, shape in completion_fields]
    graphs = [
        m.GraphHandle(name="initialize_4", operation=c.OPERATION_INITIALIZATION, program_resources=["program/initialize_4"],
                      batch_capacity=4, packed_token_capacity=4),
        m.GraphHandle(name="prefill_16", operation=c.OPERATION_PREFILL, program_resources=["program/prefill_16"],
                      batch_capacity=1, packed_token_capacity=16),
        m.GraphHandle(name="decode_4", operation=c.OPERATION_DECODE, program_resources=["program/decode_4"],
                      batch_capacity=4, packed_token_capacity=4),
        m.GraphHandle(name="speculative_4x3", operation=c.OPERATION_SPECULATIVE,
                      program_resources=["program/speculative_4x3"], batch_capacity=4, packed_token_capacity=12),
    ]
    return m.ExecutionManifest(
        abi_label="helios-abi-1", ranks=1, buffers=buffers, graphs=graphs,
        transport=m.TransportDescriptor(frames=2),
        completion=m.CompletionLayout(fields=[m.CompletionSlot(field=f, buffer=n) for f, n, _ in completion_fields]),
        tuning_catalog=[m.GraphHandle(name="tune_attention", operation=c.OPERATION_UNSPECIFIED,
                                      program_resources=["program/tune_attention"], batch_capacity=1,
                                      packed_token_capacity=1)],
    )


def _bind(dest, source, indexing, **kw) -> c.ValueBinding:
    return c.ValueBinding(destination=dest, source=source, indexing=indexing, **kw)


def serving() -> c.ServingContract:
    kv = [c.StateAccess(view=c.StateView(buffer="k_cache_0", byte_offset=0, row_stride=512, byte_extent=512),
                        access=c.ACCESS_READ_WRITE)]
    pending_view = c.StateView(buffer="pending", byte_offset=0, row_stride=16, byte_extent=4)
    token_inputs = [
        _bind("tokens", c.VALUE_SOURCE_PROMPT_TOKENS, c.INDEXING_PACKED_TOKEN, padding=0),
        _bind("positions", c.VALUE_SOURCE_PROMPT_POSITIONS, c.INDEXING_PACKED_TOKEN),
        _bind("token_lane", c.VALUE_SOURCE_SLOT, c.INDEXING_PACKED_TOKEN, padding=-1),
        _bind("page_table", c.VALUE_SOURCE_PAGE_TABLE, c.INDEXING_SUBMISSION_ROW, padding=0),
    ]
    graphs = [
        c.GraphContract(name="initialize_4", operation=c.OPERATION_INITIALIZATION,
                        value_bindings=[_bind("slots", c.VALUE_SOURCE_SLOT, c.INDEXING_ACTIVE_ROW)],
                        state_accesses=[c.StateAccess(view=pending_view, access=c.ACCESS_WRITE)],
                        resource_dependencies=["program/initialize_4"],
                        capacity=c.GraphCapacity(batch_capacity=4, packed_token_capacity=4)),
        c.GraphContract(name="prefill_16", operation=c.OPERATION_PREFILL, value_bindings=token_inputs,
                        state_accesses=kv + [c.StateAccess(view=pending_view, access=c.ACCESS_WRITE)],
                        resource_dependencies=["program/prefill_16"],
                        capacity=c.GraphCapacity(batch_capacity=1, packed_token_capacity=16),
                        state_rows_per_request=1),
        c.GraphContract(name="decode_4", operation=c.OPERATION_DECODE, value_bindings=token_inputs[1:],
                        state_accesses=kv, resource_dependencies=["program/decode_4"],
                        capacity=c.GraphCapacity(batch_capacity=4, packed_token_capacity=4),
                        tuned_bindings=[c.TunedBinding(buffer="attention_split", producer="tune_attention")],
                        state_rows_per_request=1, pending_token_state=pending_view),
        c.GraphContract(
            name="speculative_4x3", operation=c.OPERATION_SPECULATIVE,
            value_bindings=token_inputs[1:] + [
                _bind("prefix_limits", c.VALUE_SOURCE_SPECULATIVE_PREFIX_LIMIT, c.INDEXING_ACTIVE_ROW),
                _bind("draft_page_table", c.VALUE_SOURCE_PAGE_TABLE, c.INDEXING_SUBMISSION_ROW),
                _bind("candidate_ids", c.VALUE_SOURCE_CANDIDATE_IDS, c.INDEXING_ACTIVE_ROW),
                _bind("candidate_count", c.VALUE_SOURCE_CANDIDATE_COUNT, c.INDEXING_ACTIVE_ROW),
            ],
            state_accesses=kv + [c.StateAccess(view=c.StateView(buffer="draft_state", byte_offset=0, row_stride=256,
                                                                byte_extent=256), access=c.ACCESS_READ_WRITE)],
            resource_dependencies=["program/speculative_4x3"],
            capacity=c.GraphCapacity(batch_capacity=4, packed_token_capacity=12),
            speculative=c.SpeculativeDescriptor(batch_capacity=4, draft_tokens=2, verify_tokens=3,
                                                packed_token_capacity=12, confidence_width=2, lane_token_limit=3,
                                                draft_capacity=4),
            state_rows_per_request=2, pending_token_state=pending_view,
            draft_cursor=c.CompletionCursor(committed_state="draft", lag_tokens=1)),
    ]
    model = c.ModelContract(
        version=3,
        vocabulary=c.VocabularyContract(sampled_tokens=60, logits_width=64, histogram_width=64, mask_words=2),
        input_vocabulary=c.InputVocabularyContract(input_tokens=64, image_sentinels=[62]),
        vision=c.VisionContract(),
        cache=c.CacheContract(
            page_tokens=16,
            histories=[c.HistoryRegion(name="layer0", kind=c.HISTORY_KIND_PAGED_KEY_VALUE,
                                       planes=["k_cache_0", "v_cache_0"], tokens_per_record=1, layers=[0]),
                       c.HistoryRegion(name="draft", kind=c.HISTORY_KIND_RECURRENT, planes=["draft_state"])],
            page_table_views=[c.PageTableView(destination="page_table", page_offset=0),
                              c.PageTableView(destination="draft_page_table", page_offset=1)]),
        graphs=graphs,
        frontend=c.FrontendContract(
            tool_parser=c.TOOL_PARSER_QWEN_CODER, reasoning_parser=c.REASONING_PARSER_THINK,
            image_preparation=c.IMAGE_PREPARATION_NONE, image_layout=c.IMAGE_LAYOUT_NONE,
            tool_syntax=c.ToolSyntax(opener="<tool_call>", closer="</tool_call>"),
            reasoning_syntax=c.ReasoningSyntax(open="<think>", close="</think>", terminal_marker="<tool_call>"),
            prompt_syntax=c.PromptSyntax(assistant_open="<|im_start|>assistant\n", message_end="<|im_end|>"),
            eos_token_ids=[2], template_tokens=[c.TemplateToken(text="<|im_end|>", id=2)]),
    )
    return c.ServingContract(
        served_id="tiny", aliases=["tiny-chat"], cache_identity="tiny@1", context_tokens=128, prefill_tokens=16,
        page_capacity=32, snapshot_capacity=4, max_concurrency=4, speculative_widths=[3],
        defaults=c.ServingDefaults(sampling=c.SamplingDefaults(temperature=0.7, top_p=0.9), max_active=4),
        model=model)


def deployment() -> core_pb2.DeploymentBody:
    return core_pb2.DeploymentBody(contract=serving(), manifest=manifest())
