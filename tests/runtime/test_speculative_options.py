"""Startup options of learned speculation: the width decoding uses, and one-line refusals."""

from __future__ import annotations

import pytest

from helios.runtime.limits import AdmissionLimits
from helios.runtime.options import InvalidRuntimeOptions, RuntimeOptions, speculative_width

LIMITS = AdmissionLimits(max_active=2, queue_capacity=2)


def _options(**kw):
    return RuntimeOptions(LIMITS, **kw)


def test_the_widest_captured_width_is_the_default_and_no_speculation_disables_it():
    assert speculative_width((2, 4), _options()) == 4
    assert speculative_width((2, 4), _options(speculative_width=2)) == 2
    assert speculative_width((2, 4), _options(speculation=False)) is None
    assert speculative_width((2, 4), _options(speculative_width=1)) is None  # width 1: plain decoding
    assert speculative_width((), _options()) is None  # a core without a draft


@pytest.mark.parametrize("width, message", [
    (8, "--speculative-width 8 exceeds the core's widest captured width 4 \\(captured: 2, 4\\)"),
    (3, "--speculative-width 3 was not captured by the core \\(captured: 2, 4\\)"),
])
def test_a_width_the_core_cannot_serve_is_one_line(width, message):
    with pytest.raises(InvalidRuntimeOptions, match=message):
        speculative_width((2, 4), _options(speculative_width=width))


def test_width_options_need_a_draft_and_exclude_no_speculation():
    with pytest.raises(InvalidRuntimeOptions, match="captured no speculative programs"):
        speculative_width((), _options(speculative_width=4))
    with pytest.raises(InvalidRuntimeOptions, match="exclude each other"):
        _options(speculative_width=2, speculation=False)


def test_a_shifted_page_table_view_fails_load_in_one_line(tiny_checkpoint):
    """Packing never applies a page offset, so a core declaring one must not load (never a field
    decoded and ignored)."""
    from helios.ignition.prepare import PreparationOptions, prepare_checkpoint
    from helios.reference.engine import ReferenceEngine
    from helios.runtime.packing import ShiftedPageTableView

    core = prepare_checkpoint(tiny_checkpoint("qwen2"), PreparationOptions(dtype="fp32", batch_capacities=(1,),
                                                                            prefill_capacities=(8,), context_tokens=32))
    core.contract.model.cache.page_table_views[0].page_offset = 1
    with pytest.raises(ShiftedPageTableView, match=r"page_table_views\[0\]\.page_offset = 1 .*not supported"):
        ReferenceEngine.load(core)


@pytest.fixture(scope="module")
def plain_core(tiny_checkpoint):
    from helios.ignition.prepare import PreparationOptions, prepare_checkpoint

    return prepare_checkpoint(tiny_checkpoint("qwen2"), PreparationOptions(dtype="fp32", batch_capacities=(1,),
                                                                           prefill_capacities=(8,), context_tokens=32))


@pytest.mark.parametrize("kind", ["HISTORY_KIND_RECURRENT", "HISTORY_KIND_PAGED_LATENT", "HISTORY_KIND_CONTINUATION"])
@pytest.mark.parametrize("runtime", ["reference", "production"])
def test_a_history_kind_the_runtimes_cannot_serve_fails_load_in_one_line(plain_core, kind, runtime):
    """A region no operator or cache of this runtime serves (its state would be silently ignored)
    fails load naming the region, in both runtimes, before any program is lowered. (PAGED_LATENT,
    RECURRENT and CONTINUATION regions are served only as declared by docs/latent.md, docs/recurrent.md
    and docs/snapshots.md; these extra ones, one STATE plane on a core whose graphs keep no state rows,
    are not.)"""
    from helios.ignition.prepare import PreparedCore
    from helios.proto import contract_pb2, manifest_pb2
    from helios.runtime.packing import UnservedHistoryKind

    contract, manifest = contract_pb2.ServingContract(), manifest_pb2.ExecutionManifest()
    contract.CopyFrom(plain_core.contract)
    manifest.CopyFrom(plain_core.manifest)
    manifest.buffers.add(name="extra_state", role=manifest_pb2.BUFFER_ROLE_STATE, dtype=manifest_pb2.DTYPE_F32,
                         shape=[1, 16])
    contract.model.cache.histories.append(contract_pb2.HistoryRegion(
        name="extra", kind=getattr(contract_pb2, kind), planes=["extra_state"],
        tokens_per_record=1 if kind == "HISTORY_KIND_PAGED_LATENT" else 0))
    core = PreparedCore(contract, manifest, plain_core.resource_list)
    index = len(contract.model.cache.histories) - 1
    message = (rf"model\.cache\.histories\[{index}\] \('extra'\): {kind.removeprefix('HISTORY_KIND_')} histories "
               "are not served")
    _refused_in_one_line(core, runtime, UnservedHistoryKind, message)


def test_the_command_lines_width_is_fixed_auto_or_off():
    from helios.runtime.options import adaptive, speculation_choice

    assert speculation_choice(None, False) == speculation_choice("auto", False) == {"adaptive_speculation": True}
    assert speculation_choice("2", False) == {"speculative_width": 2}
    assert speculation_choice(None, True) == {"speculation": False}
    for width in ("auto", "4"):
        with pytest.raises(InvalidRuntimeOptions, match="exclude each other"):
            speculation_choice(width, True)
    with pytest.raises(InvalidRuntimeOptions, match="a width >= 1 or 'auto', got 'wide'"):
        speculation_choice("wide", False)
    with pytest.raises(InvalidRuntimeOptions, match="one width or 'auto'"):
        _options(speculative_width=2, adaptive_speculation=True)
    auto = _options(adaptive_speculation=True)
    assert adaptive((2, 4), auto) and speculative_width((2, 4), auto) == 4  # the widest: its fallback
    assert not adaptive((), auto) and not adaptive((1,), auto)  # nothing wider than one token to choose
    assert not adaptive((2, 4), _options())


@pytest.mark.parametrize("runtime", ["reference", "production"])
def test_a_paged_region_compressing_tokens_per_record_fails_load_in_one_line(plain_core, runtime):
    """The paged operators keep one record per token: a key/value region declaring another compression
    ratio would be served with the wrong page accounting, so both runtimes refuse it, naming it."""
    from helios.ignition.prepare import PreparedCore
    from helios.proto import contract_pb2
    from helios.runtime.packing import UnservedHistoryKind

    contract = contract_pb2.ServingContract()
    contract.CopyFrom(plain_core.contract)
    contract.model.cache.histories[0].tokens_per_record = 4
    core = PreparedCore(contract, plain_core.manifest, plain_core.resource_list)
    message = r"model\.cache\.histories\[0\] \('layer0'\): PAGED_KEY_VALUE histories with tokens_per_record = 4"
    _refused_in_one_line(core, runtime, UnservedHistoryKind, message)


@pytest.mark.parametrize("field", ["vision", "image_sentinels"])
@pytest.mark.parametrize("runtime", ["reference", "production"])
def test_a_core_declaring_image_inputs_without_an_encoder_fails_load_in_one_line(plain_core, field, runtime):
    """Images are encoded in PREFILL rounds: a core declaring feature slots or image sentinels whose
    PREFILL graphs bind no image tensor must not load in either runtime, never with its images
    decoded and ignored."""
    from helios.ignition.prepare import PreparedCore
    from helios.proto import contract_pb2
    from helios.runtime.packing import UnservedVision

    contract = contract_pb2.ServingContract()
    contract.CopyFrom(plain_core.contract)
    if field == "vision":
        contract.model.vision.feature_slots = 2
        contract.model.vision.patch_capacities.append(576)
    else:
        vocabulary = contract.model.input_vocabulary
        vocabulary.input_tokens = contract.model.vocabulary.sampled_tokens + 1  # one nonsampled id
        vocabulary.image_sentinels.append(contract.model.vocabulary.sampled_tokens)
    message = r"model\.graphs\[\d+\] \(prefill_p\d+\): a vision core's PREFILL graph binds no IMAGE_TENSOR"
    core = PreparedCore(contract, plain_core.manifest, plain_core.resource_list)
    _refused_in_one_line(core, runtime, UnservedVision, message)


def _refused_in_one_line(core, runtime: str, error: type[Exception], message: str) -> None:
    """Loading `core` on `runtime` ("reference" or "production") raises `error` matching `message`, one line."""
    if runtime == "reference":
        from helios.reference.engine import ReferenceEngine

        with pytest.raises(error, match=message) as caught:
            ReferenceEngine.load(core)
    else:
        from helios.production.native_model import LoadOptions, NativeModel

        with pytest.raises(error, match=message) as caught:
            NativeModel.load(core, LoadOptions(device="cpu"))
    assert "\n" not in str(caught.value)
