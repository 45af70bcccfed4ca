"""Startup tuning conformance (host side): both runtimes' TUNED buffers after load, compared.

    cases = tuned_buffer_cases(core, device="cpu", dtype="f32")   # one case per TUNED buffer

A core with a tuning catalog is loaded once by each runtime (one page of cache: the producers read
no cache) and every TUNED buffer its producers filled is compared: an FP32 buffer byte for byte
(a producer's result is the same IEEE arithmetic in both runtimes, so any difference is a fault),
a buffer of another dtype within that dtype's per-element tolerance (`conformance.tolerance`).
A case "tuning/<buffer>" passes or carries its first differing element. Run with the trace level
(`conformance.runner`); a core without a tuning catalog has no case.
"""

from __future__ import annotations

import numpy as np

from conformance.report import CaseResult, Divergence
from conformance.tolerance import first_mismatch, tolerance
from helios.core.source import CoreSource
from helios.proto import manifest_pb2

__all__ = ["tuned_buffer_cases"]


def tuned_buffer_cases(core: CoreSource, *, device: str, dtype: str, gpu_paths: bool = False
                       ) -> tuple[CaseResult, ...]:
    """One case per TUNED buffer the producers of `core` fill (see the module docstring)."""
    if not core.manifest.tuning_catalog:
        return ()
    from helios.production.gpu_paths import GpuPaths
    from helios.production.native_model import LoadOptions, NativeModel
    from helios.reference.executor import ReferenceExecutor

    reference = ReferenceExecutor.load(core, pages=1)
    native = NativeModel.load(core, LoadOptions(device=device, pages=1, cuda_graphs=False,
                                                gpu_paths=GpuPaths() if gpu_paths else None))
    descriptors = {b.name: b for b in core.manifest.buffers}
    cases = []
    for name in reference.tuned:
        case = f"tuning/{name}"
        expected = reference.buffers[name]
        tensor = native.executor.buffers[name]
        found = (tensor.float() if tensor.is_floating_point() else tensor).cpu().numpy()
        exact = descriptors[name].dtype == manifest_pb2.DTYPE_F32 or not np.issubdtype(expected.dtype, np.floating)
        found = found.astype(expected.dtype)
        if exact:
            index = first_mismatch(_bits(expected), _bits(found), None)
        else:
            index = first_mismatch(expected, found, tolerance(dtype).relative)
        if index is None:
            cases.append(CaseResult(case, "pass"))
            continue
        where = f"{name}[{', '.join(map(str, index))}]"
        cases.append(CaseResult(case, "divergence", Divergence(
            case, where, float(expected[index]) if index else None, float(found[index]) if index else None,
            detail="byte-equal FP32 expected" if exact else f"outside the {dtype} tolerance")))
    return tuple(cases)


def _bits(array: np.ndarray) -> np.ndarray:
    """An FP32 array's bit patterns (so that byte-equal is what "equal" means, NaN and -0.0 included)."""
    return array.view(np.uint32) if array.dtype == np.float32 else array
