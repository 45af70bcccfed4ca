"""A startup tuning producer for norm weights stored in the offset convention (preparation side, host).

    core = offset_norm_storage(prepare_checkpoint(directory, options), offset=1.0)

Some checkpoints store a norm's weight as `w - offset` and compute with `stored + offset` (Gemma's
`(1 + w)` norms, `rms_norm`'s `weight_offset`). This turns a prepared fp32 core (any number of ranks:
every rank holds the norm weights whole, and each rank's producer program fills its own copy) into
one that stores every `rms_norm` weight that way, and adds one startup tuning producer,
`norm_weights`, that computes each norm's effective weight `stored + offset` once, into a TUNED
buffer per weight (`tuned/<weight resource>`); the serving programs' `rms_norm`s read those TUNED
buffers instead of a weight, and their graphs declare the tuned bindings. The precomputation is
real work a serving graph depends on: with the TUNED buffers left unfilled every norm multiplies by
zero, and with the producer skipped the norms would use `w - offset`.

Numerics: the stored bytes are `fp32(w - offset)`; the effective weight is the fp32 sum
`fp32(w - offset) + offset` in both runtimes (one IEEE addition each: byte-equal), which differs
from `w` by at most one rounding of the subtraction (an ulp of `offset`'s magnitude).

It is a test recipe for the mechanism (no published Llama-family checkpoint stores its norms this
way), fp32 cores only.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from helios.errors import HeliosError
from helios.ignition.prepare import PreparedCore, PreparedResource
from helios.program import ProgramBuilder
from helios.proto import contract_pb2, core_pb2, manifest_pb2, program_pb2

C, M, P = contract_pb2, manifest_pb2, program_pb2

PRODUCER = "norm_weights"

__all__ = ["PRODUCER", "OffsetNormStorageRefused", "offset_norm_storage", "tuned_buffer"]


class OffsetNormStorageRefused(HeliosError):
    """The prepared core cannot take offset norm storage (not fp32, no norm, already tuned)."""


def tuned_buffer(resource: str) -> str:
    """The TUNED buffer holding the effective weight of norm weight `resource`."""
    return f"tuned/{resource}"


def offset_norm_storage(prepared: PreparedCore, *, offset: float = 1.0) -> PreparedCore:
    """`prepared` with its rms_norm weights stored as `w - offset` and a `norm_weights` producer (see
    the module docstring)."""
    manifest = M.ExecutionManifest()
    manifest.CopyFrom(prepared.manifest)
    serving = C.ServingContract()
    serving.CopyFrom(prepared.contract)
    if manifest.tuning_catalog:
        raise OffsetNormStorageRefused("offset norm storage: the core already has a tuning catalog")
    if offset == 0.0:
        raise OffsetNormStorageRefused("offset norm storage: offset 0 stores the weights unchanged")
    programs = {resource: P.Program.FromString(prepared.read(resource))
                for h in manifest.graphs for resource in h.program_resources}
    norms: dict[str, tuple[int, ...]] = {}  # weight resource -> shape, in first-use order
    for program in programs.values():
        decls = {d.name: d for d in program.tensors}
        for op in program.operators:
            if op.op != "rms_norm" or decls[op.inputs[1]].role != P.TENSOR_ROLE_WEIGHT:
                continue
            decl = decls[op.inputs[1]]
            if decl.dtype != M.DTYPE_F32:
                raise OffsetNormStorageRefused(f"offset norm storage: weight {decl.resource!r} is "
                                               f"{M.DType.Name(decl.dtype)}; the test recipe takes fp32 cores")
            norms.setdefault(decl.resource, tuple(int(e) for e in decl.shape))
    if not norms:
        raise OffsetNormStorageRefused("offset norm storage: the core's programs hold no rms_norm weight")
    for resource, shape in norms.items():
        manifest.buffers.append(M.BufferDescriptor(name=tuned_buffer(resource), role=M.BUFFER_ROLE_TUNED,
                                                   dtype=M.DTYPE_F32, shape=list(shape), producer=PRODUCER))
    descriptors = {b.name: b for b in manifest.buffers}

    # one producer program per rank (every rank holds every norm weight whole and fills its own TUNED buffers)
    producer_programs: dict[str, bytes] = {}
    for rank in range(manifest.ranks):
        producer = ProgramBuilder(PRODUCER, rank=rank)
        for i, (resource, shape) in enumerate(norms.items()):
            stored = producer.weight(f"stored.{i}", resource, "f32", shape)
            out = producer.tuned(f"effective.{i}", tuned_buffer(resource), "f32", shape)
            producer.add(stored, producer.fill(offset, shape=shape, dtype="f32", name=f"offset.{i}"), into=out)
        program = producer.build(descriptors, produces=[tuned_buffer(r) for r in norms])
        producer_programs[f"program/{PRODUCER}/rank{rank}"] = program.SerializeToString(deterministic=True)
    manifest.tuning_catalog.append(M.GraphHandle(name=PRODUCER, operation=C.OPERATION_UNSPECIFIED,
                                                 program_resources=list(producer_programs)))

    rewritten: dict[str, bytes] = {}
    contracts = {g.name: g for g in serving.model.graphs}
    for handle in manifest.graphs:
        bound: list[str] = []
        for resource_id in handle.program_resources:
            program = programs[resource_id]
            read_by_norm = {op.inputs[1] for op in program.operators if op.op == "rms_norm"}
            changed = False
            for decl in program.tensors:
                if decl.role == P.TENSOR_ROLE_WEIGHT and decl.resource in norms:
                    if decl.name not in read_by_norm or any(decl.name in op.inputs for op in program.operators
                                                            if op.op != "rms_norm"):
                        raise OffsetNormStorageRefused(f"offset norm storage: graph {handle.name!r} reads norm "
                                                       f"weight {decl.resource!r} outside an rms_norm")
                    decl.role, decl.buffer = P.TENSOR_ROLE_TUNED, tuned_buffer(decl.resource)
                    decl.ClearField("resource")
                    changed = True
                    if decl.buffer not in bound:
                        bound.append(decl.buffer)
            if changed:
                rewritten[resource_id] = program.SerializeToString(deterministic=True)
        if not bound:
            continue
        graph = contracts[handle.name]
        graph.tuned_bindings.extend(C.TunedBinding(buffer=b, producer=PRODUCER) for b in bound)
        graph.resource_dependencies.extend(r for r in producer_programs if r not in graph.resource_dependencies)

    resources: list[PreparedResource] = []
    for resource in prepared.resource_list:
        if resource.id in rewritten:
            resources.append(replace(resource, produce=_constant(rewritten[resource.id])))
        elif resource.id in norms:
            resources.append(replace(resource, produce=_offset(resource.produce, offset)))
        else:
            resources.append(resource)
    resources.extend(PreparedResource(resource_id, core_pb2.RESOURCE_KIND_PROGRAM, _constant(data))
                     for resource_id, data in producer_programs.items())
    return PreparedCore(serving, manifest, tuple(resources))


def _constant(data: bytes):
    return lambda: data


def _offset(produce, offset: float):
    def stored() -> bytes:
        weight = np.frombuffer(produce(), dtype="<f4")
        return (weight - np.float32(offset)).astype("<f4").tobytes()
    return stored
