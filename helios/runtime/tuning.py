"""Startup tuning bindings (host side, engine-agnostic): which producers a load runs, in which order,
and the load-time checks that keep their outputs apart from everything a round writes.

    tuning = StartupTuning.resolve(serving, manifest, core.read, serving_programs)
    for producer in tuning.producers:      # before any serving graph runs (warm-up and capture included)
        run producer.programs[rank] over the TUNED buffers and the weights   # each runtime its own way

The specification: GraphContract.tuned_bindings name persistent TUNED buffers filled by captured
startup tuning graphs, the execution manifest's tuning catalog; their outputs cannot overlap request
inputs, writable graph state or cache storage; startup executes the required producers before it
exposes the dependent serving graphs; selection logic belongs to the captured producer (a runtime
only runs the producer's program, it never computes a tuned value itself).

The contract validator already refuses a tuned binding whose buffer is also a request input, a
written state view or a cache plane (`TunedOutputOverlap`), or is not the TUNED buffer its producer
fills (`TunedDescriptorMismatch`). What the programs do is checked here, at load, before any byte of
them runs (`TuningRefused`, one line naming the producer or graph):

  - a producer's program (one per rank) belongs to its handle and rank and validates with its own
    TUNED buffers writable (`validate_program(..., produces=...)`);
  - a producer writes only TUNED buffers whose descriptor names it, and writes every one of them
    (a written TRANSPORT, STATE, CACHE or COMPLETION tensor is an overlap: refused);
  - a producer reads only weights, its own scratch and the TUNED buffers of producers earlier in
    the catalog (startup holds no request, no state and no cache to read);
  - a serving program reads a TUNED tensor only through its graph's tuned bindings, so every
    dependency is declared and its producer is known.

The required producers are those the selected graphs' tuned bindings name, with the earlier
producers they read, in catalog order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from helios.errors import HeliosError
from helios.program.validate import ValidatedOperator, validate_program
from helios.proto import contract_pb2, manifest_pb2, program_pb2

M, P = manifest_pb2, program_pb2

__all__ = ["StartupTuning", "TuningProducer", "TuningRefused"]


class TuningRefused(HeliosError):
    """A startup tuning producer or a tuned binding cannot be run as the contract declares it."""


@dataclass(frozen=True, slots=True)
class TuningProducer:
    """One producer of the tuning catalog, its programs validated (rank 0 first)."""

    name: str
    programs: tuple[program_pb2.Program, ...]
    operators: tuple[tuple[ValidatedOperator, ...], ...]
    outputs: tuple[str, ...]  # the TUNED buffers it fills


@dataclass(frozen=True, slots=True)
class StartupTuning:
    """The producers a load runs, in order."""

    producers: tuple[TuningProducer, ...]

    @property
    def buffers(self) -> tuple[str, ...]:
        """Every TUNED buffer the producers fill, in production order."""
        return tuple(b for p in self.producers for b in p.outputs)

    @classmethod
    def resolve(cls, serving: contract_pb2.ServingContract, manifest: manifest_pb2.ExecutionManifest,
                read: Callable[[str], bytes],
                serving_programs: Mapping[str, Sequence[program_pb2.Program]]) -> StartupTuning:
        """Check the selected serving programs (graph -> programs, every rank's) and the producers
        they need; see the module docstring."""
        descriptors = {b.name: b for b in manifest.buffers}
        contracts = {g.name: g for g in serving.model.graphs}
        required: set[str] = set()
        for graph, programs in serving_programs.items():
            bound = {t.buffer: t.producer for t in contracts[graph].tuned_bindings} if graph in contracts else {}
            for program in programs:
                for decl in program.tensors:
                    if decl.role == P.TENSOR_ROLE_TUNED and decl.buffer not in bound:
                        raise TuningRefused(f"graph {graph!r}: tensor {decl.name!r} reads TUNED buffer "
                                            f"{decl.buffer!r}, which its tuned_bindings do not name")
            required.update(bound.values())
        handles = list(manifest.tuning_catalog)
        position = {h.name: i for i, h in enumerate(handles)}
        for name in sorted(required):
            if name not in position:  # the contract validator refuses this first; kept for bare cores
                raise TuningRefused(f"producer {name!r} is not in the tuning catalog")
        checked: dict[str, TuningProducer] = {}
        for i, handle in enumerate(handles):
            checked[handle.name] = _producer(handle, descriptors, read, earlier={h.name for h in handles[:i]})
        # the producers that required ones read, transitively (reads point only to earlier producers)
        for handle in reversed(handles):
            if handle.name in required:
                for program in checked[handle.name].programs:
                    required.update(descriptors[d.buffer].producer for d in program.tensors
                                    if d.role == P.TENSOR_ROLE_TUNED and d.buffer not in checked[handle.name].outputs)
        return cls(tuple(checked[h.name] for h in handles if h.name in required))


def _producer(handle: manifest_pb2.GraphHandle, descriptors: Mapping[str, manifest_pb2.BufferDescriptor],
              read: Callable[[str], bytes], *, earlier: set[str]) -> TuningProducer:
    where = f"tuning producer {handle.name!r}"
    outputs = tuple(sorted(b.name for b in descriptors.values()
                           if b.role == M.BUFFER_ROLE_TUNED and b.producer == handle.name))
    if not outputs:
        raise TuningRefused(f"{where} fills no TUNED buffer (no buffer descriptor names it as producer)")
    programs, operators = [], []
    for rank, resource in enumerate(handle.program_resources):
        program = program_pb2.Program.FromString(read(resource))
        if program.graph != handle.name or program.rank != rank:
            raise TuningRefused(f"{where}: program {resource!r} belongs to {program.graph!r} rank {program.rank}, "
                                f"not rank {rank}")
        try:
            ops = validate_program(program, descriptors, produces=outputs)
        except HeliosError as error:
            raise TuningRefused(f"{where}: {error}") from None
        decls = {d.name: d for d in program.tensors}
        for decl in program.tensors:
            if decl.role in (P.TENSOR_ROLE_WEIGHT, P.TENSOR_ROLE_SCRATCH):
                continue
            if decl.role != P.TENSOR_ROLE_TUNED:
                role = P.TensorRole.Name(decl.role).removeprefix("TENSOR_ROLE_")
                raise TuningRefused(f"{where}: tensor {decl.name!r} binds {role} buffer {decl.buffer!r}; a "
                                    "producer's outputs cannot overlap request inputs, writable state or cache storage")
            owner = descriptors[decl.buffer].producer
            if decl.buffer not in outputs and owner not in earlier:
                raise TuningRefused(f"{where}: tensor {decl.name!r} reads TUNED buffer {decl.buffer!r} of producer "
                                    f"{owner!r}, which does not run before it in the tuning catalog")
        written = {decls[name].buffer for op in ops for name in op.outputs
                   if decls[name].role == P.TENSOR_ROLE_TUNED}
        stray = written - set(outputs)
        if stray:
            raise TuningRefused(f"{where}: writes TUNED buffer {sorted(stray)[0]!r}, which another producer fills")
        missing = set(outputs) - written
        if missing:
            raise TuningRefused(f"{where}: never writes its TUNED buffer {sorted(missing)[0]!r}")
        programs.append(program)
        operators.append(ops)
    return TuningProducer(handle.name, tuple(programs), tuple(operators), outputs)
