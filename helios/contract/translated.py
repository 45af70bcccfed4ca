"""TranslatedContract: a core's contract and manifest in typed form, not yet validated (host side).

    typed = TranslatedContract.from_proto(serving_contract, execution_manifest)   # translates, checks nothing

The rules of validate.py read this form, so they can report every problem of a contract that is not
valid; PreparedContract (prepared.py) is this form once every rule has passed. `to_proto()` returns the
wire messages again, so a valid contract survives binary -> PreparedContract -> JSON -> PreparedContract
unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Self

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
from helios.contract.model import (
    Cache,
    EngramTable,
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
from helios.proto import contract_pb2, manifest_pb2


@dataclass(frozen=True, slots=True)
class TranslatedContract:
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
    engram_tables: tuple[EngramTable, ...] = ()  # docs/engram.md

    # ------------------------------------------------------------------ wire form

    @classmethod
    def from_proto(cls, serving: contract_pb2.ServingContract,
                   manifest: manifest_pb2.ExecutionManifest) -> Self:
        """Translates without validating; use PreparedContract.decode() unless you report every problem."""
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
            engram_tables=tuple(EngramTable.from_proto(t) for t in model.engram_tables),
        )

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
            engram_tables=[t.to_proto() for t in self.engram_tables],
        )
        serving = contract_pb2.ServingContract(
            served_id=self.served_id, aliases=list(self.aliases), cache_identity=self.cache_identity,
            context_tokens=self.context_tokens, prefill_tokens=self.prefill_tokens,
            page_capacity=self.page_capacity, snapshot_capacity=self.snapshot_capacity,
            max_concurrency=self.max_concurrency, speculative_widths=list(self.speculative_widths),
            defaults=self.defaults.to_proto(), model=model)
        return serving, manifest_to_proto(self.manifest)
