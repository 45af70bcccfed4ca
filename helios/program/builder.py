"""The program builder (host side): how ignition recipes write captured programs.

    b = ProgramBuilder("decode_b8", rank=0)
    ids = b.transport("ids", buffer="tokens", dtype="i32", shape=[8])
    table = b.weight("embed", resource="model.embed_tokens.weight", dtype="bf16", shape=[V, H])
    x = b.embedding(ids, table)
    h = b.rms_norm(x, b.weight(...), eps=1e-6)
    program = b.build()

Every operator method takes tensor names and attributes, infers its outputs' types with the
operator's shape rule, declares them as SCRATCH (named `name=` or `<op>_<n>`) unless `into=`
names an already declared tensor, and returns the output name. `build()` validates the program
and is deterministic: identical builder calls give byte-identical serializations.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from helios.program.errors import DuplicateTensor, ShapeRuleViolation, UndeclaredTensor, UnknownOperator
from helios.program.registry import OPERATOR_SET_VERSION, OPERATORS
from helios.program.spec import AttributeValue, RuleError
from helios.program.types import TensorType, dtype_name, parse_dtype
from helios.program.validate import validate_program
from helios.proto import manifest_pb2, program_pb2


def _attribute(name: str, kind: str, value: AttributeValue) -> program_pb2.Attribute:
    attribute = program_pb2.Attribute(name=name)
    if kind == "ints":
        attribute.ints.values.extend(value)  # type: ignore[arg-type]
    elif kind == "floats":
        attribute.floats.values.extend(value)  # type: ignore[arg-type]
    else:
        setattr(attribute, kind, value)
    return attribute


class ProgramBuilder:
    """Builds one `program_pb2.Program` for one graph handle and one rank."""

    def __init__(self, graph: str, rank: int = 0) -> None:
        if not graph:
            raise ValueError("graph must name the graph handle the program belongs to")
        if rank < 0:
            raise ValueError(f"rank must be >= 0, got {rank}")
        self.graph = graph
        self.rank = rank
        self._decls: list[program_pb2.TensorDecl] = []
        self._types: dict[str, TensorType] = {}
        self._operators: list[program_pb2.Operator] = []
        self._counter = 0

    # Declarations --------------------------------------------------------------------------------

    def _declare(
        self, name: str, role: int, dtype: int | str, shape: Sequence[int], *, buffer: str = "", resource: str = ""
    ) -> str:
        if name in self._types:
            raise DuplicateTensor(f"program {self.graph!r}: tensor {name!r} is declared twice")
        tensor_type = TensorType(parse_dtype(dtype), tuple(int(e) for e in shape))
        self._types[name] = tensor_type
        self._decls.append(
            program_pb2.TensorDecl(
                name=name, role=role, dtype=tensor_type.dtype, shape=list(tensor_type.shape),
                buffer=buffer, resource=resource,
            )
        )
        return name

    def weight(self, name: str, resource: str, dtype: int | str, shape: Sequence[int]) -> str:
        """A WEIGHT tensor: the bytes of ExecutableResource `resource`."""
        return self._declare(name, program_pb2.TENSOR_ROLE_WEIGHT, dtype, shape, resource=resource)

    def transport(self, name: str, buffer: str, dtype: int | str, shape: Sequence[int]) -> str:
        """A TRANSPORT tensor: manifest buffer `buffer`, filled by packing."""
        return self._declare(name, program_pb2.TENSOR_ROLE_TRANSPORT, dtype, shape, buffer=buffer)

    def state(self, name: str, buffer: str, dtype: int | str, shape: Sequence[int]) -> str:
        """A STATE tensor: a persistent STATE or CACHE buffer (leading extent 0: sized at load)."""
        return self._declare(name, program_pb2.TENSOR_ROLE_STATE, dtype, shape, buffer=buffer)

    def completion(self, name: str, buffer: str, dtype: int | str, shape: Sequence[int]) -> str:
        """A COMPLETION tensor: a field of the completion record the host reads."""
        return self._declare(name, program_pb2.TENSOR_ROLE_COMPLETION, dtype, shape, buffer=buffer)

    def tuned(self, name: str, buffer: str, dtype: int | str, shape: Sequence[int]) -> str:
        """A TUNED tensor: a buffer written once by a startup tuning producer."""
        return self._declare(name, program_pb2.TENSOR_ROLE_TUNED, dtype, shape, buffer=buffer)

    def scratch(self, name: str, dtype: int | str, shape: Sequence[int]) -> str:
        """An explicit SCRATCH tensor (operator methods declare their own; use this for `into=`)."""
        return self._declare(name, program_pb2.TENSOR_ROLE_SCRATCH, dtype, shape)

    def declared(self, name: str) -> bool:
        """Whether a tensor of that name is declared (e.g. a cache plane several passes share)."""
        return name in self._types

    def type_of(self, name: str) -> TensorType:
        if name not in self._types:
            raise UndeclaredTensor(f"program {self.graph!r}: tensor {name!r} is not declared")
        return self._types[name]

    # Operators ---------------------------------------------------------------------------------------

    def emit(
        self,
        op: str,
        inputs: Sequence[str],
        attributes: Mapping[str, AttributeValue | None] | None = None,
        *,
        into: Sequence[str | None] | None = None,
        names: Sequence[str | None] | None = None,
    ) -> tuple[str, ...]:
        """Append one operator; return its output names. None-valued attributes are left unset."""
        where = f"program {self.graph!r} operators[{len(self._operators)}] ({op})"
        spec = OPERATORS.get(op)
        if spec is None:
            raise UnknownOperator(f"{where}: unknown operator; the operator set has {sorted(OPERATORS)}")
        given = {k: v for k, v in (attributes or {}).items() if v is not None}
        resolved = spec.resolve_attributes(given, where)
        in_types = [self.type_of(n) for n in inputs]
        targets = list(into) if into is not None else [None] * len(spec.outputs)
        for out_index, in_index in spec.in_place:
            targets[out_index] = inputs[in_index]
        declared = [self.type_of(t) if t is not None else None for t in targets]
        try:
            produced = list(spec.rule(in_types, resolved, declared))
        except RuleError as error:
            raise ShapeRuleViolation(f"{where}: {error}") from None
        outputs = []
        for index, (target, tensor_type) in enumerate(zip(targets, produced, strict=True)):
            if target is None:
                name = names[index] if names is not None and names[index] is not None else None
                if name is None:
                    name = f"{op}_{self._counter}"
                    self._counter += 1
                target = self.scratch(name, tensor_type.dtype, tensor_type.shape)
            outputs.append(target)
        operator = program_pb2.Operator(op=op, inputs=list(inputs), outputs=outputs)
        for attribute_name in sorted(given):
            kind = spec.attribute_map[attribute_name].kind
            operator.attributes.append(_attribute(attribute_name, kind, resolved[attribute_name]))
        self._operators.append(operator)
        return tuple(outputs)

    def _one(self, op: str, inputs: Sequence[str], attributes: Mapping[str, AttributeValue | None] | None,
             name: str | None, into: str | None) -> str:
        return self.emit(op, inputs, attributes, into=[into], names=[name])[0]

    def embedding(self, ids: str, table: str, *, row_offset: int = 0, name: str | None = None,
                  into: str | None = None) -> str:
        """Rows of `table` by id; a rank's vocabulary slice starts at id `row_offset` (0: left unset)."""
        return self._one("embedding", [ids, table], {"row_offset": row_offset or None}, name, into)

    def rms_norm(self, x: str, weight: str, *, eps: float, weight_offset: float | None = None,
                 name: str | None = None, into: str | None = None) -> str:
        return self._one("rms_norm", [x, weight], {"eps": eps, "weight_offset": weight_offset}, name, into)

    def layer_norm(self, x: str, weight: str, bias: str | None = None, *, eps: float,
                   name: str | None = None, into: str | None = None) -> str:
        inputs = [x, weight] + ([bias] if bias is not None else [])
        return self._one("layer_norm", inputs, {"eps": eps}, name, into)

    def head_rms_norm(self, x: str, weight: str, *, eps: float, head_dim: int,
                      name: str | None = None, into: str | None = None) -> str:
        return self._one("head_rms_norm", [x, weight], {"eps": eps, "head_dim": head_dim}, name, into)

    def matmul(self, x: str, weight: str, bias: str | None = None, *,
               name: str | None = None, into: str | None = None) -> str:
        """x @ weight.T (+ bias); weight is stored [out, in] as Hugging Face Linear layers store it."""
        inputs = [x, weight] + ([bias] if bias is not None else [])
        return self._one("matmul", inputs, None, name, into)

    def add(self, a: str, b: str, *, name: str | None = None, into: str | None = None) -> str:
        return self._one("add", [a, b], None, name, into)

    def mul(self, a: str, b: str, *, name: str | None = None, into: str | None = None) -> str:
        return self._one("mul", [a, b], None, name, into)

    def gated_activation(self, gate: str, up: str, *, activation: str = "silu",
                         name: str | None = None, into: str | None = None) -> str:
        return self._one("gated_activation", [gate, up], {"activation": activation}, name, into)

    def activation(self, x: str, *, activation: str, name: str | None = None, into: str | None = None) -> str:
        """act(x), elementwise (version 6)."""
        return self._one("activation", [x], {"activation": activation}, name, into)

    def bidirectional_attention(self, q: str, k: str, v: str, group: str, *, scale: float, head_dim: int,
                                name: str | None = None, into: str | None = None) -> str:
        """Full attention of each row over every row of its group (version 6)."""
        return self._one("bidirectional_attention", [q, k, v, group], {"scale": scale, "head_dim": head_dim},
                         name, into)

    def rotary(self, x: str, positions: str, *, theta: float, head_dim: int, rotary_dim: int | None = None,
               rope_type: str = "default", factor: float | None = None, low_freq_factor: float | None = None,
               high_freq_factor: float | None = None, original_max_position_embeddings: int | None = None,
               beta_fast: float | None = None, beta_slow: float | None = None, mscale: float | None = None,
               mscale_all_dim: float | None = None, attention_factor: float | None = None,
               truncate: bool | None = None, name: str | None = None, into: str | None = None) -> str:
        """Rotary embedding; `rotary_dim` defaults to `head_dim`; the scaling fields are HF's names."""
        attributes = {
            "theta": theta, "head_dim": head_dim, "rotary_dim": head_dim if rotary_dim is None else rotary_dim,
            "rope_type": rope_type, "factor": factor, "low_freq_factor": low_freq_factor,
            "high_freq_factor": high_freq_factor,
            "original_max_position_embeddings": original_max_position_embeddings,
            "beta_fast": beta_fast, "beta_slow": beta_slow, "mscale": mscale, "mscale_all_dim": mscale_all_dim,
            "attention_factor": attention_factor, "truncate": truncate,
        }
        return self._one("rotary", [x, positions], attributes, name, into)

    def paged_cache_write(self, cache: str, values: str, token_lane: str, positions: str, page_table: str) -> str:
        """Write each packed row of `values` into its lane's page of the STATE cache plane `cache`."""
        return self.emit("paged_cache_write", [cache, values, token_lane, positions, page_table])[0]

    def paged_attention(self, q: str, key_cache: str, value_cache: str, token_lane: str, positions: str,
                        page_table: str, *, scale: float, sliding_window: int | None = None,
                        softcap: float | None = None, name: str | None = None, into: str | None = None) -> str:
        attributes = {"scale": scale, "sliding_window": sliding_window, "softcap": softcap}
        inputs = [q, key_cache, value_cache, token_lane, positions, page_table]
        return self._one("paged_attention", inputs, attributes, name, into)

    def last_row_gather(self, x: str, token_lane: str, *, lanes: int,
                        name: str | None = None, into: str | None = None) -> str:
        return self._one("last_row_gather", [x, token_lane], {"lanes": lanes}, name, into)

    def logits(self, h: str, weight: str, *, sampled_tokens: int | None = None, softcap: float | None = None,
               name: str | None = None, into: str | None = None) -> str:
        attributes = {"sampled_tokens": sampled_tokens, "softcap": softcap}
        return self._one("logits", [h, weight], attributes, name, into)

    def sample(self, logits: str, seed: str, positions: str, parameters: str, histogram: str, grammar_mask: str,
               *, draw_index: int | None = None, name: str | None = None, into: str | None = None) -> str:
        inputs = [logits, seed, positions, parameters, histogram, grammar_mask]
        return self._one("sample", inputs, {"draw_index": draw_index}, name, into)

    def all_reduce(self, x: str, *, ranks: int, name: str | None = None, into: str | None = None) -> str:
        """The sum over the `ranks` ranks of x, on every rank."""
        return self._one("all_reduce", [x], {"ranks": ranks}, name, into)

    def all_gather(self, x: str, *, ranks: int, name: str | None = None, into: str | None = None) -> str:
        """The `ranks` ranks' x side by side along the last axis, on every rank."""
        return self._one("all_gather", [x], {"ranks": ranks}, name, into)

    def argmax(self, logits: str, *, name: str | None = None, into: str | None = None) -> str:
        return self._one("argmax", [logits], None, name, into)

    def copy(self, x: str, *, name: str | None = None, into: str | None = None) -> str:
        return self._one("copy", [x], None, name, into)

    def gather(self, x: str, index: str, *, name: str | None = None, into: str | None = None) -> str:
        """x's rows picked by `index` (any dtype; a zero row where the index is outside x)."""
        return self._one("gather", [x, index], None, name, into)

    def where(self, cond: str, a: str, b: str, *, name: str | None = None, into: str | None = None) -> str:
        """a where cond != 0, else b (elementwise; `into` may be `b` itself, e.g. a STATE tensor kept
        where cond is 0)."""
        return self._one("where", [cond, a, b], None, name, into)

    def scatter(self, x: str, index: str, *, into: str) -> str:
        """out[index[t]] = x[t] into the existing tensor `into` (rows outside it skipped)."""
        return self.emit("scatter", [into, x, index], None, into=[into])[0]

    def page_snapshot(self, continuation: str, cache: str, page_table: str, lane_slot: str, endpoint: str,
                      rows: str) -> str:
        """Copy the page holding each lane's endpoint into its continuation row (in place)."""
        return self.emit("page_snapshot", [continuation, cache, page_table, lane_slot, endpoint, rows])[0]

    def page_restore(self, cache: str, continuation: str, page_table: str, lane_slot: str, endpoint: str,
                     rows: str) -> str:
        """Copy each lane's continuation row into the page holding its endpoint (in place)."""
        return self.emit("page_restore", [cache, continuation, page_table, lane_slot, endpoint, rows])[0]

    def short_convolution(self, state: str, x: str, weight: str, token_lane: str, positions: str, state_rows: str,
                          bias: str | None = None, *, name: str | None = None) -> str:
        """The depthwise causal convolution of each lane's rows, continued from and into its state row
        (in place); returns the [P, C] output (version 6)."""
        inputs = [state, x, weight, token_lane, positions, state_rows] + ([bias] if bias is not None else [])
        return self.emit("short_convolution", inputs, into=[state, None], names=[None, name])[1]

    def engram_gather(self, staging: str, row_index: str, *, packed_tokens: int, name: str | None = None,
                      into: str | None = None) -> str:
        """Each of the `packed_tokens` packed tokens' Engram rows, one per n-gram order, read from the
        staging frames at the leading rows of `row_index`: [P, O * W] (zero blocks outside the
        staging; version 7)."""
        return self._one("engram_gather", [staging, row_index], {"packed_tokens": packed_tokens}, name, into)

    def state_row_copy(self, state: str, source: str, destination: str) -> str:
        """state[destination[b]] = state[source[b]] for lanes with both rows in range (in place, version 6)."""
        return self.emit("state_row_copy", [state, source, destination])[0]

    def head_matmul(self, x: str, weight: str, *, name: str | None = None, into: str | None = None) -> str:
        """Per-head products: out[:, h] = x[:, h] @ weight[h].T, weight [heads, out, in] (version 7)."""
        return self._one("head_matmul", [x, weight], None, name, into)

    def latent_attention(self, q_latent: str, q_rope: str, latent_cache: str, rope_cache: str, token_lane: str,
                         positions: str, page_table: str, *, scale: float, name: str | None = None,
                         into: str | None = None) -> str:
        """Causal attention over each lane's latent and rotary-key records in the absorbed form; the
        [P, heads * L] output lies in the latent space (version 7)."""
        return self._one("latent_attention", [q_latent, q_rope, latent_cache, rope_cache, token_lane, positions,
                                              page_table], {"scale": scale}, name, into)

    def column_write(self, value: str, *, index: int, into: str) -> str:
        """into[:, index] = value."""
        return self.emit("column_write", [into, value], {"index": index}, into=[into])[0]

    def token_probability(self, logits: str, ids: str, parameters: str, histogram: str, grammar_mask: str, *,
                          name: str | None = None) -> str:
        return self._one("token_probability", [logits, ids, parameters, histogram, grammar_mask], None, name, None)

    def speculative_allocate(self, confidence: str, ceilings: str, lane_order: str, *, packed_tokens: int,
                             name: str | None = None) -> str:
        return self._one("speculative_allocate", [confidence, ceilings, lane_order],
                         {"packed_tokens": packed_tokens}, name, None)

    def speculative_pack(self, lane_order: str, lengths: str, consumed: str, candidates: str, *,
                         packed_tokens: int, prefix: str = "target") -> tuple[str, ...]:
        """(tokens, positions, next_positions, token_lane) of the packed target rows."""
        names = [f"{prefix}_{n}" for n in ("tokens", "positions", "next_positions", "token_lane")]
        return self.emit("speculative_pack", [lane_order, lengths, consumed, candidates],
                         {"packed_tokens": packed_tokens}, names=names)

    def speculative_verify(self, logits: str, draft_logits: str, candidates: str, lengths: str, consumed: str,
                           seed: str, parameters: str, histogram: str, grammar_mask: str, *,
                           verify_tokens: int) -> tuple[str, ...]:
        """(ids [B, W], accepted [B])."""
        inputs = [logits, draft_logits, candidates, lengths, consumed, seed, parameters, histogram, grammar_mask]
        return self.emit("speculative_verify", inputs, {"verify_tokens": verify_tokens},
                         names=["verified_ids", "accepted"])

    def copied_proposal(self, drawn: str, draft_logits: str, copied_ids: str, copied_count: str, *, index: int,
                        name: str) -> tuple[str, str]:
        """(token, logits) of proposal index + 1: the copied id and its one-hot row, else the draft's."""
        token, logits = self.emit("copied_proposal", [drawn, draft_logits, copied_ids, copied_count],
                                  {"index": index}, names=[name, f"{name}_logits"])
        return token, logits

    def speculative_grammar_mask(self, logits: str, draft_logits: str, masks: str, lengths: str) -> tuple[str, str]:
        """In place: `logits` [P, V] and `draft_logits` [B, D, V] masked by each lane's position masks
        `masks` [B, W, words] (version 5)."""
        out = self.emit("speculative_grammar_mask", [logits, draft_logits, masks, lengths],
                        into=[logits, draft_logits])
        return out[0], out[1]

    def speculative_commit(self, ids: str, accepted: str, lengths: str, consumed: str) -> tuple[str, ...]:
        """(pending, emitted, endpoint) per lane."""
        return self.emit("speculative_commit", [ids, accepted, lengths, consumed],
                         names=["next_pending", "emitted_count", "endpoint"])

    def prompt_scores(self, logits: str, targets: str, *, scores: str, ids: str) -> tuple[str, ...]:
        """Each row's target log-probability and top-K ids and log-probabilities, written into the
        first P rows of `scores` [R, K + 1] f32 and `ids` [R, K] i32 (version 4)."""
        return self.emit("prompt_scores", [scores, ids, logits, targets])

    def fill(self, value: float, *, into: str | None = None, shape: Sequence[int] | None = None,
             dtype: int | str | None = None, name: str | None = None) -> str:
        """Fill a tensor with `value`: `into` an existing one (shape and dtype from it) or a new scratch."""
        if into is not None:
            target = self.type_of(into)
            shape, dtype = target.shape, target.dtype
        if shape is None or dtype is None:
            raise ValueError("fill needs `into`, or both `shape` and `dtype`")
        attributes = {"value": float(value), "shape": tuple(int(e) for e in shape),
                      "dtype": dtype_name(parse_dtype(dtype))}
        return self._one("fill", [], attributes, name, into)

    # Result ------------------------------------------------------------------------------------------

    def build(
        self, buffers: Mapping[str, manifest_pb2.BufferDescriptor] | None = None, *, produces: Sequence[str] = ()
    ) -> program_pb2.Program:
        """The validated program (against the manifest's buffers when given); `produces` names the
        TUNED buffers a startup tuning producer's program fills."""
        # The oldest operator-set version that holds every operator used (never below 2, the version
        # every core was stamped with before version 3): an engine that knows only older versions
        # keeps loading cores that need nothing newer.
        version = max([2, *(OPERATORS[o.op].since for o in self._operators),
                       *(OPERATORS[o.op].attribute_map[a.name].since for o in self._operators for a in o.attributes)])
        assert version <= OPERATOR_SET_VERSION
        program = program_pb2.Program(
            operator_set_version=version, graph=self.graph, rank=self.rank,
            tensors=self._decls, operators=self._operators,
        )
        validate_program(program, buffers, produces=produces)
        return program
