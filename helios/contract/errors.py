"""Contract rejection errors (host side): one class per violated rule of the specification.

Every error carries the field path it concerns (`graphs[3].value_bindings[2].source`) and says what
is wrong; `str(error)` is the one line `helios contract check` prints.
"""

from __future__ import annotations

from helios.errors import HeliosError


class ContractError(HeliosError):
    """A prepared contract violates a rule; `path` names the offending field."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.detail = message


class InvalidIdentity(ContractError):
    """The served identifier, an alias or the cache identity is empty."""


class InvalidDefaults(ContractError):
    """A serving default is out of the range a request value may take."""


class UnsupportedContractVersion(ContractError):
    """ModelContract.version is not 1, 2 or 3."""


class UnspecifiedEnum(ContractError):
    """An enum field holds its unspecified zero value, which cannot select an implementation."""


class UnknownEnumValue(ContractError):
    """An enum field holds a number this runtime does not know (parser, image, source, …)."""


class UnknownJsonField(ContractError):
    """The semantic JSON form names a field the schema does not have (or is otherwise malformed)."""


class UnknownWireField(ContractError):
    """The binary contract or manifest carries a field number the schema does not have."""


class UnknownGraph(ContractError):
    """A graph name has no handle in the execution catalog."""


class MissingGraphContract(ContractError):
    """The execution catalog holds a graph no GraphContract describes."""


class DuplicateName(ContractError):
    """A graph, buffer or producer name is declared twice."""


class MissingGraphVariant(ContractError):
    """A declared capacity or width (or an operation serving needs) has no captured graph."""


class OperationMismatch(ContractError):
    """A GraphContract's operation disagrees with its execution-catalog handle."""


class CapacityMismatch(ContractError):
    """Declared capacities are zero or disagree between contract, descriptor and catalog."""


class UnregisteredDestination(ContractError):
    """A value binding names a destination that is not a registered transport buffer."""


class UnknownBuffer(ContractError):
    """A state view, cache plane, page-table view or completion slot names an unknown buffer."""


class UnknownHistory(ContractError):
    """A completion cursor names a history region the cache contract does not declare."""


class SpeculativeDescriptorMismatch(ContractError):
    """A speculative descriptor is missing on a SPECULATIVE graph, or present on another operation."""


class LengthSourceCount(ContractError):
    """A speculative program binds other than exactly one length source."""


class LaneLimitExceeded(ContractError):
    """A lane limit exceeds min(D + 1, W)."""


class ConfidenceWidthMismatch(ContractError):
    """confidence_width is set but differs from the program's actual draft draws D."""


class CopiedProposalBinding(ContractError):
    """A copied-proposal input is bound outside a SPECULATIVE graph that draws proposals, per-position
    grammar masks without the copied proposals they mask, or masks not shaped [B, W, mask_words] i32."""


class ConfidenceStorageInvalid(ContractError):
    """proposal_confidence is not contiguous FP32 [2, request_slots, draft_capacity] covering every width."""


class UnknownProducer(ContractError):
    """A tuned binding names a producer missing from the tuning catalog."""


class TunedDescriptorMismatch(ContractError):
    """A tuned binding does not match its physical execution descriptor exactly."""


class TunedOutputOverlap(ContractError):
    """A tuned producer's output overlaps request inputs, writable graph state or cache storage."""


class FieldNotInVersion(ContractError):
    """A field is set that the declared contract version does not have."""


class StateViewOutOfBounds(ContractError):
    """A state view reaches outside its buffer, or addresses a buffer that is not persistent."""


class PendingTokenOwnership(ContractError):
    """A graph declares its pending token both device-owned (state view) and host-owned (binding)."""


class InvalidEngramTable(ContractError):
    """An Engram table declaration is inconsistent (orders, multipliers, staging, row index, graphs)."""


class InvalidGeometry(ContractError):
    """Vocabulary, histogram, mask, cache or vision geometry is inconsistent."""


class IncompatibleFrontend(ContractError):
    """Frontend implementations are paired in a way the specification forbids."""


class TerminalMarkerMismatch(ContractError):
    """The reasoning terminal marker is not the declared tool syntax's opener."""


class InvalidCompletionLayout(ContractError):
    """The completion record layout is incomplete, duplicated or names non-completion buffers."""


class UnknownResource(ContractError):
    """A graph depends on a resource the core does not hold."""


class InvalidSelection(ContractError):
    """A startup option asks for more than the contract prepared, or for an unsupported combination."""


class HistoryDraftingUnsupported(InvalidSelection):
    """History drafting needs learned speculation and copied-token inputs in each selected wider graph."""
