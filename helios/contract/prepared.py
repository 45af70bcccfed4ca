"""PreparedContract: the decoded, validated, typed view of a core's contract and manifest (host side).

    contract = PreparedContract.decode(serving_contract, execution_manifest)   # raises ContractError
    selection = contract.select(StartupOptions(max_concurrency=8))             # load-time selection

Decoding never repairs: every rule of validate.py is checked before the contract is returned, and the
first violation is raised with its field path. `to_proto()` returns the wire messages again, so a
valid contract survives binary -> PreparedContract -> JSON -> PreparedContract unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

from helios.contract import errors as e
from helios.contract.codec import (
    cache_from_proto,
    cache_to_proto,
    frontend_from_proto,
    frontend_to_proto,
    graph_from_proto,
    graph_to_proto,
    input_vocabulary_from_proto,
    vision_from_proto,
    vision_to_proto,
    vocabulary_from_proto,
)
from helios.contract.enums import Operation
from helios.contract.model import (
    Cache,
    Frontend,
    Graph,
    InputVocabulary,
    Manifest,
    ServingDefaults,
    Vision,
    Vocabulary,
    manifest_from_proto,
    manifest_to_proto,
)
from helios.contract.unknown import unknown_fields
from helios.contract.validate import problems
from helios.proto import contract_pb2, manifest_pb2


@dataclass(frozen=True, slots=True)
class PreparedContract:
    served_id: str
    aliases: tuple[str, ...]
    cache_identity: str
    context_tokens: int
    prefill_tokens: int
    page_capacity: int
    snapshot_capacity: int
    max_concurrency: int
    speculative_widths: tuple[int, ...]
    defaults: ServingDefaults
    version: int
    vocabulary: Vocabulary
    input_vocabulary: InputVocabulary
    vision: Vision
    cache: Cache
    graphs: tuple[Graph, ...]
    frontend: Frontend
    manifest: Manifest

    # ------------------------------------------------------------------ wire form

    @classmethod
    def from_proto(cls, serving: contract_pb2.ServingContract,
                   manifest: manifest_pb2.ExecutionManifest) -> PreparedContract:
        """Translates without validating; use decode() unless you are reporting every problem."""
        model = serving.model
        version = model.version
        return cls(
            served_id=serving.served_id,
            aliases=tuple(serving.aliases),
            cache_identity=serving.cache_identity,
            context_tokens=serving.context_tokens,
            prefill_tokens=serving.prefill_tokens,
            page_capacity=serving.page_capacity,
            snapshot_capacity=serving.snapshot_capacity,
            max_concurrency=serving.max_concurrency,
            speculative_widths=tuple(serving.speculative_widths),
            defaults=ServingDefaults.from_proto(serving.defaults),
            version=version,
            vocabulary=vocabulary_from_proto(version, model.vocabulary),
            input_vocabulary=input_vocabulary_from_proto(version, model),
            vision=vision_from_proto(model.vision),
            cache=cache_from_proto(model.cache),
            graphs=tuple(graph_from_proto(g) for g in model.graphs),
            frontend=frontend_from_proto(model.frontend),
            manifest=manifest_from_proto(manifest),
        )

    @classmethod
    def decode(cls, serving: contract_pb2.ServingContract,
               manifest: manifest_pb2.ExecutionManifest) -> PreparedContract:
        """Decodes and validates; raises the first ContractError (with its field path)."""
        for problem in unknown_fields(serving, manifest):
            raise problem
        contract = cls.from_proto(serving, manifest)
        for problem in problems(contract):
            raise problem
        return contract

    @classmethod
    def check(cls, serving: contract_pb2.ServingContract,
              manifest: manifest_pb2.ExecutionManifest) -> list[e.ContractError]:
        """Every problem of the contract, in a stable order (empty when it is valid)."""
        return [*unknown_fields(serving, manifest), *problems(cls.from_proto(serving, manifest))]

    def to_proto(self) -> tuple[contract_pb2.ServingContract, manifest_pb2.ExecutionManifest]:
        v = self.vocabulary
        model = contract_pb2.ModelContract(
            version=self.version,
            vocabulary=contract_pb2.VocabularyContract(sampled_tokens=v.sampled_tokens, logits_width=v.logits_width,
                                                       histogram_width=v.histogram_width, mask_words=v.mask_words),
            input_vocabulary=contract_pb2.InputVocabularyContract(
                input_tokens=self.input_vocabulary.input_tokens,
                image_sentinels=list(self.input_vocabulary.image_sentinels)),
            vision=vision_to_proto(self.vision),
            cache=cache_to_proto(self.cache),
            graphs=[graph_to_proto(g) for g in self.graphs],
            frontend=frontend_to_proto(self.frontend),
        )
        serving = contract_pb2.ServingContract(
            served_id=self.served_id, aliases=list(self.aliases), cache_identity=self.cache_identity,
            context_tokens=self.context_tokens, prefill_tokens=self.prefill_tokens,
            page_capacity=self.page_capacity, snapshot_capacity=self.snapshot_capacity,
            max_concurrency=self.max_concurrency, speculative_widths=list(self.speculative_widths),
            defaults=self.defaults.to_proto(), model=model)
        return serving, manifest_to_proto(self.manifest)

    # ------------------------------------------------------------------ lookups

    def graph(self, name: str) -> Graph:
        for g in self.graphs:
            if g.name == name:
                return g
        raise KeyError(name)

    def graphs_for(self, operation: Operation) -> tuple[Graph, ...]:
        """Graphs of one operation, smallest capacity first."""
        return tuple(sorted((g for g in self.graphs if g.operation == operation),
                            key=lambda g: (g.batch_capacity, g.packed_token_capacity, g.name)))

    def check_resources(self, resource_ids) -> None:
        """Every program and dependency a graph names must be held by the core."""
        held = set(resource_ids)
        for i, h in enumerate(self.manifest.graphs):
            for r, rid in enumerate(h.program_resources):
                if rid not in held:
                    raise e.UnknownResource(f"manifest.graphs[{i}].program_resources[{r}]",
                                            f"resource {rid!r} is not in the core")
        for i, g in enumerate(self.graphs):
            for r, rid in enumerate(g.resource_dependencies):
                if rid not in held:
                    raise e.UnknownResource(f"model.graphs[{i}].resource_dependencies[{r}]",
                                            f"resource {rid!r} is not in the core")

    def select(self, options=None):
        """Load-time selection of graphs; see selection.py."""
        from helios.contract.selection import StartupOptions, select

        return select(self, options or StartupOptions())
