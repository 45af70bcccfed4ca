"""Preparation: a checkpoint directory in, a serving contract, execution manifest and resources out
(preparation side, host; NumPy only).

    options = PreparationOptions(publisher="acme", dtype="bf16")
    prepared = prepare_checkpoint("path/to/checkpoint", options)
    prepared.contract, prepared.manifest, prepared.read("tokenizer.json")

Owns the order of preparation (read, choose the recipe, build every program, declare the contract
and the resources; weights convert when their bytes are first needed) and its determinism: the same inputs give byte-identical outputs. Sealing
into a signed core is `helios.ignition.seal`. A `PreparedCore` also serves as an unsigned in-memory
core (a `helios.core.CoreSource`: `.contract`, `.manifest`, `.resources`, `.read(id)`), which tests and
the reference engine use.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np

from helios.errors import HeliosError
from helios.ignition.preparation.contract import (
    Declarations,
    TextGeometry,
    completion_layout,
    page_table_views,
    paged_history,
    pending_token_view,
    prompt_score_layout,
)
from helios.ignition.preparation.engram import (
    TABLE_RESOURCE,
    EngramInjection,
    EngramOptions,
    engram_declarations,
    generated_tensors,
    tensor_bytes,
)
from helios.ignition.preparation.frontend import PLAIN_TEMPLATE, frontend_contract
from helios.ignition.preparation.latent import latent_history
from helios.ignition.preparation.ranks import WHOLE, RankShard, WeightPart
from helios.ignition.preparation.recurrent import STATE_ROWS_PER_REQUEST, recurrent_history
from helios.ignition.preparation.snapshots import (
    continuation_accesses,
    continuation_storage,
    restoration_program,
)
from helios.ignition.reader import Checkpoint, UnsupportedCheckpoint, float32_to_bf16_bits, read_checkpoint
from helios.ignition.recipes import deepseek_v3, lfm2, llama_family, llava
from helios.ignition.recipes.catalog import RECIPE_MODULES
from helios.ignition.recipes.llava_vision import (
    PREPARED_SOURCES,
    vision_resource,
    vision_resource_names,
    zero_sentinel_rows,
)
from helios.proto import contract_pb2, core_pb2, manifest_pb2, program_pb2

C, M = contract_pb2, manifest_pb2
ABI_LABEL = "helios-text-1"
CONTRACT_VERSION = 3
WEIGHT_CATALOG_VERSION = 1
REBUILD_MANIFEST_VERSION = 1
_DTYPES = {"bf16": (M.DTYPE_BF16, "bf16"), "fp32": (M.DTYPE_F32, "f32")}
PENDING_TOKEN_OWNERS = ("device", "host")

class InvalidPreparationOptions(HeliosError):
    """A `helios prepare` option is out of range; the message names the option."""


def _capacities(values: tuple[int, ...], name: str) -> tuple[int, ...]:
    if not values or any(v < 1 for v in values) or len(set(values)) != len(values):
        raise InvalidPreparationOptions(f"--{name} must list distinct positive integers, got {list(values)}")
    return tuple(sorted(values))


@dataclass(frozen=True, slots=True)
class PreparationOptions:
    dtype: str = "bf16"  # weights and cache planes: "bf16" or "fp32"
    served_id: str | None = None  # default: the checkpoint directory's name
    page_tokens: int = 16
    batch_capacities: tuple[int, ...] = (1, 2, 4, 8)  # DECODE graphs; the largest is the slot count
    prefill_capacities: tuple[int, ...] = (16, 64, 256)  # PREFILL token capacities (and MIXED chunks)
    context_tokens: int | None = None  # default: min(max_position_embeddings, 4096)
    # "device" (the default): programs keep each lane's last sampled id in the `pending_tokens` STATE
    # row and the transport declares two frames; "host": a PENDING_TOKEN binding feeds it (one frame).
    pending_token: str = "device"
    # Learned drafting: a second checkpoint with the target's tokenizer and vocabulary, whose weights
    # and history join the core; SPECULATIVE programs are captured at every batch capacity for each
    # width (W counts the pending token, D = W - 1 proposals). Without a budget the programs are
    # rectangular (the host gives each lane's length, P = B * W); a budget P captures confidence
    # programs instead, which allocate min(P, B * W) target rows on the device by survival.
    draft: str | Path | None = None
    speculative_widths: tuple[int, ...] = (2, 4)
    speculative_budget: int | None = None
    # Tensor-parallel ranks: every graph gets one program per rank and every rank its weight catalog
    # (docs/ranks.md): query and key/value heads, the MLP's features and the vocabulary are split.
    tensor_parallel: int = 1
    # Scored prefill: SCORED_PREFILL graphs at every prefill capacity, each scoring its packed rows with
    # the target's log-probability and the `prompt_score_top` most likely ids (prompt log-probabilities,
    # `echo` with `logprobs`); 0 captures none.
    prompt_score_top: int = 20
    # Snapshots (docs/snapshots.md): continuation storage rows beside the cache planes, one partial page
    # of every plane a row, and RESTORATION programs at every batch capacity that snapshot and restore
    # them; None: one row per request slot; 0 captures neither (preemption then recomputes).
    snapshot_capacity: int | None = None
    # Vision cores (docs/vision.md): the image feature slots a request may hold (VisionContract
    # .feature_slots); the feature store holds that many images' features for every request slot.
    image_feature_slots: int = 1
    # A TEST recipe (docs/engram.md): an Engram table with generated weights added to a Llama-family
    # model at one layer; not a published checkpoint's, and not exposed by `helios prepare`.
    engram: EngramOptions | None = None

    def __post_init__(self) -> None:
        if self.dtype not in _DTYPES:
            raise InvalidPreparationOptions(f"--dtype must be one of {sorted(_DTYPES)}, got {self.dtype!r}")
        if self.page_tokens < 1:
            raise InvalidPreparationOptions(f"--page-tokens must be >= 1, got {self.page_tokens}")
        object.__setattr__(self, "batch_capacities", _capacities(tuple(self.batch_capacities), "batch-capacities"))
        object.__setattr__(self, "prefill_capacities",
                           _capacities(tuple(self.prefill_capacities), "prefill-capacities"))
        if self.context_tokens is not None and self.context_tokens < 1:
            raise InvalidPreparationOptions(f"--context-tokens must be >= 1, got {self.context_tokens}")
        if self.pending_token not in PENDING_TOKEN_OWNERS:
            raise InvalidPreparationOptions(
                f"--pending-token must be one of {list(PENDING_TOKEN_OWNERS)}, got {self.pending_token!r}")
        if self.served_id is not None and not self.served_id:
            raise InvalidPreparationOptions("--served-id must not be empty")
        object.__setattr__(self, "speculative_widths",
                           _capacities(tuple(self.speculative_widths), "speculative-widths"))
        if self.speculative_budget is not None and self.speculative_budget < max(self.batch_capacities):
            raise InvalidPreparationOptions(
                f"--speculative-budget {self.speculative_budget} must hold one row per lane of the largest "
                f"batch capacity {max(self.batch_capacities)}")
        if self.tensor_parallel < 1:
            raise InvalidPreparationOptions(f"--tp must be >= 1, got {self.tensor_parallel}")
        if self.draft is not None and self.tensor_parallel > 1:
            raise InvalidPreparationOptions(f"--draft with --tp {self.tensor_parallel}: speculative programs on "
                                            "tensor-parallel ranks are not built (prepare with --tp 1)")
        if self.snapshot_capacity is not None and self.snapshot_capacity < 0:
            raise InvalidPreparationOptions(f"--snapshot-capacity must be >= 0, got {self.snapshot_capacity}")
        if self.image_feature_slots < 1:
            raise InvalidPreparationOptions(f"--image-feature-slots must be >= 1, got {self.image_feature_slots}")
        if self.prompt_score_top < 0:
            raise InvalidPreparationOptions(f"--prompt-score-top must be >= 0, got {self.prompt_score_top}")
        if self.engram is not None and self.draft is not None:
            raise InvalidPreparationOptions("engram: a table with --draft is not built (speculative rows are "
                                            "drafted on the device, where no host can hash them)")
        if self.draft is not None and self.pending_token != "device":
            raise InvalidPreparationOptions("--draft needs --pending-token device (a speculative round's pending "
                                            "token is the device's)")


@dataclass(frozen=True, slots=True)
class PreparedResource:
    """One resource of a prepared core; its bytes are produced on demand (weights convert lazily, so
    preparing a large checkpoint never holds every converted tensor at once)."""

    id: str
    kind: int  # core_pb2.ResourceKind
    produce: Callable[[], bytes]  # deterministic

    @property
    def data(self) -> bytes:
        return self.produce()


def _constant(data: bytes) -> Callable[[], bytes]:
    return lambda: data


@dataclass(frozen=True, slots=True)
class PreparedCore:
    """The output of preparation, before sealing; usable as an unsigned in-memory core."""

    contract: contract_pb2.ServingContract
    manifest: manifest_pb2.ExecutionManifest
    resource_list: tuple[PreparedResource, ...]
    by_id: Mapping[str, PreparedResource] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        ids = [r.id for r in self.resource_list]
        if len(set(ids)) != len(ids):
            raise HeliosError("prepared core has duplicate resource ids")
        object.__setattr__(self, "by_id", {r.id: r for r in self.resource_list})

    @property
    def resources(self) -> tuple[PreparedResource, ...]:
        return self.resource_list

    def read(self, resource_id: str) -> bytes:
        return self.by_id[resource_id].produce()

    @property
    def deployment(self) -> core_pb2.DeploymentBody:
        return core_pb2.DeploymentBody(contract=self.contract, manifest=self.manifest)


def _weight_bytes(checkpoint: Checkpoint, name: str, dtype: str, part: WeightPart = WHOLE) -> bytes:
    info = checkpoint.tensors.info(name)
    if dtype == "bf16" and info.dtype == "BF16":
        return part.apply(np.asarray(checkpoint.tensors.raw(name))).astype("<u2").tobytes()
    values = part.apply(checkpoint.tensors.float32(name))
    if dtype == "bf16":
        return float32_to_bf16_bits(values).astype("<u2").tobytes()
    return np.ascontiguousarray(values, dtype="<f4").tobytes()


def _sampling_defaults(checkpoint: Checkpoint) -> C.SamplingDefaults:
    g = checkpoint.generation
    defaults = C.SamplingDefaults()
    for name in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty"):
        value = getattr(g, name)
        if value is not None:
            setattr(defaults, name, value)
    return defaults


def _geometry(cfg: llama_family.LlamaFamilyConfig, options: PreparationOptions) -> tuple[TextGeometry, int]:
    context = options.context_tokens or min(cfg.max_position_embeddings, 4096)
    if context > cfg.max_position_embeddings:
        raise InvalidPreparationOptions(
            f"--context-tokens {context} exceeds config.json: max_position_embeddings = {cfg.max_position_embeddings}")
    if max(options.prefill_capacities) > context:
        raise InvalidPreparationOptions(
            f"--prefill-capacities {max(options.prefill_capacities)} exceeds the context of {context} tokens")
    geometry = TextGeometry(slots=max(options.batch_capacities), page_tokens=options.page_tokens,
                            max_pages=math.ceil(context / options.page_tokens), sampled_tokens=cfg.vocab_size,
                            logits_width=cfg.vocab_size)
    return geometry, context


def _state_accesses(histories) -> list[C.StateAccess]:
    accesses = []
    for planes in histories:
        element = 2 if planes.dtype == M.DTYPE_BF16 else 4
        for plane, shape in planes.plane_shapes:
            page_bytes = math.prod(shape[1:]) * element
            accesses.append(C.StateAccess(view=C.StateView(buffer=plane, byte_offset=0, row_stride=page_bytes,
                                                           byte_extent=page_bytes), access=C.ACCESS_READ_WRITE))
    return accesses


def prepare_checkpoint(directory: str | Path, options: PreparationOptions) -> PreparedCore:
    """Prepare a checkpoint directory; raises CheckpointError, UnsupportedCheckpoint or option errors."""
    checkpoint = read_checkpoint(directory)
    model_type = checkpoint.config.get("model_type")
    recipe_name = RECIPE_MODULES.get(model_type, "")
    recipe = {module.RECIPE: module for module in (llama_family, lfm2, deepseek_v3, llava)}.get(recipe_name)
    if recipe is None:
        raise UnsupportedCheckpoint(f"config.json: model_type = {model_type!r} (supported: {sorted(RECIPE_MODULES)})")
    vision = None  # a vision core's halves: its text model prepares as any Llama-family checkpoint
    if recipe is llava:
        vision = llava.read_llava(checkpoint)
        checkpoint, recipe = vision.text, llama_family
        _check_vision_options(options, checkpoint.config.get("model_type"))
    cfg = recipe.parse_config(checkpoint)
    hybrid = recipe is lfm2  # convolution layers keep recurrent state (docs/recurrent.md)
    latent = recipe is deepseek_v3  # attention layers keep paged latent histories (docs/latent.md)
    ranks = options.tensor_parallel
    recipe.check_tensor_parallel(cfg, ranks)
    if hybrid and options.draft is not None:
        raise InvalidPreparationOptions(f"--draft: speculative programs over recurrent state are not built "
                                        f"(model_type {model_type!r})")
    if latent and options.draft is not None:
        raise InvalidPreparationOptions(f"--draft: speculative programs over latent histories are not built "
                                        f"(model_type {model_type!r})")
    shards = [RankShard(rank, ranks) for rank in range(ranks)]
    specs = recipe.weight_specs(cfg, checkpoint)
    geometry, context = _geometry(cfg, options)
    if vision is not None:  # the image sentinel and every id past it are never sampled
        geometry = dataclasses.replace(geometry, sampled_tokens=vision.image_token_id)
    tower = vision.tower if vision is not None else None
    store_rows = geometry.slots * options.image_feature_slots * tower.features if tower is not None else None
    cache_dtype, program_dtype = _DTYPES[options.dtype]
    for eos in checkpoint.eos_token_ids:
        if eos >= cfg.vocab_size:
            raise UnsupportedCheckpoint(f"config.json: eos_token_id {eos} lies outside vocab_size = {cfg.vocab_size}")

    draft_checkpoint = draft_cfg = None
    if options.draft is not None:
        draft_checkpoint, draft_cfg = _read_draft(options.draft, checkpoint, cfg, context)
    widths = options.speculative_widths if draft_checkpoint is not None else ()
    completion_width = max(widths, default=1)

    decl = Declarations()
    layout = completion_layout(decl, geometry, width=completion_width, speculative=bool(widths))
    score_top = min(options.prompt_score_top, geometry.sampled_tokens)
    scores = (max(options.prefill_capacities), score_top) if score_top else None
    if scores is not None:
        prompt_score_layout(decl, layout, rows=scores[0], top=scores[1])
    if latent:  # one latent and one rotary-key record a token, per layer
        layer_histories = [latent_history(decl, geometry, layer=i, latent=cfg.kv_lora_rank, rope=cfg.rope_dim,
                                          dtype=cache_dtype) for i in range(cfg.layers)]
    else:
        # Every rank's cache planes hold its own key/value heads, the same number on every rank.
        kv_start, kv_stop = llama_family.rank_kv_heads(cfg, shards[0]) if ranks > 1 else (0, cfg.kv_heads)
        layer_histories = [paged_history(decl, geometry, layer=i, kv_heads=kv_stop - kv_start, head_dim=cfg.head_dim,
                                         dtype=cache_dtype, window_tokens=cfg.windows[i])
                           if not hybrid or cfg.attention[i] else None for i in range(cfg.layers)]
    histories = [h for h in layer_histories if h is not None]
    draft_histories = []
    if draft_cfg is not None:
        draft_histories = [paged_history(decl, geometry, layer=i, kv_heads=draft_cfg.kv_heads,
                                         head_dim=draft_cfg.head_dim, dtype=cache_dtype,
                                         window_tokens=draft_cfg.windows[i], prefix="draft.")
                           for i in range(draft_cfg.layers)]
    accesses = _state_accesses(histories + draft_histories)
    snapshot_rows = geometry.slots if options.snapshot_capacity is None else options.snapshot_capacity
    # The partition (docs/snapshots.md): a recurrent core's rows [0, slots) are live state rows, the
    # snapshot rows follow them, in the state planes and the continuation planes alike.
    execution_rows = geometry.slots * STATE_ROWS_PER_REQUEST if hybrid else 0
    recurrent = (recurrent_history(decl, geometry, layers=cfg.conv_layers, record=lfm2.recurrent_record(cfg),
                                   dtype=cache_dtype, snapshot_rows=snapshot_rows) if hybrid else None)
    if recurrent is not None:
        accesses += recurrent.accesses()
    storage = (continuation_storage(decl, histories + draft_histories, rows=execution_rows + snapshot_rows)
               if snapshot_rows else None)
    draft = (llama_family.Decoder(draft_cfg, tuple(draft_histories), program_dtype, prefix="draft.")
             if draft_cfg is not None else None)
    decoder = (lfm2.Lfm2Decoder(cfg, tuple(layer_histories), program_dtype, recurrent=recurrent, decl=decl)
               if hybrid else None)
    if latent:
        decoder = deepseek_v3.LatentDecoder(cfg, tuple(layer_histories), program_dtype)
    engram = options.engram
    engram_table = None
    if engram is not None:
        if latent or vision is not None:
            raise InvalidPreparationOptions("engram: the test recipe's table is added to Llama-family text decoders only "
                                            f"(model_type {model_type!r})")
        if hybrid or engram.layer >= cfg.layers:
            raise InvalidPreparationOptions(f"engram: layer {engram.layer} of a Llama-family decoder of {cfg.layers} "
                                            f"layers (model_type {model_type!r})")
        # every packed capacity of the text graphs: prefill chunks, decode batches, mixed rounds
        packed_capacity = max([*options.prefill_capacities, *options.batch_capacities,
                               *([p + geometry.slots - 1 for p in options.prefill_capacities]
                                 if geometry.slots > 1 else [])])
        engram_table = engram_declarations(decl, engram, packed_tokens=packed_capacity, dtype=cache_dtype)
        injection = EngramInjection(engram, cfg.hidden_size, program_dtype, packed_capacity)

    # (name, operation, batch, packed, one program per rank, bindings, weight resources of every rank)
    graphs: list[tuple[str, int, int, int, list[program_pb2.Program], tuple, list[str]]] = []
    # INITIALIZATION at every batch capacity: a burst of admissions initializes in one round. The
    # program is the same at each capacity (it writes every slot's completion row); only its graph
    # name and declared capacity differ. The one-lane variant keeps the name "initialization".
    for batch in sorted({1, *options.batch_capacities}):
        name = "initialization" if batch == 1 else f"initialization_b{batch}"
        init_programs = []
        for rank in range(ranks):
            init_program, init_bindings = llama_family.initialization_program(
                geometry, decl, graph=name, completion_width=completion_width, rank=rank)
            init_programs.append(init_program)
        graphs.append((name, C.OPERATION_INITIALIZATION, batch, batch, init_programs, init_bindings, []))
    # RESTORATION at every batch capacity: preemptions and readmissions of one scheduling point snapshot
    # and restore their partial pages in one round.
    if storage is not None:
        for batch in sorted({1, *options.batch_capacities}):
            name = f"restoration_b{batch}"
            restore_programs = []
            for rank in range(ranks):
                restore_program, restore_bindings = restoration_program(
                    geometry, decl, storage, histories + draft_histories, graph=name, batch=batch,
                    completion_width=completion_width, rank=rank, recurrent=recurrent)
                restore_programs.append(restore_program)
            graphs.append((name, C.OPERATION_RESTORATION, batch, batch, restore_programs, restore_bindings, []))
    variants = [(f"prefill_p{p}", C.OPERATION_PREFILL, 1, p) for p in options.prefill_capacities]
    if scores is not None:  # the prompt of a request asking for prompt scores is consumed by these
        variants += [(f"scored_prefill_p{p}", C.OPERATION_SCORED_PREFILL, 1, p) for p in options.prefill_capacities]
    variants += [(f"decode_b{b}", C.OPERATION_DECODE, b, b) for b in options.batch_capacities]
    if geometry.slots > 1:
        variants += [(f"mixed_b{geometry.slots}_p{p + geometry.slots - 1}", C.OPERATION_MIXED, geometry.slots,
                      p + geometry.slots - 1) for p in options.prefill_capacities]
    for name, operation, batch, packed in variants:
        programs, weights = [], set()
        for shard in shards:
            program, bindings, rank_weights = llama_family.text_program(
                cfg, geometry, decl, graph=name, packed_tokens=packed, weight_dtype=program_dtype,
                histories=histories, pending_token=options.pending_token, draft=draft,
                completion_width=completion_width, shard=shard if ranks > 1 else None,
                scores=scores if operation == C.OPERATION_SCORED_PREFILL else None,
                decoder=decoder if engram is None else llama_family.Decoder(
                    cfg, tuple(histories), program_dtype, shard=shard if ranks > 1 else None, engram=injection),
                # a vision core: every text program reads its rows' image features; PREFILL programs
                # first encode the submission's image (docs/vision.md)
                image_store_rows=store_rows, encoder=tower if operation == C.OPERATION_PREFILL else None,
                batch=batch)
            programs.append(program)
            weights.update(rank_weights)
        if engram_table is not None:  # every text graph reads the table's staging frames
            engram_table.graphs.append(name)
            weights.add(TABLE_RESOURCE)
        graphs.append((name, operation, batch, packed, programs, bindings, sorted(weights)))
    descriptors: dict[str, C.SpeculativeDescriptor] = {}
    if draft is not None:
        target = llama_family.Decoder(cfg, tuple(histories), program_dtype)
        confidence = options.speculative_budget is not None
        for batch in options.batch_capacities:
            for width in widths:
                drafts = width - 1
                packed = min(options.speculative_budget, batch * width) if confidence else batch * width
                packed = max(packed, batch)
                name = f"speculative_b{batch}_w{width}" + ("_c" if confidence else "")
                scored = confidence and drafts > 0
                program, bindings, weights = llama_family.speculative_program(
                    target, draft, geometry, decl, graph=name, batch=batch, drafts=drafts, width=width,
                    packed_tokens=packed, confidence=scored, completion_width=completion_width,
                    confidence_capacity=max(completion_width - 1, 1))
                graphs.append((name, C.OPERATION_SPECULATIVE, batch, packed, [program], bindings, weights))
                descriptors[name] = C.SpeculativeDescriptor(
                    batch_capacity=batch, draft_tokens=drafts, verify_tokens=width, packed_token_capacity=packed,
                    confidence_width=drafts if scored else 0, lane_token_limit=min(drafts + 1, width),
                    draft_capacity=max(completion_width - 1, 1) if scored else 0)

    resources: list[PreparedResource] = []
    device_pending = options.pending_token == "device"
    # A device-owned pending token lets decode rounds keep two execution frames in flight.
    manifest = M.ExecutionManifest(abi_label=ABI_LABEL, ranks=ranks,
                                   transport=M.TransportDescriptor(frames=2 if device_pending else 1),
                                   completion=layout)
    model = C.ModelContract(version=CONTRACT_VERSION)
    for name, operation, batch, packed, programs, bindings, weights in graphs:
        program_ids = [f"program/{name}/rank{rank}" for rank in range(len(programs))]
        for program_id, program in zip(program_ids, programs, strict=True):
            resources.append(PreparedResource(program_id, core_pb2.RESOURCE_KIND_PROGRAM,
                                              _constant(program.SerializeToString(deterministic=True))))
        manifest.graphs.append(M.GraphHandle(name=name, operation=operation, program_resources=program_ids,
                                             batch_capacity=batch, packed_token_capacity=packed))
        graph = C.GraphContract(name=name, operation=operation, value_bindings=list(bindings),
                                resource_dependencies=[*program_ids, *weights],
                                capacity=C.GraphCapacity(batch_capacity=batch, packed_token_capacity=packed))
        if recurrent is not None and operation != C.OPERATION_INITIALIZATION:
            graph.state_rows_per_request = STATE_ROWS_PER_REQUEST  # each request's live state rows
        if name in descriptors:
            graph.speculative.CopyFrom(descriptors[name])
            graph.draft_cursor.CopyFrom(C.CompletionCursor(committed_state=draft_histories[0].region.name,
                                                           lag_tokens=0))
        if operation == C.OPERATION_RESTORATION:  # the cache planes and their continuation planes
            graph.state_accesses.extend(accesses + continuation_accesses(storage))
        elif operation != C.OPERATION_INITIALIZATION:
            graph.state_accesses.extend(accesses)
            if device_pending:  # every text graph reads the pending token and writes what it samples
                view = pending_token_view(geometry)
                graph.state_accesses.append(C.StateAccess(view=view, access=C.ACCESS_READ_WRITE))
                graph.pending_token_state.CopyFrom(view)
        model.graphs.append(graph)
    manifest.buffers.extend(decl.buffers.values())

    # One weight catalog per rank: the part of each stored tensor the rank holds (a slice's resource
    # names it, so ranks holding the same part share one resource, stored once).
    catalogs = [core_pb2.WeightCatalog(version=WEIGHT_CATALOG_VERSION, rank=rank) for rank in range(ranks)]
    sources: list = [(checkpoint, specs, "", cfg)]
    if draft_checkpoint is not None:
        sources.append((draft_checkpoint, llama_family.weight_specs(draft_cfg, draft_checkpoint), "draft.", draft_cfg))
    stored: set[str] = set()
    for source, tensors, prefix, source_cfg in sources:
        for spec in tensors:
            for rank, catalog in enumerate(catalogs):
                # none: a tensor this rank does not read (a row-parallel bias past rank 0)
                for part in recipe.weight_parts(source_cfg, spec.name, shards[rank] if ranks > 1 else None):
                    resource_id = part.resource(llama_family.weight_resource(spec.name, prefix))
                    if resource_id not in stored:
                        stored.add(resource_id)
                        resources.append(PreparedResource(resource_id, core_pb2.RESOURCE_KIND_WEIGHT, partial(
                            _weight_bytes, source, spec.name, options.dtype, part)))
                    catalog.entries.append(core_pb2.WeightEntry(
                        resource=resource_id, source_tensor=prefix + spec.name, dtype=cache_dtype,
                        shape=list(part.shape(spec.shape)), transform=part.transform))
    if vision is not None:
        sentinels = (vision.image_token_id,)
        embedding = llama_family.weight_resource("model.embed_tokens.weight")
        index = next(i for i, r in enumerate(resources) if r.id == embedding)
        resources[index] = PreparedResource(embedding, core_pb2.RESOURCE_KIND_WEIGHT, partial(
            _sentinel_zeroed_bytes, checkpoint, "model.embed_tokens.weight", options.dtype, sentinels))
        for entry in catalogs[0].entries:
            if entry.resource == embedding:
                entry.transform = f"zero rows {list(sentinels)} (image sentinels)"
        for name in vision_resource_names(vision.tower):
            sources_of, transform = PREPARED_SOURCES.get(name, ((name,), ""))
            resources.append(PreparedResource(name, core_pb2.RESOURCE_KIND_WEIGHT, partial(
                _vision_bytes, vision, name, options.dtype)))
            shape = vision_resource(vision.tower, name, _shape_probe(vision)).shape
            catalogs[0].entries.append(core_pb2.WeightEntry(
                resource=name, source_tensor=",".join(sources_of), dtype=cache_dtype, shape=list(shape),
                transform=transform))

    if engram is not None:  # generated, not read from the checkpoint: the table stays on the host at serving
        for resource_id, values in generated_tensors(engram, cfg.hidden_size).items():
            resource_id = resource_id if resource_id == TABLE_RESOURCE else llama_family.weight_resource(resource_id)
            resources.append(PreparedResource(resource_id, core_pb2.RESOURCE_KIND_WEIGHT,
                                              partial(tensor_bytes, values, options.dtype)))
    template = checkpoint.chat_template or PLAIN_TEMPLATE
    if vision is not None and checkpoint.chat_template is None:
        placeholder = next((t for t, i in checkpoint.tokenizer_vocabulary.items() if i == vision.image_token_id), None)
        if placeholder is None:
            raise UnsupportedCheckpoint(f"tokenizer.json: no token has the image_token_id {vision.image_token_id}")
        template = llava.plain_vision_template(placeholder)
    resources.append(PreparedResource("tokenizer.json", core_pb2.RESOURCE_KIND_TOKENIZER,
                                      _constant(checkpoint.tokenizer_json)))
    resources.append(PreparedResource("chat_template.jinja", core_pb2.RESOURCE_KIND_CHAT_TEMPLATE,
                                      _constant(template.encode("utf-8"))))
    for rank, catalog in enumerate(catalogs):
        resources.append(PreparedResource(f"weight_catalog/rank{rank}", core_pb2.RESOURCE_KIND_WEIGHT_CATALOG,
                                          _constant(catalog.SerializeToString(deterministic=True))))
    digest = checkpoint.digest()
    arguments = [f"--dtype={options.dtype}", f"--page-tokens={options.page_tokens}",
                 f"--batch-capacities={','.join(map(str, options.batch_capacities))}",
                 f"--prefill-capacities={','.join(map(str, options.prefill_capacities))}",
                 f"--context-tokens={context}", f"--pending-token={options.pending_token}",
                 f"--prompt-score-top={options.prompt_score_top}"]
    arguments.append(f"--snapshot-capacity={snapshot_rows}")
    if ranks > 1:  # one-rank cores keep the arguments they always had
        arguments.append(f"--tp={ranks}")
    if engram is not None:
        arguments.append(engram.argument())
    if draft_checkpoint is not None:
        arguments += [f"--draft-digest={draft_checkpoint.digest()}",
                      f"--speculative-widths={','.join(map(str, widths))}"]
        if options.speculative_budget is not None:
            arguments.append(f"--speculative-budget={options.speculative_budget}")
    if vision is not None:
        arguments.append(f"--image-feature-slots={options.image_feature_slots}")
    rebuild = core_pb2.RebuildManifest(version=REBUILD_MANIFEST_VERSION, recipe=recipe_name,
                                       checkpoint_digest=digest, arguments=arguments)
    resources.append(PreparedResource("rebuild_manifest", core_pb2.RESOURCE_KIND_REBUILD_MANIFEST,
                                      _constant(rebuild.SerializeToString(deterministic=True))))

    model.vocabulary.CopyFrom(C.VocabularyContract(
        sampled_tokens=geometry.sampled_tokens, logits_width=geometry.logits_width,
        histogram_width=geometry.histogram_width, mask_words=geometry.mask_words))
    model.input_vocabulary.CopyFrom(C.InputVocabularyContract(input_tokens=cfg.vocab_size))
    if vision is not None:
        model.input_vocabulary.image_sentinels.append(vision.image_token_id)
        model.vision.CopyFrom(C.VisionContract(
            feature_slots=options.image_feature_slots, features_per_window=vision.tower.features,
            patches_per_feature=1, patch_capacities=[vision.tower.patches]))
    model.cache.CopyFrom(C.CacheContract(page_tokens=geometry.page_tokens,
                                         histories=[h.region for h in histories + draft_histories]
                                         + ([recurrent.region] if recurrent is not None else [])
                                         + ([storage.region] if storage is not None else []),
                                         page_table_views=page_table_views()))
    if engram_table is not None:
        model.engram_tables.append(engram_table)
    specials = _special_tokens(checkpoint)
    eos_texts = [t for t, i in specials.items() if i in checkpoint.eos_token_ids]
    bos_text = next((t for t, i in specials.items() if i == checkpoint.bos_token_id), "")
    model.frontend.CopyFrom(frontend_contract(
        chat_template=template, vocabulary=checkpoint.tokenizer_vocabulary, special_tokens=specials,
        eos_token_ids=checkpoint.eos_token_ids, bos_text=bos_text, eos_text=eos_texts[0] if eos_texts else ""))
    if vision is not None:
        frontend = model.frontend
        frontend.image_preparation, frontend.image_layout = C.IMAGE_PREPARATION_CLIP, C.IMAGE_LAYOUT_FEATURE_SPAN
        frontend.image_token_layout.CopyFrom(C.ImageTokenLayout(feature_ids=[vision.image_token_id]))
        frontend.image_settings.CopyFrom(C.ImageSettings(
            image_size=vision.tower.image_size, patch_size=vision.tower.patch_size,
            mean=list(vision.normalisation.mean), std=list(vision.normalisation.std)))

    served_id = options.served_id or Path(directory).resolve().name
    identity_text = f"{recipe_name}\0{digest}\0{options.dtype}"
    if draft_checkpoint is not None:  # the pages also hold the draft's history
        identity_text += f"\0draft\0{draft_checkpoint.digest()}"
    if ranks > 1:  # each rank's pages hold its own heads
        identity_text += f"\0tp\0{ranks}"
    if engram is not None:  # the pages hold what the Engram layer computed
        identity_text += f"\0{engram.argument()}"
    identity = hashlib.sha256(identity_text.encode()).hexdigest()[:32]
    contract = C.ServingContract(
        served_id=served_id, cache_identity=identity, context_tokens=context,
        prefill_tokens=max(options.prefill_capacities), page_capacity=geometry.slots * geometry.max_pages,
        snapshot_capacity=snapshot_rows, max_concurrency=geometry.slots, speculative_widths=list(widths),
        defaults=C.ServingDefaults(sampling=_sampling_defaults(checkpoint)), model=model)
    return PreparedCore(contract, manifest, tuple(resources))


def _check_vision_options(options: PreparationOptions, text_type: object) -> None:
    """What a vision core does not combine with (in one line naming the option)."""
    if RECIPE_MODULES.get(str(text_type)) != llama_family.RECIPE:
        raise UnsupportedCheckpoint(f"config.json: text_config.model_type = {text_type!r}: a LLaVA text model "
                                    f"must be one of {list(llama_family.MODEL_TYPES)}")
    if options.tensor_parallel > 1:
        raise InvalidPreparationOptions(f"--tp {options.tensor_parallel}: image inputs on tensor-parallel ranks are "
                                        "not built (prepare a vision core with --tp 1)")
    if options.draft is not None:
        raise InvalidPreparationOptions("--draft: image inputs with a draft model are not built")


def _sentinel_zeroed_bytes(checkpoint: Checkpoint, name: str, dtype: str, sentinels: tuple[int, ...]) -> bytes:
    """The text embedding table with the image sentinels' rows zeroed (`zero_sentinel_rows`)."""
    values = zero_sentinel_rows(checkpoint.tensors.float32(name), sentinels)
    if dtype == "bf16":
        return float32_to_bf16_bits(values).astype("<u2").tobytes()
    return np.ascontiguousarray(values, dtype="<f4").tobytes()


def _vision_getter(vision: llava.LlavaCheckpoint):
    def get(name: str) -> np.ndarray:
        if name not in vision.vision:
            raise UnsupportedCheckpoint(f"checkpoint: tensor {name!r} is missing")
        return vision.vision.float32(name)
    return get


def _shape_probe(vision: llava.LlavaCheckpoint):
    """A getter of zero arrays of the stored shapes: a resource's shape without reading its bytes."""
    def get(name: str) -> np.ndarray:
        if name not in vision.vision:
            raise UnsupportedCheckpoint(f"checkpoint: tensor {name!r} is missing")
        return np.zeros(vision.vision.info(name).shape, np.float32)
    return get


def _vision_bytes(vision: llava.LlavaCheckpoint, name: str, dtype: str) -> bytes:
    values = vision_resource(vision.tower, name, _vision_getter(vision))
    if dtype == "bf16":
        return float32_to_bf16_bits(values).astype("<u2").tobytes()
    return np.ascontiguousarray(values, dtype="<f4").tobytes()


class DraftMismatch(HeliosError):
    """The draft checkpoint cannot draft for the target; the message names the difference."""


def _read_draft(directory: str | Path, target: Checkpoint, cfg: llama_family.LlamaFamilyConfig,
                context: int) -> tuple[Checkpoint, llama_family.LlamaFamilyConfig]:
    """The draft checkpoint and its family config, checked against the target: same vocabulary
    size, tokenizer vocabulary and special tokens, and a context covering the core's."""
    draft = read_checkpoint(directory)
    model_type = draft.config.get("model_type")
    if RECIPE_MODULES.get(model_type) != llama_family.RECIPE:
        raise UnsupportedCheckpoint(f"--draft: config.json: model_type = {model_type!r} "
                                    f"(supported: {sorted(RECIPE_MODULES)})")
    draft_cfg = llama_family.parse_config(draft)
    if draft_cfg.vocab_size != cfg.vocab_size:
        raise DraftMismatch(f"--draft: vocab_size {draft_cfg.vocab_size} differs from the target's {cfg.vocab_size}")
    if draft.tokenizer_vocabulary != target.tokenizer_vocabulary:
        differing = sorted(set(draft.tokenizer_vocabulary.items()) ^ set(target.tokenizer_vocabulary.items()))
        text, token = differing[0]
        raise DraftMismatch(f"--draft: the tokenizer vocabularies differ ({len(differing)} entries, e.g. "
                            f"{text!r} -> {token})")
    if _special_tokens(draft) != _special_tokens(target):
        raise DraftMismatch("--draft: the tokenizers' added (special) tokens differ")
    if draft_cfg.max_position_embeddings < context:
        raise DraftMismatch(f"--draft: max_position_embeddings {draft_cfg.max_position_embeddings} is below the "
                            f"core's context of {context} tokens")
    return draft, draft_cfg


def _special_tokens(checkpoint: Checkpoint) -> dict[str, int]:
    """The tokenizer's added tokens (special or not, e.g. think tags), text -> id."""
    data = json.loads(checkpoint.tokenizer_json)
    return {str(t["content"]): int(t["id"]) for t in data.get("added_tokens") or []}
