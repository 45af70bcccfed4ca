"""The sequential reference engine (host side, NumPy only): the executable specification of serving.

    engine = ReferenceEngine.load(core)                  # an opened core or a PreparedCore
    for token in engine.generate(request): ...           # sampled ids, EOS included, then stop

Owns running one request at a time through a core's captured programs exactly as its contract
declares: INITIALIZATION at admission, PREFILL chunks (each in the smallest token capacity that
holds it), then one-token DECODE rounds. Every round packs the graph's value bindings with the shared
packer (`helios.runtime.packing`), executes the program with the reference interpreter, and
validates the completion record with the shared rules of `helios.runtime.completion` (status,
submission sequence, generation echo, emitted count, consumed endpoint, sampled id within the
vocabulary, no draft cursor, reserved field -1) before a token is accepted.

Buffers are plain arrays, one per manifest buffer; cache planes get `pages` pages at load (default:
enough for one request's whole context). Admission reserves a request's pages before its first id;
closing or dropping its stream cancels it and returns them. Lanes are addressed by physical request
slot: a lane's completion row is its slot's row. Requests in distinct slots may interleave (a
worker pulling one token from each in turn); every round still runs one lane alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from helios.errors import HeliosError
from helios.program.validate import ValidatedOperator, validate_program
from helios.proto import contract_pb2, manifest_pb2, program_pb2
from helios.reference.cache import PageAllocator, pages_for
from helios.reference.interpreter import bf16_to_f32, execute
from helios.reference.operators import NUMPY_DTYPES
from helios.runtime.completion import (
    Completion,
    CompletionInvalid,
    completion_rows,
    transport_sequence,
    validate_round,
)
from helios.runtime.packing import GraphPacking, LaneInput
from helios.runtime.request import GenerationRequest

C, M = contract_pb2, manifest_pb2
F = M  # completion field enum namespace

__all__ = ["AdmissionRejected", "Completion", "CompletionInvalid", "EngineLoadError", "ReferenceEngine"]


class EngineLoadError(HeliosError):
    """The core cannot be executed by the reference engine (a missing graph, program or weight)."""


class AdmissionRejected(HeliosError):
    """The request lies outside the core's prepared capacities or vocabulary."""


@dataclass(frozen=True, slots=True)
class LoadedGraph:
    name: str
    operation: int
    batch_capacity: int
    packed_token_capacity: int
    program: program_pb2.Program
    operators: tuple[ValidatedOperator, ...]
    packing: GraphPacking


def _decode_contract(contract: contract_pb2.ServingContract, manifest: manifest_pb2.ExecutionManifest) -> Any:
    from helios.contract import PreparedContract

    return PreparedContract.decode(contract, manifest)


class ReferenceEngine:
    """Runs requests sequentially over a core's programs with NumPy."""

    def __init__(self, serving: contract_pb2.ServingContract, manifest: manifest_pb2.ExecutionManifest,
                 prepared: Any, graphs: Mapping[str, LoadedGraph], weights: Mapping[str, np.ndarray],
                 buffers: dict[str, np.ndarray], pages: int, keep: Sequence[str]) -> None:
        self.serving = serving
        self.manifest = manifest
        self.contract = prepared  # the PreparedContract
        self.graphs = dict(graphs)
        self.weights = weights
        self.buffers = buffers
        self.allocator = PageAllocator(pages)
        self.keep = tuple(keep)
        self.kept: list[dict[str, np.ndarray]] = []  # per round of the last request: copies of `keep` tensors
        self.kept_graphs: list[str] = []  # the graph of each kept round
        self._generations = [0] * serving.max_concurrency
        self._active_slots: set[int] = set()
        self._sequence = 0
        self._completion = {slot.field: slot.buffer for slot in manifest.completion.fields}
        self._by_operation: dict[int, list[LoadedGraph]] = {}
        for graph in self.graphs.values():
            self._by_operation.setdefault(graph.operation, []).append(graph)
        for operation in (C.OPERATION_INITIALIZATION, C.OPERATION_PREFILL, C.OPERATION_DECODE):
            if operation not in self._by_operation:
                raise EngineLoadError(f"the core has no {C.Operation.Name(operation)} graph")
        for group in self._by_operation.values():
            group.sort(key=lambda g: (g.packed_token_capacity, g.batch_capacity))

    # ------------------------------------------------------------------------------------------ load

    @classmethod
    def load(cls, core: Any, *, pages: int | None = None, keep: Sequence[str] = ()) -> ReferenceEngine:
        """Load `core` (anything with `.contract`, `.manifest` and `.read(id)`); `keep` names program
        tensors (e.g. "logits") whose values are copied into `kept` after every round."""
        serving, manifest = core.contract, core.manifest
        prepared = _decode_contract(serving, manifest)
        if manifest.ranks != 1:
            raise EngineLoadError(f"the reference engine runs one rank; the core has {manifest.ranks}")
        buffer_descriptors = {b.name: b for b in manifest.buffers}
        page_tokens = serving.model.cache.page_tokens
        if pages is None:
            pages = pages_for(serving.context_tokens, page_tokens)
        if pages < 1:
            raise EngineLoadError(f"pages must be >= 1, got {pages}")
        contracts = {g.name: g for g in serving.model.graphs}
        graphs: dict[str, LoadedGraph] = {}
        weights: dict[str, np.ndarray] = {}
        for handle in manifest.graphs:
            program = program_pb2.Program.FromString(core.read(handle.program_resources[0]))
            if program.graph != handle.name:
                raise EngineLoadError(f"program {handle.program_resources[0]!r} belongs to {program.graph!r}, "
                                      f"not {handle.name!r}")
            operators = tuple(validate_program(program, buffer_descriptors))
            for decl in program.tensors:
                if decl.role == program_pb2.TENSOR_ROLE_WEIGHT and decl.resource not in weights:
                    weights[decl.resource] = _load_weight(core, decl)
            packing = GraphPacking.resolve(contracts[handle.name], manifest, physical_rows=serving.max_concurrency)
            graphs[handle.name] = LoadedGraph(handle.name, handle.operation, handle.batch_capacity,
                                              handle.packed_token_capacity, program, operators, packing)
        buffers = {}
        for b in manifest.buffers:
            shape = [int(e) for e in b.shape]
            if b.role == M.BUFFER_ROLE_CACHE:
                shape[0] = pages
            buffers[b.name] = np.zeros(shape, dtype=NUMPY_DTYPES[b.dtype])
        for graph in graphs.values():
            graph.packing.initialize(buffers)
        return cls(serving, manifest, prepared, graphs, weights, buffers, pages, keep)

    # ------------------------------------------------------------------------------------------ rounds

    def run_round(self, graph_name: str, lanes: Sequence[LaneInput]) -> list[Completion]:
        """Pack `lanes` into `graph_name`, execute it, and return each lane's completion row."""
        # The transport numbers every submission, one that fails before the program runs included, so
        # the next rounds' completions still answer the sequence a scheduler numbered them with.
        self._sequence += 1
        graph = self.graphs[graph_name]
        graph.packing.pack(lanes, self.buffers)
        frame = self._field(F.COMPLETION_FIELD_FRAME_INDEX)
        sequence = self._field(F.COMPLETION_FIELD_SUBMISSION_SEQUENCE)
        # NOTE: the transport owns frame index and submission sequence: it writes them, programs never do.
        frame[...] = 0
        sequence[...] = transport_sequence(self._sequence)
        tensors: dict[str, np.ndarray] = dict(self.buffers)
        tensors.update(self.weights)
        env = execute(graph.program, tensors, graph.operators)
        if self.keep:
            self.kept.append({name: np.array(env[name]) for name in self.keep if name in env})
            self.kept_graphs.append(graph_name)
        rows = completion_rows({field: self._field(field) for field in self._completion}, lanes)
        self.validate_round(graph_name, lanes, rows)
        return rows

    def _field(self, field: int) -> np.ndarray:
        return self.buffers[self._completion[field]]

    def validate_round(self, graph_name: str, lanes: Sequence[LaneInput], rows: Sequence[Completion]) -> None:
        """Reject completion rows that disagree with the round they answer, before any token is accepted
        (the shared rules of helios.runtime.completion: status, sequence, generation echo, emitted,
        consumed endpoint within the lane's pages, no draft cursor, reserved -1, sampled id in range)."""
        validate_round(graph_name, lanes, rows, sequence=self._sequence,
                       sampled_tokens=self.serving.model.vocabulary.sampled_tokens,
                       page_tokens=self.serving.model.cache.page_tokens, frame=0)

    def graph_for(self, operation: int, *, tokens: int, lanes: int = 1) -> LoadedGraph:
        """The smallest graph of `operation` holding `lanes` lanes and `tokens` tokens (else the largest)."""
        candidates = [g for g in self._by_operation.get(operation, []) if g.batch_capacity >= lanes]
        if not candidates:
            raise AdmissionRejected(f"no {C.Operation.Name(operation)} graph holds {lanes} lanes")
        fitting = [g for g in candidates if g.packed_token_capacity >= tokens]
        return fitting[0] if fitting else candidates[-1]

    # ------------------------------------------------------------------------------------------ requests

    def _admit(self, request: GenerationRequest) -> None:
        vocabulary = self.serving.model
        limit = vocabulary.input_vocabulary.input_tokens
        bad = [t for t in request.prompt_token_ids if t >= limit]
        if bad:
            raise AdmissionRejected(f"prompt token {bad[0]} lies outside the input vocabulary [0, {limit})")
        if len(request.prompt_token_ids) >= self.serving.context_tokens:
            raise AdmissionRejected(f"the prompt's {len(request.prompt_token_ids)} tokens leave no room in the "
                                    f"context of {self.serving.context_tokens} tokens")
        reach = min(len(request.prompt_token_ids) + request.max_tokens, self.serving.context_tokens)
        needed = pages_for(reach, self.serving.model.cache.page_tokens)
        if needed > self.allocator.free:
            raise AdmissionRejected(f"the request reaches {reach} tokens: {needed} pages, "
                                    f"{self.allocator.free} of the cache's {self.allocator.pages} are free")

    def generate(self, request: GenerationRequest, *, slot: int = 0,
                 grammar_mask: Callable[[], Sequence[int]] | None = None) -> Iterator[int]:
        """Sampled ids one at a time: stops after an EOS id (yielded) or at max_tokens.

        Admission happens here, before the first id: the request's pages (prompt + max_tokens, within
        the context) are reserved, or AdmissionRejected is raised. Closing the returned iterator (or
        exhausting it) cancels the request and returns its pages; requests in distinct slots may
        interleave, each round still runs alone. With `grammar_mask`, each sampling round's
        GRAMMAR_MASK row is what it returns when that round is packed (the caller advances its grammar
        with every yielded id before asking for the next)."""
        self._admit(request)
        if not 0 <= slot < self.serving.max_concurrency:
            raise AdmissionRejected(f"slot {slot} outside the core's {self.serving.max_concurrency} slots")
        if slot in self._active_slots:
            raise AdmissionRejected(f"slot {slot} already holds a request")
        reach = min(len(request.prompt_token_ids) + request.max_tokens, self.serving.context_tokens)
        pages = self.allocator.allocate(pages_for(reach, self.serving.model.cache.page_tokens))
        self._active_slots.add(slot)
        self._generations[slot] += 1
        self.kept.clear()
        self.kept_graphs.clear()

        def release() -> None:
            self.allocator.release(pages)
            self._active_slots.discard(slot)

        rounds = self._rounds(request, slot, self._generations[slot], tuple(pages), grammar_mask)
        return _Generation(rounds, release)

    def _rounds(self, request: GenerationRequest, slot: int, generation: int, pages: tuple[int, ...],
                grammar_mask: Callable[[], Sequence[int]] | None = None) -> Iterator[int]:
        eos = set(request.eos_token_ids or self.serving.model.frontend.eos_token_ids)
        prompt = tuple(request.prompt_token_ids)

        def lane(consumed: int, tokens: tuple[int, ...], prompt_in_round: int, samples: bool) -> LaneInput:
            return LaneInput(slot=slot, generation=generation, consumed=consumed, tokens=tokens,
                             prompt_tokens_in_round=prompt_in_round, samples=samples, page_ids=pages,
                             seed=request.sampling.seed, sampling=request.sampling, output_limit=request.max_tokens,
                             eos_ids=tuple(sorted(eos)), prompt_token_ids=prompt,
                             grammar_mask=tuple(grammar_mask()) if grammar_mask is not None and samples else None)

        init = self._by_operation[C.OPERATION_INITIALIZATION][0]
        self.run_round(init.name, [lane(0, (), 0, False)])
        consumed, emitted = 0, 0
        pending: int | None = None
        while consumed < len(prompt):
            remaining = len(prompt) - consumed
            graph = self.graph_for(C.OPERATION_PREFILL, tokens=remaining)
            chunk = prompt[consumed: consumed + min(remaining, graph.packed_token_capacity)]
            last = consumed + len(chunk) == len(prompt)
            (row,) = self.run_round(graph.name, [lane(consumed, chunk, len(chunk), last)])
            consumed += len(chunk)
            if last:
                pending = row.sampled_id
        while pending is not None:
            yield pending
            emitted += 1
            if (pending in eos and not request.ignore_eos) or emitted >= request.max_tokens:
                return
            if consumed + 1 >= self.serving.context_tokens:
                return  # the context is full: the next token would have no position
            graph = self.graph_for(C.OPERATION_DECODE, tokens=1)
            (row,) = self.run_round(graph.name, [lane(consumed, (pending,), 0, True)])
            consumed += 1
            pending = row.sampled_id


class _Generation(Iterator[int]):
    """A request's token stream that returns its resources exactly once: when exhausted, when a
    round fails, when closed, or when dropped without being started."""

    def __init__(self, tokens: Iterator[int], release: Callable[[], None]) -> None:
        self._tokens = tokens
        self._release: Callable[[], None] | None = release

    def __iter__(self) -> _Generation:
        return self

    def __next__(self) -> int:
        if self._release is None:
            raise StopIteration
        try:
            return next(self._tokens)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        release, self._release = self._release, None
        if release is not None:
            self._tokens.close()  # type: ignore[attr-defined]
            release()

    def __del__(self) -> None:
        self.close()


def _load_weight(core: Any, decl: program_pb2.TensorDecl) -> np.ndarray:
    data = core.read(decl.resource)
    shape = tuple(int(e) for e in decl.shape)
    count = int(np.prod(shape, dtype=np.int64))
    if decl.dtype == M.DTYPE_BF16:
        raw = np.frombuffer(data, dtype="<u2")
        values = bf16_to_f32(raw)
    elif decl.dtype in (M.DTYPE_F32, M.DTYPE_F16):
        values = np.frombuffer(data, dtype="<f4" if decl.dtype == M.DTYPE_F32 else "<f2")
    else:
        raise EngineLoadError(f"weight {decl.resource!r} has a non-float dtype {decl.dtype}")
    if values.size != count:
        raise EngineLoadError(f"weight {decl.resource!r} holds {values.size} values, its tensor declares {count}")
    return values.reshape(shape)
