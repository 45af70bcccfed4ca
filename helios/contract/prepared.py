"""PreparedContract: the decoded, validated, typed view of a core's contract and manifest (host side).

    contract = PreparedContract.decode(serving_contract, execution_manifest)   # raises ContractError
    selection = contract.select(StartupOptions(max_concurrency=8))             # load-time selection

Decoding never repairs: every rule of validate.py is checked before the contract is returned, and the
first violation is raised with its field path. The fields and the wire form (`from_proto`, `to_proto`)
are TranslatedContract's (translated.py), which the rules read before any contract is prepared.
"""

from __future__ import annotations

from dataclasses import dataclass

import helios.contract.errors as e
from helios.contract.enums import Operation
from helios.contract.model import Graph
from helios.contract.selection import Selection, StartupOptions, select
from helios.contract.translated import TranslatedContract
from helios.contract.unknown import unknown_fields
from helios.contract.validate import problems
from helios.proto import contract_pb2, manifest_pb2


@dataclass(frozen=True, slots=True)
class PreparedContract(TranslatedContract):
    """The translated contract once every rule of validate.py has passed (decode() makes one)."""

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
    def select(self, options: StartupOptions | None = None) -> Selection:
        """Load-time selection of graphs; see selection.py."""
        return select(self, options or StartupOptions())
