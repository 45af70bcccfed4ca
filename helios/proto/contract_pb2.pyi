from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class HistoryKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    HISTORY_KIND_UNSPECIFIED: _ClassVar[HistoryKind]
    HISTORY_KIND_PAGED_KEY_VALUE: _ClassVar[HistoryKind]
    HISTORY_KIND_PAGED_LATENT: _ClassVar[HistoryKind]
    HISTORY_KIND_SLIDING_WINDOW: _ClassVar[HistoryKind]
    HISTORY_KIND_RECURRENT: _ClassVar[HistoryKind]
    HISTORY_KIND_CONTINUATION: _ClassVar[HistoryKind]

class Operation(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OPERATION_UNSPECIFIED: _ClassVar[Operation]
    OPERATION_INITIALIZATION: _ClassVar[Operation]
    OPERATION_RESTORATION: _ClassVar[Operation]
    OPERATION_PREFILL: _ClassVar[Operation]
    OPERATION_SCORED_PREFILL: _ClassVar[Operation]
    OPERATION_RESUME: _ClassVar[Operation]
    OPERATION_DECODE: _ClassVar[Operation]
    OPERATION_SPECULATIVE: _ClassVar[Operation]
    OPERATION_MIXED: _ClassVar[Operation]

class ValueSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    VALUE_SOURCE_UNSPECIFIED: _ClassVar[ValueSource]
    VALUE_SOURCE_SLOT: _ClassVar[ValueSource]
    VALUE_SOURCE_GENERATION: _ClassVar[ValueSource]
    VALUE_SOURCE_LIVE_ROW_COUNT: _ClassVar[ValueSource]
    VALUE_SOURCE_QUERY_LENGTH: _ClassVar[ValueSource]
    VALUE_SOURCE_SPECULATIVE_PREFIX_LIMIT: _ClassVar[ValueSource]
    VALUE_SOURCE_SAMPLING_DECISION: _ClassVar[ValueSource]
    VALUE_SOURCE_MIXED_PREFILL_ROW: _ClassVar[ValueSource]
    VALUE_SOURCE_PROMPT_TOKENS: _ClassVar[ValueSource]
    VALUE_SOURCE_SCORED_PREFILL_TARGETS: _ClassVar[ValueSource]
    VALUE_SOURCE_PENDING_TOKEN: _ClassVar[ValueSource]
    VALUE_SOURCE_PROMPT_POSITIONS: _ClassVar[ValueSource]
    VALUE_SOURCE_IMAGE_FEATURE_INDICES: _ClassVar[ValueSource]
    VALUE_SOURCE_IMAGE_CONTEXT_INDICES: _ClassVar[ValueSource]
    VALUE_SOURCE_IMAGE_FEATURE_SLOT: _ClassVar[ValueSource]
    VALUE_SOURCE_PAGE_TABLE: _ClassVar[ValueSource]
    VALUE_SOURCE_LIVE_STATE_ROWS: _ClassVar[ValueSource]
    VALUE_SOURCE_RESTORE_SOURCE: _ClassVar[ValueSource]
    VALUE_SOURCE_SNAPSHOT_DESTINATION: _ClassVar[ValueSource]
    VALUE_SOURCE_CONSUMED_TOKEN_ENDPOINT: _ClassVar[ValueSource]
    VALUE_SOURCE_SEED_BITS: _ClassVar[ValueSource]
    VALUE_SOURCE_SAMPLING_PARAMETERS: _ClassVar[ValueSource]
    VALUE_SOURCE_OUTPUT_LIMIT: _ClassVar[ValueSource]
    VALUE_SOURCE_EOS_IDS: _ClassVar[ValueSource]
    VALUE_SOURCE_PROMPT_HISTOGRAM: _ClassVar[ValueSource]
    VALUE_SOURCE_GRAMMAR_MASK: _ClassVar[ValueSource]
    VALUE_SOURCE_CANDIDATE_IDS: _ClassVar[ValueSource]
    VALUE_SOURCE_CANDIDATE_COUNT: _ClassVar[ValueSource]
    VALUE_SOURCE_CANDIDATE_GENERATION: _ClassVar[ValueSource]
    VALUE_SOURCE_CANDIDATE_CONSUMED_ENDPOINT: _ClassVar[ValueSource]
    VALUE_SOURCE_CANDIDATE_GRAMMAR_MASKS: _ClassVar[ValueSource]
    VALUE_SOURCE_CONSTANT: _ClassVar[ValueSource]
    VALUE_SOURCE_INACTIVE_PADDING: _ClassVar[ValueSource]
    VALUE_SOURCE_IMAGE_TENSOR: _ClassVar[ValueSource]

class Indexing(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    INDEXING_UNSPECIFIED: _ClassVar[Indexing]
    INDEXING_SCALAR: _ClassVar[Indexing]
    INDEXING_SUBMISSION_ROW: _ClassVar[Indexing]
    INDEXING_ACTIVE_ROW: _ClassVar[Indexing]
    INDEXING_PHYSICAL_REQUEST_ROW: _ClassVar[Indexing]
    INDEXING_PACKED_TOKEN: _ClassVar[Indexing]

class Access(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACCESS_UNSPECIFIED: _ClassVar[Access]
    ACCESS_READ: _ClassVar[Access]
    ACCESS_WRITE: _ClassVar[Access]
    ACCESS_READ_WRITE: _ClassVar[Access]

class ToolParser(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOOL_PARSER_UNSPECIFIED: _ClassVar[ToolParser]
    TOOL_PARSER_NONE: _ClassVar[ToolParser]
    TOOL_PARSER_QWEN_CODER: _ClassVar[ToolParser]
    TOOL_PARSER_GLM: _ClassVar[ToolParser]
    TOOL_PARSER_DSML: _ClassVar[ToolParser]
    TOOL_PARSER_XTML: _ClassVar[ToolParser]
    TOOL_PARSER_ATEM: _ClassVar[ToolParser]

class ReasoningParser(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REASONING_PARSER_UNSPECIFIED: _ClassVar[ReasoningParser]
    REASONING_PARSER_NONE: _ClassVar[ReasoningParser]
    REASONING_PARSER_THINK: _ClassVar[ReasoningParser]
    REASONING_PARSER_XTML_THINK: _ClassVar[ReasoningParser]
    REASONING_PARSER_RECIPIENT_HEADER: _ClassVar[ReasoningParser]

class ImagePreparation(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    IMAGE_PREPARATION_UNSPECIFIED: _ClassVar[ImagePreparation]
    IMAGE_PREPARATION_NONE: _ClassVar[ImagePreparation]
    IMAGE_PREPARATION_CLIP: _ClassVar[ImagePreparation]

class ImageLayout(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    IMAGE_LAYOUT_UNSPECIFIED: _ClassVar[ImageLayout]
    IMAGE_LAYOUT_NONE: _ClassVar[ImageLayout]
    IMAGE_LAYOUT_FEATURE_SPAN: _ClassVar[ImageLayout]
HISTORY_KIND_UNSPECIFIED: HistoryKind
HISTORY_KIND_PAGED_KEY_VALUE: HistoryKind
HISTORY_KIND_PAGED_LATENT: HistoryKind
HISTORY_KIND_SLIDING_WINDOW: HistoryKind
HISTORY_KIND_RECURRENT: HistoryKind
HISTORY_KIND_CONTINUATION: HistoryKind
OPERATION_UNSPECIFIED: Operation
OPERATION_INITIALIZATION: Operation
OPERATION_RESTORATION: Operation
OPERATION_PREFILL: Operation
OPERATION_SCORED_PREFILL: Operation
OPERATION_RESUME: Operation
OPERATION_DECODE: Operation
OPERATION_SPECULATIVE: Operation
OPERATION_MIXED: Operation
VALUE_SOURCE_UNSPECIFIED: ValueSource
VALUE_SOURCE_SLOT: ValueSource
VALUE_SOURCE_GENERATION: ValueSource
VALUE_SOURCE_LIVE_ROW_COUNT: ValueSource
VALUE_SOURCE_QUERY_LENGTH: ValueSource
VALUE_SOURCE_SPECULATIVE_PREFIX_LIMIT: ValueSource
VALUE_SOURCE_SAMPLING_DECISION: ValueSource
VALUE_SOURCE_MIXED_PREFILL_ROW: ValueSource
VALUE_SOURCE_PROMPT_TOKENS: ValueSource
VALUE_SOURCE_SCORED_PREFILL_TARGETS: ValueSource
VALUE_SOURCE_PENDING_TOKEN: ValueSource
VALUE_SOURCE_PROMPT_POSITIONS: ValueSource
VALUE_SOURCE_IMAGE_FEATURE_INDICES: ValueSource
VALUE_SOURCE_IMAGE_CONTEXT_INDICES: ValueSource
VALUE_SOURCE_IMAGE_FEATURE_SLOT: ValueSource
VALUE_SOURCE_PAGE_TABLE: ValueSource
VALUE_SOURCE_LIVE_STATE_ROWS: ValueSource
VALUE_SOURCE_RESTORE_SOURCE: ValueSource
VALUE_SOURCE_SNAPSHOT_DESTINATION: ValueSource
VALUE_SOURCE_CONSUMED_TOKEN_ENDPOINT: ValueSource
VALUE_SOURCE_SEED_BITS: ValueSource
VALUE_SOURCE_SAMPLING_PARAMETERS: ValueSource
VALUE_SOURCE_OUTPUT_LIMIT: ValueSource
VALUE_SOURCE_EOS_IDS: ValueSource
VALUE_SOURCE_PROMPT_HISTOGRAM: ValueSource
VALUE_SOURCE_GRAMMAR_MASK: ValueSource
VALUE_SOURCE_CANDIDATE_IDS: ValueSource
VALUE_SOURCE_CANDIDATE_COUNT: ValueSource
VALUE_SOURCE_CANDIDATE_GENERATION: ValueSource
VALUE_SOURCE_CANDIDATE_CONSUMED_ENDPOINT: ValueSource
VALUE_SOURCE_CANDIDATE_GRAMMAR_MASKS: ValueSource
VALUE_SOURCE_CONSTANT: ValueSource
VALUE_SOURCE_INACTIVE_PADDING: ValueSource
VALUE_SOURCE_IMAGE_TENSOR: ValueSource
INDEXING_UNSPECIFIED: Indexing
INDEXING_SCALAR: Indexing
INDEXING_SUBMISSION_ROW: Indexing
INDEXING_ACTIVE_ROW: Indexing
INDEXING_PHYSICAL_REQUEST_ROW: Indexing
INDEXING_PACKED_TOKEN: Indexing
ACCESS_UNSPECIFIED: Access
ACCESS_READ: Access
ACCESS_WRITE: Access
ACCESS_READ_WRITE: Access
TOOL_PARSER_UNSPECIFIED: ToolParser
TOOL_PARSER_NONE: ToolParser
TOOL_PARSER_QWEN_CODER: ToolParser
TOOL_PARSER_GLM: ToolParser
TOOL_PARSER_DSML: ToolParser
TOOL_PARSER_XTML: ToolParser
TOOL_PARSER_ATEM: ToolParser
REASONING_PARSER_UNSPECIFIED: ReasoningParser
REASONING_PARSER_NONE: ReasoningParser
REASONING_PARSER_THINK: ReasoningParser
REASONING_PARSER_XTML_THINK: ReasoningParser
REASONING_PARSER_RECIPIENT_HEADER: ReasoningParser
IMAGE_PREPARATION_UNSPECIFIED: ImagePreparation
IMAGE_PREPARATION_NONE: ImagePreparation
IMAGE_PREPARATION_CLIP: ImagePreparation
IMAGE_LAYOUT_UNSPECIFIED: ImageLayout
IMAGE_LAYOUT_NONE: ImageLayout
IMAGE_LAYOUT_FEATURE_SPAN: ImageLayout

class ServingContract(_message.Message):
    __slots__ = ("served_id", "aliases", "cache_identity", "context_tokens", "prefill_tokens", "page_capacity", "snapshot_capacity", "max_concurrency", "speculative_widths", "defaults", "model")
    SERVED_ID_FIELD_NUMBER: _ClassVar[int]
    ALIASES_FIELD_NUMBER: _ClassVar[int]
    CACHE_IDENTITY_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PREFILL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PAGE_CAPACITY_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_CAPACITY_FIELD_NUMBER: _ClassVar[int]
    MAX_CONCURRENCY_FIELD_NUMBER: _ClassVar[int]
    SPECULATIVE_WIDTHS_FIELD_NUMBER: _ClassVar[int]
    DEFAULTS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    served_id: str
    aliases: _containers.RepeatedScalarFieldContainer[str]
    cache_identity: str
    context_tokens: int
    prefill_tokens: int
    page_capacity: int
    snapshot_capacity: int
    max_concurrency: int
    speculative_widths: _containers.RepeatedScalarFieldContainer[int]
    defaults: ServingDefaults
    model: ModelContract
    def __init__(self, served_id: _Optional[str] = ..., aliases: _Optional[_Iterable[str]] = ..., cache_identity: _Optional[str] = ..., context_tokens: _Optional[int] = ..., prefill_tokens: _Optional[int] = ..., page_capacity: _Optional[int] = ..., snapshot_capacity: _Optional[int] = ..., max_concurrency: _Optional[int] = ..., speculative_widths: _Optional[_Iterable[int]] = ..., defaults: _Optional[_Union[ServingDefaults, _Mapping]] = ..., model: _Optional[_Union[ModelContract, _Mapping]] = ...) -> None: ...

class ServingDefaults(_message.Message):
    __slots__ = ("sampling", "max_output_tokens", "max_active", "queue_capacity", "frontend_workers", "event_capacity")
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_ACTIVE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_CAPACITY_FIELD_NUMBER: _ClassVar[int]
    FRONTEND_WORKERS_FIELD_NUMBER: _ClassVar[int]
    EVENT_CAPACITY_FIELD_NUMBER: _ClassVar[int]
    sampling: SamplingDefaults
    max_output_tokens: int
    max_active: int
    queue_capacity: int
    frontend_workers: int
    event_capacity: int
    def __init__(self, sampling: _Optional[_Union[SamplingDefaults, _Mapping]] = ..., max_output_tokens: _Optional[int] = ..., max_active: _Optional[int] = ..., queue_capacity: _Optional[int] = ..., frontend_workers: _Optional[int] = ..., event_capacity: _Optional[int] = ...) -> None: ...

class SamplingDefaults(_message.Message):
    __slots__ = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty")
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    MIN_P_FIELD_NUMBER: _ClassVar[int]
    REPETITION_PENALTY_FIELD_NUMBER: _ClassVar[int]
    PRESENCE_PENALTY_FIELD_NUMBER: _ClassVar[int]
    FREQUENCY_PENALTY_FIELD_NUMBER: _ClassVar[int]
    temperature: float
    top_p: float
    top_k: int
    min_p: float
    repetition_penalty: float
    presence_penalty: float
    frequency_penalty: float
    def __init__(self, temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., top_k: _Optional[int] = ..., min_p: _Optional[float] = ..., repetition_penalty: _Optional[float] = ..., presence_penalty: _Optional[float] = ..., frequency_penalty: _Optional[float] = ...) -> None: ...

class ModelContract(_message.Message):
    __slots__ = ("version", "vocabulary", "input_vocabulary", "vision", "cache", "graphs", "frontend", "engram_tables")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    VOCABULARY_FIELD_NUMBER: _ClassVar[int]
    INPUT_VOCABULARY_FIELD_NUMBER: _ClassVar[int]
    VISION_FIELD_NUMBER: _ClassVar[int]
    CACHE_FIELD_NUMBER: _ClassVar[int]
    GRAPHS_FIELD_NUMBER: _ClassVar[int]
    FRONTEND_FIELD_NUMBER: _ClassVar[int]
    ENGRAM_TABLES_FIELD_NUMBER: _ClassVar[int]
    version: int
    vocabulary: VocabularyContract
    input_vocabulary: InputVocabularyContract
    vision: VisionContract
    cache: CacheContract
    graphs: _containers.RepeatedCompositeFieldContainer[GraphContract]
    frontend: FrontendContract
    engram_tables: _containers.RepeatedCompositeFieldContainer[EngramTable]
    def __init__(self, version: _Optional[int] = ..., vocabulary: _Optional[_Union[VocabularyContract, _Mapping]] = ..., input_vocabulary: _Optional[_Union[InputVocabularyContract, _Mapping]] = ..., vision: _Optional[_Union[VisionContract, _Mapping]] = ..., cache: _Optional[_Union[CacheContract, _Mapping]] = ..., graphs: _Optional[_Iterable[_Union[GraphContract, _Mapping]]] = ..., frontend: _Optional[_Union[FrontendContract, _Mapping]] = ..., engram_tables: _Optional[_Iterable[_Union[EngramTable, _Mapping]]] = ...) -> None: ...

class VocabularyContract(_message.Message):
    __slots__ = ("sampled_tokens", "logits_width", "histogram_width", "mask_words")
    SAMPLED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    LOGITS_WIDTH_FIELD_NUMBER: _ClassVar[int]
    HISTOGRAM_WIDTH_FIELD_NUMBER: _ClassVar[int]
    MASK_WORDS_FIELD_NUMBER: _ClassVar[int]
    sampled_tokens: int
    logits_width: int
    histogram_width: int
    mask_words: int
    def __init__(self, sampled_tokens: _Optional[int] = ..., logits_width: _Optional[int] = ..., histogram_width: _Optional[int] = ..., mask_words: _Optional[int] = ...) -> None: ...

class InputVocabularyContract(_message.Message):
    __slots__ = ("input_tokens", "image_sentinels")
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    IMAGE_SENTINELS_FIELD_NUMBER: _ClassVar[int]
    input_tokens: int
    image_sentinels: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, input_tokens: _Optional[int] = ..., image_sentinels: _Optional[_Iterable[int]] = ...) -> None: ...

class VisionContract(_message.Message):
    __slots__ = ("feature_slots", "features_per_window", "patches_per_feature", "patch_capacities")
    FEATURE_SLOTS_FIELD_NUMBER: _ClassVar[int]
    FEATURES_PER_WINDOW_FIELD_NUMBER: _ClassVar[int]
    PATCHES_PER_FEATURE_FIELD_NUMBER: _ClassVar[int]
    PATCH_CAPACITIES_FIELD_NUMBER: _ClassVar[int]
    feature_slots: int
    features_per_window: int
    patches_per_feature: int
    patch_capacities: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, feature_slots: _Optional[int] = ..., features_per_window: _Optional[int] = ..., patches_per_feature: _Optional[int] = ..., patch_capacities: _Optional[_Iterable[int]] = ...) -> None: ...

class CacheContract(_message.Message):
    __slots__ = ("page_tokens", "histories", "page_table_views")
    PAGE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    HISTORIES_FIELD_NUMBER: _ClassVar[int]
    PAGE_TABLE_VIEWS_FIELD_NUMBER: _ClassVar[int]
    page_tokens: int
    histories: _containers.RepeatedCompositeFieldContainer[HistoryRegion]
    page_table_views: _containers.RepeatedCompositeFieldContainer[PageTableView]
    def __init__(self, page_tokens: _Optional[int] = ..., histories: _Optional[_Iterable[_Union[HistoryRegion, _Mapping]]] = ..., page_table_views: _Optional[_Iterable[_Union[PageTableView, _Mapping]]] = ...) -> None: ...

class HistoryRegion(_message.Message):
    __slots__ = ("name", "kind", "planes", "tokens_per_record", "window_tokens", "layers")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PLANES_FIELD_NUMBER: _ClassVar[int]
    TOKENS_PER_RECORD_FIELD_NUMBER: _ClassVar[int]
    WINDOW_TOKENS_FIELD_NUMBER: _ClassVar[int]
    LAYERS_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: HistoryKind
    planes: _containers.RepeatedScalarFieldContainer[str]
    tokens_per_record: int
    window_tokens: int
    layers: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[_Union[HistoryKind, str]] = ..., planes: _Optional[_Iterable[str]] = ..., tokens_per_record: _Optional[int] = ..., window_tokens: _Optional[int] = ..., layers: _Optional[_Iterable[int]] = ...) -> None: ...

class PageTableView(_message.Message):
    __slots__ = ("destination", "page_offset")
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    PAGE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    destination: str
    page_offset: int
    def __init__(self, destination: _Optional[str] = ..., page_offset: _Optional[int] = ...) -> None: ...

class EngramTable(_message.Message):
    __slots__ = ("name", "resource", "rows", "width", "orders", "multipliers", "staging", "row_index", "graphs")
    NAME_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    ORDERS_FIELD_NUMBER: _ClassVar[int]
    MULTIPLIERS_FIELD_NUMBER: _ClassVar[int]
    STAGING_FIELD_NUMBER: _ClassVar[int]
    ROW_INDEX_FIELD_NUMBER: _ClassVar[int]
    GRAPHS_FIELD_NUMBER: _ClassVar[int]
    name: str
    resource: str
    rows: int
    width: int
    orders: _containers.RepeatedScalarFieldContainer[int]
    multipliers: _containers.RepeatedScalarFieldContainer[int]
    staging: str
    row_index: str
    graphs: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., resource: _Optional[str] = ..., rows: _Optional[int] = ..., width: _Optional[int] = ..., orders: _Optional[_Iterable[int]] = ..., multipliers: _Optional[_Iterable[int]] = ..., staging: _Optional[str] = ..., row_index: _Optional[str] = ..., graphs: _Optional[_Iterable[str]] = ...) -> None: ...

class GraphContract(_message.Message):
    __slots__ = ("name", "operation", "value_bindings", "state_accesses", "tuned_bindings", "resource_dependencies", "capacity", "speculative", "state_rows_per_request", "draft_cursor", "pending_token_state")
    NAME_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    VALUE_BINDINGS_FIELD_NUMBER: _ClassVar[int]
    STATE_ACCESSES_FIELD_NUMBER: _ClassVar[int]
    TUNED_BINDINGS_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_DEPENDENCIES_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    SPECULATIVE_FIELD_NUMBER: _ClassVar[int]
    STATE_ROWS_PER_REQUEST_FIELD_NUMBER: _ClassVar[int]
    DRAFT_CURSOR_FIELD_NUMBER: _ClassVar[int]
    PENDING_TOKEN_STATE_FIELD_NUMBER: _ClassVar[int]
    name: str
    operation: Operation
    value_bindings: _containers.RepeatedCompositeFieldContainer[ValueBinding]
    state_accesses: _containers.RepeatedCompositeFieldContainer[StateAccess]
    tuned_bindings: _containers.RepeatedCompositeFieldContainer[TunedBinding]
    resource_dependencies: _containers.RepeatedScalarFieldContainer[str]
    capacity: GraphCapacity
    speculative: SpeculativeDescriptor
    state_rows_per_request: int
    draft_cursor: CompletionCursor
    pending_token_state: StateView
    def __init__(self, name: _Optional[str] = ..., operation: _Optional[_Union[Operation, str]] = ..., value_bindings: _Optional[_Iterable[_Union[ValueBinding, _Mapping]]] = ..., state_accesses: _Optional[_Iterable[_Union[StateAccess, _Mapping]]] = ..., tuned_bindings: _Optional[_Iterable[_Union[TunedBinding, _Mapping]]] = ..., resource_dependencies: _Optional[_Iterable[str]] = ..., capacity: _Optional[_Union[GraphCapacity, _Mapping]] = ..., speculative: _Optional[_Union[SpeculativeDescriptor, _Mapping]] = ..., state_rows_per_request: _Optional[int] = ..., draft_cursor: _Optional[_Union[CompletionCursor, _Mapping]] = ..., pending_token_state: _Optional[_Union[StateView, _Mapping]] = ...) -> None: ...

class GraphCapacity(_message.Message):
    __slots__ = ("batch_capacity", "packed_token_capacity")
    BATCH_CAPACITY_FIELD_NUMBER: _ClassVar[int]
    PACKED_TOKEN_CAPACITY_FIELD_NUMBER: _ClassVar[int]
    batch_capacity: int
    packed_token_capacity: int
    def __init__(self, batch_capacity: _Optional[int] = ..., packed_token_capacity: _Optional[int] = ...) -> None: ...

class SpeculativeDescriptor(_message.Message):
    __slots__ = ("batch_capacity", "draft_tokens", "verify_tokens", "packed_token_capacity", "confidence_width", "lane_token_limit", "draft_capacity")
    BATCH_CAPACITY_FIELD_NUMBER: _ClassVar[int]
    DRAFT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    VERIFY_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PACKED_TOKEN_CAPACITY_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_WIDTH_FIELD_NUMBER: _ClassVar[int]
    LANE_TOKEN_LIMIT_FIELD_NUMBER: _ClassVar[int]
    DRAFT_CAPACITY_FIELD_NUMBER: _ClassVar[int]
    batch_capacity: int
    draft_tokens: int
    verify_tokens: int
    packed_token_capacity: int
    confidence_width: int
    lane_token_limit: int
    draft_capacity: int
    def __init__(self, batch_capacity: _Optional[int] = ..., draft_tokens: _Optional[int] = ..., verify_tokens: _Optional[int] = ..., packed_token_capacity: _Optional[int] = ..., confidence_width: _Optional[int] = ..., lane_token_limit: _Optional[int] = ..., draft_capacity: _Optional[int] = ...) -> None: ...

class CompletionCursor(_message.Message):
    __slots__ = ("committed_state", "lag_tokens")
    COMMITTED_STATE_FIELD_NUMBER: _ClassVar[int]
    LAG_TOKENS_FIELD_NUMBER: _ClassVar[int]
    committed_state: str
    lag_tokens: int
    def __init__(self, committed_state: _Optional[str] = ..., lag_tokens: _Optional[int] = ...) -> None: ...

class ValueBinding(_message.Message):
    __slots__ = ("destination", "source", "indexing", "offset", "padding", "constants", "image_output")
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    INDEXING_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    PADDING_FIELD_NUMBER: _ClassVar[int]
    CONSTANTS_FIELD_NUMBER: _ClassVar[int]
    IMAGE_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    destination: str
    source: ValueSource
    indexing: Indexing
    offset: int
    padding: int
    constants: _containers.RepeatedScalarFieldContainer[int]
    image_output: str
    def __init__(self, destination: _Optional[str] = ..., source: _Optional[_Union[ValueSource, str]] = ..., indexing: _Optional[_Union[Indexing, str]] = ..., offset: _Optional[int] = ..., padding: _Optional[int] = ..., constants: _Optional[_Iterable[int]] = ..., image_output: _Optional[str] = ...) -> None: ...

class StateView(_message.Message):
    __slots__ = ("buffer", "byte_offset", "row_stride", "byte_extent")
    BUFFER_FIELD_NUMBER: _ClassVar[int]
    BYTE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    ROW_STRIDE_FIELD_NUMBER: _ClassVar[int]
    BYTE_EXTENT_FIELD_NUMBER: _ClassVar[int]
    buffer: str
    byte_offset: int
    row_stride: int
    byte_extent: int
    def __init__(self, buffer: _Optional[str] = ..., byte_offset: _Optional[int] = ..., row_stride: _Optional[int] = ..., byte_extent: _Optional[int] = ...) -> None: ...

class StateAccess(_message.Message):
    __slots__ = ("view", "access")
    VIEW_FIELD_NUMBER: _ClassVar[int]
    ACCESS_FIELD_NUMBER: _ClassVar[int]
    view: StateView
    access: Access
    def __init__(self, view: _Optional[_Union[StateView, _Mapping]] = ..., access: _Optional[_Union[Access, str]] = ...) -> None: ...

class TunedBinding(_message.Message):
    __slots__ = ("buffer", "producer")
    BUFFER_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_FIELD_NUMBER: _ClassVar[int]
    buffer: str
    producer: str
    def __init__(self, buffer: _Optional[str] = ..., producer: _Optional[str] = ...) -> None: ...

class FrontendContract(_message.Message):
    __slots__ = ("tool_parser", "reasoning_parser", "image_preparation", "image_layout", "tool_syntax", "reasoning_syntax", "prompt_syntax", "eos_token_ids", "template_tokens", "image_token_layout", "image_settings")
    TOOL_PARSER_FIELD_NUMBER: _ClassVar[int]
    REASONING_PARSER_FIELD_NUMBER: _ClassVar[int]
    IMAGE_PREPARATION_FIELD_NUMBER: _ClassVar[int]
    IMAGE_LAYOUT_FIELD_NUMBER: _ClassVar[int]
    TOOL_SYNTAX_FIELD_NUMBER: _ClassVar[int]
    REASONING_SYNTAX_FIELD_NUMBER: _ClassVar[int]
    PROMPT_SYNTAX_FIELD_NUMBER: _ClassVar[int]
    EOS_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    IMAGE_TOKEN_LAYOUT_FIELD_NUMBER: _ClassVar[int]
    IMAGE_SETTINGS_FIELD_NUMBER: _ClassVar[int]
    tool_parser: ToolParser
    reasoning_parser: ReasoningParser
    image_preparation: ImagePreparation
    image_layout: ImageLayout
    tool_syntax: ToolSyntax
    reasoning_syntax: ReasoningSyntax
    prompt_syntax: PromptSyntax
    eos_token_ids: _containers.RepeatedScalarFieldContainer[int]
    template_tokens: _containers.RepeatedCompositeFieldContainer[TemplateToken]
    image_token_layout: ImageTokenLayout
    image_settings: ImageSettings
    def __init__(self, tool_parser: _Optional[_Union[ToolParser, str]] = ..., reasoning_parser: _Optional[_Union[ReasoningParser, str]] = ..., image_preparation: _Optional[_Union[ImagePreparation, str]] = ..., image_layout: _Optional[_Union[ImageLayout, str]] = ..., tool_syntax: _Optional[_Union[ToolSyntax, _Mapping]] = ..., reasoning_syntax: _Optional[_Union[ReasoningSyntax, _Mapping]] = ..., prompt_syntax: _Optional[_Union[PromptSyntax, _Mapping]] = ..., eos_token_ids: _Optional[_Iterable[int]] = ..., template_tokens: _Optional[_Iterable[_Union[TemplateToken, _Mapping]]] = ..., image_token_layout: _Optional[_Union[ImageTokenLayout, _Mapping]] = ..., image_settings: _Optional[_Union[ImageSettings, _Mapping]] = ...) -> None: ...

class ImageSettings(_message.Message):
    __slots__ = ("image_size", "patch_size", "mean", "std")
    IMAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    MEAN_FIELD_NUMBER: _ClassVar[int]
    STD_FIELD_NUMBER: _ClassVar[int]
    image_size: int
    patch_size: int
    mean: _containers.RepeatedScalarFieldContainer[float]
    std: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, image_size: _Optional[int] = ..., patch_size: _Optional[int] = ..., mean: _Optional[_Iterable[float]] = ..., std: _Optional[_Iterable[float]] = ...) -> None: ...

class ToolSyntax(_message.Message):
    __slots__ = ("opener", "closer", "invoke_open", "invoke_name_close", "invoke_close", "parameter_open", "parameter_name_close", "parameter_close", "value_open", "value_close", "separator", "wrapping_newlines", "parameter_flag_open", "parameter_flag_close", "string_flag", "json_flag")
    OPENER_FIELD_NUMBER: _ClassVar[int]
    CLOSER_FIELD_NUMBER: _ClassVar[int]
    INVOKE_OPEN_FIELD_NUMBER: _ClassVar[int]
    INVOKE_NAME_CLOSE_FIELD_NUMBER: _ClassVar[int]
    INVOKE_CLOSE_FIELD_NUMBER: _ClassVar[int]
    PARAMETER_OPEN_FIELD_NUMBER: _ClassVar[int]
    PARAMETER_NAME_CLOSE_FIELD_NUMBER: _ClassVar[int]
    PARAMETER_CLOSE_FIELD_NUMBER: _ClassVar[int]
    VALUE_OPEN_FIELD_NUMBER: _ClassVar[int]
    VALUE_CLOSE_FIELD_NUMBER: _ClassVar[int]
    SEPARATOR_FIELD_NUMBER: _ClassVar[int]
    WRAPPING_NEWLINES_FIELD_NUMBER: _ClassVar[int]
    PARAMETER_FLAG_OPEN_FIELD_NUMBER: _ClassVar[int]
    PARAMETER_FLAG_CLOSE_FIELD_NUMBER: _ClassVar[int]
    STRING_FLAG_FIELD_NUMBER: _ClassVar[int]
    JSON_FLAG_FIELD_NUMBER: _ClassVar[int]
    opener: str
    closer: str
    invoke_open: str
    invoke_name_close: str
    invoke_close: str
    parameter_open: str
    parameter_name_close: str
    parameter_close: str
    value_open: str
    value_close: str
    separator: str
    wrapping_newlines: bool
    parameter_flag_open: str
    parameter_flag_close: str
    string_flag: str
    json_flag: str
    def __init__(self, opener: _Optional[str] = ..., closer: _Optional[str] = ..., invoke_open: _Optional[str] = ..., invoke_name_close: _Optional[str] = ..., invoke_close: _Optional[str] = ..., parameter_open: _Optional[str] = ..., parameter_name_close: _Optional[str] = ..., parameter_close: _Optional[str] = ..., value_open: _Optional[str] = ..., value_close: _Optional[str] = ..., separator: _Optional[str] = ..., wrapping_newlines: _Optional[bool] = ..., parameter_flag_open: _Optional[str] = ..., parameter_flag_close: _Optional[str] = ..., string_flag: _Optional[str] = ..., json_flag: _Optional[str] = ...) -> None: ...

class ReasoningSyntax(_message.Message):
    __slots__ = ("open", "close", "terminal_marker", "wrapping_newlines", "recipient_open", "reasoning_recipient", "content_recipients", "tool_recipient", "tool_recipient_separator")
    OPEN_FIELD_NUMBER: _ClassVar[int]
    CLOSE_FIELD_NUMBER: _ClassVar[int]
    TERMINAL_MARKER_FIELD_NUMBER: _ClassVar[int]
    WRAPPING_NEWLINES_FIELD_NUMBER: _ClassVar[int]
    RECIPIENT_OPEN_FIELD_NUMBER: _ClassVar[int]
    REASONING_RECIPIENT_FIELD_NUMBER: _ClassVar[int]
    CONTENT_RECIPIENTS_FIELD_NUMBER: _ClassVar[int]
    TOOL_RECIPIENT_FIELD_NUMBER: _ClassVar[int]
    TOOL_RECIPIENT_SEPARATOR_FIELD_NUMBER: _ClassVar[int]
    open: str
    close: str
    terminal_marker: str
    wrapping_newlines: bool
    recipient_open: str
    reasoning_recipient: str
    content_recipients: _containers.RepeatedScalarFieldContainer[str]
    tool_recipient: str
    tool_recipient_separator: str
    def __init__(self, open: _Optional[str] = ..., close: _Optional[str] = ..., terminal_marker: _Optional[str] = ..., wrapping_newlines: _Optional[bool] = ..., recipient_open: _Optional[str] = ..., reasoning_recipient: _Optional[str] = ..., content_recipients: _Optional[_Iterable[str]] = ..., tool_recipient: _Optional[str] = ..., tool_recipient_separator: _Optional[str] = ...) -> None: ...

class PromptSyntax(_message.Message):
    __slots__ = ("assistant_open", "message_end", "header_start", "header_message", "internal_end", "prefix_boundaries")
    ASSISTANT_OPEN_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_END_FIELD_NUMBER: _ClassVar[int]
    HEADER_START_FIELD_NUMBER: _ClassVar[int]
    HEADER_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    INTERNAL_END_FIELD_NUMBER: _ClassVar[int]
    PREFIX_BOUNDARIES_FIELD_NUMBER: _ClassVar[int]
    assistant_open: str
    message_end: str
    header_start: str
    header_message: str
    internal_end: str
    prefix_boundaries: _containers.RepeatedCompositeFieldContainer[PrefixBoundaryRule]
    def __init__(self, assistant_open: _Optional[str] = ..., message_end: _Optional[str] = ..., header_start: _Optional[str] = ..., header_message: _Optional[str] = ..., internal_end: _Optional[str] = ..., prefix_boundaries: _Optional[_Iterable[_Union[PrefixBoundaryRule, _Mapping]]] = ...) -> None: ...

class PrefixBoundaryRule(_message.Message):
    __slots__ = ("role", "marker")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    MARKER_FIELD_NUMBER: _ClassVar[int]
    role: str
    marker: str
    def __init__(self, role: _Optional[str] = ..., marker: _Optional[str] = ...) -> None: ...

class TemplateToken(_message.Message):
    __slots__ = ("text", "id")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    text: str
    id: int
    def __init__(self, text: _Optional[str] = ..., id: _Optional[int] = ...) -> None: ...

class ImageTokenLayout(_message.Message):
    __slots__ = ("feature_ids", "atomic_spans")
    FEATURE_IDS_FIELD_NUMBER: _ClassVar[int]
    ATOMIC_SPANS_FIELD_NUMBER: _ClassVar[int]
    feature_ids: _containers.RepeatedScalarFieldContainer[int]
    atomic_spans: _containers.RepeatedCompositeFieldContainer[AtomicSpan]
    def __init__(self, feature_ids: _Optional[_Iterable[int]] = ..., atomic_spans: _Optional[_Iterable[_Union[AtomicSpan, _Mapping]]] = ...) -> None: ...

class AtomicSpan(_message.Message):
    __slots__ = ("open_id", "close_id")
    OPEN_ID_FIELD_NUMBER: _ClassVar[int]
    CLOSE_ID_FIELD_NUMBER: _ClassVar[int]
    open_id: int
    close_id: int
    def __init__(self, open_id: _Optional[int] = ..., close_id: _Optional[int] = ...) -> None: ...
