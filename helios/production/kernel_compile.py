"""Compiling launch plans' Triton kernels at startup, many at once (device side).

Triton compiles a kernel specialization the first time a launch needs it, on the launching thread:
run one by one, the first eager pass of every plan compiled each specialization in turn.
`compile_plans` compiles them all at once instead, in four steps:

  discover  each plan runs once (a sampling plan once in each form, with and without the sampler's
            rank stage) with Triton's `jit_cache_hook` answering "handled": a Triton launch
            that would compile records its JIT function and specialization and launches nothing;
            the plan's torch calls run on the plan's tensors (what they compute is never used);
  prefill   worker processes forked from this one (they inherit every JIT function, no import
            needed, and make no CUDA call) compile the specializations into Triton's disk cache,
            one process per core: a compile holds the GIL for much of its time (the Python code
            generator), so threads alone overlap it poorly;
  compile   every specialization is compiled into this process's in-memory cache on a thread pool
            under Triton's `AsyncCompileMode`, through `JITFunction.preload` of the recorded
            specialization: the same kernel, under the same cache key, that the launch would have
            compiled, read from the disk cache where the prefill (or an earlier start) put it;
  load      every compiled kernel is made ready for its first launch on the same thread pool (its
            module loaded onto the device, its launcher built: what Triton otherwise does at the
            first launch, one kernel after another on the launching thread).

A load's specializations are recorded in Triton's cache directory by the load's identity
(`SETS_DIR`, one JSON file: each specialization's JIT function by module and name, its cache key and
serialized data; the identity digests what decides them: the selected programs, the manifest, the
load's options, the product decisions already known, Helios's source, the Triton and torch versions
and the device). A later load of the same identity reads the list instead of discovering it (about
1.6 s of a warm start of the 28-layer shape on an H100). A record that names a kernel the plans no
longer launch costs a compile; one that misses a kernel leaves it to compile at the warm-up run,
inside startup, and the caller then forgets the record (`forget_record`), so the next
load discovers again. Beside it (`PRODUCTS_DIR`) the load records the product decisions it timed
(lowering/product_choice.py): a later load of the same identity takes them instead of timing again.
And (`LOADS_DIR`) the device memory its plans needed (`LoadMemory`): with the three records a later load
of the identity compiles the recorded set before lowering anything (`compile_recorded`) and lowers
its plans once, over the final cache (native_model.py, the warm start).

A set of specializations compiled once is recorded in Triton's cache directory (`RECORDS_DIR`, an
empty file named by the set's digest: kernel sources, cache keys, Triton version, device
architecture): a later start that discovers the same set skips the forked prefill, since the disk
cache already holds every kernel and the in-process compile reads them (the workers would only
load them once more, after forking a large process; what that cost a warm start is not measured yet).

The caller then runs each plan once as before (the kernels phase of `NativeModel.load`): every
launch finds its kernel compiled, and one that did not would compile there, so the kernels are
exactly those of the sequential path and nothing compiles after startup that did not before. The
prefill only saves time: a worker that fails leaves its kernel to the compile step, which raises
the compiler's own error if there is one. `compiled_kernels()` counts the specializations this
process holds compiled (exported on /metrics as `helios_kernels_compiled_total`): after startup,
serving compiles none. Measured on an H200 (the 28-layer, hidden-1024 shape of
BENCHMARKS.md, 52 specializations, empty caches): the kernels phase took 16.2 s compiling at each
launch, 12.4 s with the thread pool alone, 10.2 s with the prefill (discover 1.9 s, prefill 1.9 s,
compile 0.6 s; the warm-up run after them took the other 5.8 s, against 0.5 s with warm caches: most
likely loading the kernels and building their launchers at the first launch, not yet overlapped). On a
CPU (Triton's interpreter) nothing compiles: `compile_plans` does nothing there.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
import logging
import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import repeat
from pathlib import Path

import torch

from helios.production.plan import LaunchPlan


@dataclass(frozen=True, slots=True)
class Specialization:
    """One kernel specialization a plan's launch needs."""

    function: object  # the triton JITFunction
    key: str  # Triton's in-memory cache key of the specialization
    data: str  # Triton's serialized specialization (JITFunction.preload's input)

    def __post_init__(self) -> None:
        if not self.key or not self.data:
            raise ValueError(f"specialization of {self.function!r} without its key or data")


_log = logging.getLogger(__name__)
PREFILL_TIMEOUT_S = 120.0  # all forked compiles together; a 28-layer, hidden-1024 core needs about 2 s on 16 cores
_FORKED: list[Specialization] = []  # NOTE: what forked prefill workers inherit; set only while they run


SETS_DIR = "helios-specializations"  # in Triton's cache directory: a load's specializations by its identity
PRODUCTS_DIR = "helios-products"  # ... and the product decisions it measured
LOADS_DIR = "helios-loads"  # ... and the device memory its plans needed (LoadMemory)


def _cache_directory() -> Path | None:
    """Triton's cache directory (None in a Triton without one)."""
    from triton import knobs

    directory = getattr(getattr(knobs, "cache", None), "dir", None)  # NOTE: None in a Triton without it
    return Path(directory) if directory else None


@functools.cache
def source_digest() -> str:
    """A digest of Helios's Python source (every module of the package): what lowers and launches."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def specializations_record(identity: str) -> Path | None:
    """Where the specializations of a load of `identity` are recorded (None without a Triton cache)."""
    directory = _cache_directory()
    return directory / SETS_DIR / f"{identity}.json" if directory else None


def products_record(identity: str) -> Path | None:
    """Where the product decisions a load of `identity` measured are recorded, beside its
    specializations (lowering/product_choice.py `save_decisions`; None without a Triton cache)."""
    directory = _cache_directory()
    return directory / PRODUCTS_DIR / f"{identity}.json" if directory else None


def load_record(identity: str) -> Path | None:
    """Where a load of `identity` records the device memory its plans need beyond their buffers
    (`LoadMemory`), beside its specializations: a later load of it takes that instead of running
    its plans to measure it (helios/production/native_model.py, the warm start). None without a
    Triton cache."""
    directory = _cache_directory()
    return directory / LOADS_DIR / f"{identity}.json" if directory else None


@dataclass(frozen=True, slots=True)
class LoadMemory:
    """What a load's kernels phase measured on the device, in bytes: the transient memory its plans'
    runs need (the allocator's peak above what stays allocated), and what the phase left reserved
    (scratch, samplers, workspaces, the allocator's cached blocks) that the cache is sized after."""

    transient: int
    kept: int


def save_load_record(record: Path | None, memory: LoadMemory) -> bool:
    """Records a load's measured memory at `record`; False where it cannot be."""
    return record is not None and write_record(record, {"transient_bytes": int(memory.transient),
                                                        "kept_bytes": int(memory.kept)})


def recorded_load_memory(record: Path | None) -> LoadMemory | None:
    """The memory recorded at `record`; None where there is none or it cannot be read."""
    if record is None or not record.exists():
        return None
    try:
        entry = json.loads(record.read_text())
        values = (entry["transient_bytes"], entry["kept_bytes"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        _log.info("load record %s not used (%s)", record.name, error)
        return None
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
        return None
    return LoadMemory(*values)


def _function_name(function: object) -> tuple[str, str] | None:
    """(module, name) that import back to `function`, or None (a JIT function defined in a function)."""
    fn = getattr(function, "fn", None)
    module, name = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not module or not name or "." in name:
        return None
    return module, name


def save_specializations(record: Path | None, specializations: list[Specialization]) -> bool:
    """Records `specializations` at `record` (written whole or not at all); False where it cannot be
    (no cache directory, a function that cannot be imported back, a read-only cache)."""
    if record is None:
        return False
    entries = []
    for item in specializations:
        name = _function_name(item.function)
        if name is None:
            return False
        entries.append({"module": name[0], "name": name[1], "key": item.key, "data": item.data})
    return write_record(record, entries)


def write_record(record: Path, entries: object) -> bool:
    """Writes `entries` as JSON at `record`, whole or not at all (a concurrent load reads the old
    record or the new one, never a part); False where it cannot (a read-only cache)."""
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        partial = record.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps(entries))
        partial.replace(record)
    except OSError as error:
        _log.info("%s not recorded (%s)", record.name, error)
        return False
    return True


def recorded_specializations(record: Path | None) -> list[Specialization] | None:
    """The specializations recorded at `record`, their JIT functions imported; None where there is no
    record or it cannot be read back (malformed, a function no longer there)."""
    if record is None or not record.exists():
        return None
    from triton.runtime.jit import JITFunction

    try:
        entries = json.loads(record.read_text())
        out = []
        for entry in entries:
            function = getattr(importlib.import_module(entry["module"]), entry["name"])
            if not isinstance(function, JITFunction):
                raise TypeError(f"{entry['module']}.{entry['name']} is not a Triton JIT function")
            out.append(Specialization(function, entry["key"], entry["data"]))
        return out
    except (OSError, ValueError, KeyError, TypeError, AttributeError, ImportError) as error:
        _log.info("kernel specializations record %s not used (%s)", record.name, error)
        return None


def forget_record(record: Path | None) -> None:
    """Removes a record of this module found incomplete or unusable (a specializations record,
    `load_record`; best effort)."""
    if record is not None:
        record.unlink(missing_ok=True)


def compiled_kernels() -> int:
    """Triton kernel specializations this process holds compiled for the production kernels: the
    entries of the in-memory kernel cache, on every device, of every JIT function the modules of
    `helios.production.kernels` define (a launch that compiles adds one). 0 on a CPU, where Triton
    interprets and compiles nothing."""
    return sum(len(cache) for cache in _kernel_caches())


def _kernel_caches() -> list[dict]:
    """The in-memory kernel cache (cache key -> compiled kernel) of every JIT function the modules of
    `helios.production.kernels` define, on every device."""
    from triton.runtime.jit import JITFunction

    functions: dict[int, JITFunction] = {}
    for name, module in list(sys.modules.items()):
        if name.startswith("helios.production.kernels.") and module is not None:
            for value in vars(module).values():
                if isinstance(value, JITFunction):
                    functions.setdefault(id(value), value)
    # NOTE: each device's cache entry is a tuple whose first item is the kernel cache (key -> kernel)
    return [caches[0] for function in functions.values() for caches in function.device_caches.values()]


@contextmanager
def _as_in_a_fresh_process() -> Iterator[None]:
    """Every production kernel's in-memory cache emptied for the duration and given back afterwards:
    discovery then meets each specialization the plans launch as a fresh process would, including
    those this process already compiled for another load (Triton asks its cache hook only on a miss,
    so a record discovered beside them would miss them, and a later process would compile them at a
    launch)."""
    caches = _kernel_caches()
    held = [dict(cache) for cache in caches]
    for cache in caches:
        cache.clear()
    try:
        yield
    finally:
        for cache, entries in zip(caches, held, strict=True):
            cache.update(entries)


def default_compile_threads() -> int:
    """One compiling thread per usable core, at most 32."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(32, cpus))


def discover(plans: Iterable[LaunchPlan], extra: Iterable[Callable[[], None]] = ()) -> list[Specialization]:
    """The distinct specializations that running `plans` (and the `extra` runs: the product
    candidates a deferred policy will time) would compile, in first-launch order.

    Runs each plan once with compilation intercepted and every production kernel's in-memory cache
    hidden (`_as_in_a_fresh_process`): no kernel launches, and each specialization is met as a fresh
    process meets it.
    NOTE: Triton's hook is process-wide: no other thread may launch Triton kernels meanwhile (at
    startup none does).
    """
    from triton import knobs

    found: dict[tuple[int, str], Specialization] = {}

    def record(*, key, fn, compile, **_) -> bool:
        function = fn.jit_function
        found.setdefault((id(function), key), Specialization(function, key, compile["specialization_data"]))
        return True  # NOTE: "handled": Triton returns without compiling or launching

    previous = knobs.runtime.jit_cache_hook
    knobs.runtime.jit_cache_hook = record
    try:
        with _as_in_a_fresh_process():
            for plan in plans:
                for form in plan.forms():  # a sampling plan's other forms (captured too)
                    plan.run(rank_form=form)
            for run in extra:
                run()
    finally:
        knobs.runtime.jit_cache_hook = previous
    return list(found.values())


def compile_specializations(specializations: list[Specialization], threads: int | None = None) -> None:
    """Compiles each specialization into its JIT function's cache, `threads` at a time."""
    from triton.runtime._async_compile import AsyncCompileMode

    threads = default_compile_threads() if threads is None else threads
    if threads <= 1 or len(specializations) < 2:
        for item in specializations:
            item.function.preload(item.data)
        return
    with ThreadPoolExecutor(min(threads, len(specializations)), thread_name_prefix="helios-compile") as pool:
        with AsyncCompileMode(pool):
            for item in specializations:
                item.function.preload(item.data)  # NOTE: submits the compile; the mode's exit awaits all


def load_kernels(specializations: list[Specialization], device_index: int, threads: int | None = None) -> int:
    """Prepares each compiled specialization for its first launch, `threads` at a time: Triton does
    that lazily at the launch (the kernel's module loaded onto the device and its launcher built,
    a C extension compiled per argument signature where the Triton version has one, kept in the disk
    cache), one by one on the launching thread. Returns how many were prepared here (0 where this
    Triton has no such step)."""
    from triton.runtime._async_compile import FutureKernel

    kernels = []
    for item in specializations:
        caches = item.function.device_caches.get(device_index)
        kernel = caches[0].get(item.key) if caches else None
        if isinstance(kernel, FutureKernel):
            kernel = kernel.result()
        if kernel is not None and callable(getattr(kernel, "_init_handles", None)):  # NOTE: private, lazy init
            kernels.append(kernel)
    threads = default_compile_threads() if threads is None else threads

    def prepare(kernel) -> None:
        with torch.cuda.device(device_index):
            kernel._init_handles()

    if threads <= 1 or len(kernels) < 2:
        for kernel in kernels:
            prepare(kernel)
    else:
        with ThreadPoolExecutor(min(threads, len(kernels)), thread_name_prefix="helios-load") as pool:
            list(pool.map(prepare, kernels))
    return len(kernels)


def _pin_device(device_index: int) -> None:
    """Answers Triton's current-device question in a forked worker without asking CUDA."""
    from triton.runtime import driver

    # NOTE: CUDA cannot be used in a process forked after CUDA started; preload asks the driver
    # only for the current device's index, the key of the JIT function's (inherited) caches.
    driver.active.get_current_device = lambda: device_index


def _compile_forked(index: int, device_index: int) -> str | None:
    """In a forked prefill worker: compiles one specialization into Triton's disk cache."""
    item = _FORKED[index]
    try:
        _pin_device(device_index)
        item.function.preload(item.data)
    except Exception as error:  # NOTE: the compile step meets it again and raises it there
        return f"{item.key[:80]}: {type(error).__name__}: {error}"
    return None


def prefill_disk_cache(specializations: list[Specialization], device_index: int, processes: int) -> int:
    """Compiles `specializations` in `processes` forked workers into Triton's disk cache; returns
    how many failed there (0 where fork is unavailable: nothing is done). Workers that have not all
    finished within `PREFILL_TIMEOUT_S` (a worker that died or hung: the process was forked with
    other threads running) are killed, and every specialization is left to the in-process compile."""
    global _FORKED
    if processes < 2 or len(specializations) < 2 or sys.platform != "linux":
        return 0
    _FORKED = specializations
    pool = None
    try:
        pool = multiprocessing.get_context("fork").Pool(min(processes, len(specializations)))
        jobs = pool.starmap_async(_compile_forked, zip(range(len(specializations)), repeat(device_index)))
        failures = [f for f in jobs.get(timeout=PREFILL_TIMEOUT_S) if f]
    except multiprocessing.TimeoutError:
        _log.warning("kernel prefill workers did not finish in %.0f s; compiling in this process instead",
                     PREFILL_TIMEOUT_S)
        return len(specializations)
    except OSError as error:
        _log.warning("kernel prefill workers failed (%s); compiling in this process instead", error)
        return len(specializations)
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()
        _FORKED = []
    for failure in failures:
        _log.warning("kernel prefill: %s (compiled again in this process)", failure)
    return len(failures)


RECORDS_DIR = "helios-prefilled"  # in Triton's cache directory: one empty file a specialization set


def specialization_digest(specializations: Iterable[Specialization], platform: str) -> str:
    """A digest of a set of specializations (each kernel's source hash and cache key) on `platform`
    (the Triton version and the device's architecture): equal sets, in any order, digest alike."""
    digest = hashlib.sha256(platform.encode())
    for entry in sorted(f"{getattr(item.function, 'cache_key', '')}:{item.key}" for item in specializations):
        digest.update(entry.encode() + b"\n")
    return digest.hexdigest()


def prefill_record(digest: str) -> Path | None:
    """Where a compile of the specialization set `digest` is recorded: Triton's cache directory
    (None when it has none), so emptying that cache forgets the records with the kernels."""
    directory = _cache_directory()
    return directory / RECORDS_DIR / digest if directory else None


def prefill_unless_recorded(specializations: list[Specialization], device_index: int, processes: int,
                            record: Path | None) -> int | None:
    """`prefill_disk_cache` unless `record` says this very set was compiled before (the disk cache
    then holds every kernel: the in-process compile reads them, and forking workers would only load
    them twice); returns the prefill's failures, None where it was skipped. A record that lies (the
    cache emptied by hand, another cache manager) costs time, never correctness: the in-process
    compile compiles whatever it does not find."""
    if record is not None and record.exists():
        return None
    return prefill_disk_cache(specializations, device_index, processes)


def record_compiled(record: Path | None) -> None:
    """Note that the set `record` names is compiled into the disk cache (best effort)."""
    if record is None:
        return
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        record.touch()
    except OSError as error:  # a read-only cache: the next start prefills again
        _log.info("kernel prefill record not written (%s)", error)


@dataclass(frozen=True, slots=True)
class CompiledPlans:
    """What `compile_plans` did: how many specializations it compiled, and the record it read them
    from (None where it discovered them)."""

    count: int
    record: Path | None = None


def compile_plans(plans: Iterable[LaunchPlan], device: torch.device, threads: int | None = None,
                  extra: Iterable[Callable[[], None]] = (), identity: str | None = None) -> CompiledPlans:
    """Compiles every Triton kernel specialization `plans` (and the `extra` runs) launch,
    concurrently (nothing on a CPU, where Triton interprets). `threads` bounds both the prefill
    processes and the compiling threads (default `default_compile_threads()`; 1: one by one). With
    `identity` (what decides the load's specializations; module docstring) they are read from its
    record where there is one, and recorded where they were discovered."""
    compiled = _compile(list(plans), device, threads, list(extra), identity)
    assert compiled is not None  # with plans to discover, never None
    return compiled


def compile_recorded(identity: str, device: torch.device, threads: int | None = None) -> CompiledPlans | None:
    """`compile_plans` from the record of `identity` alone, before any plan is lowered (a warm start:
    helios/production/native_model.py); None where there is no usable record (nothing was compiled
    from it, and a record that failed to compile is forgotten)."""
    return _compile(None, device, threads, [], identity)


def _compile(plans: list[LaunchPlan] | None, device: torch.device, threads: int | None,
             extra: list[Callable[[], None]], identity: str | None) -> CompiledPlans | None:
    if device.type != "cuda":
        return CompiledPlans(0)
    threads = default_compile_threads() if threads is None else threads
    with torch.cuda.device(device):
        start = time.perf_counter()
        record = specializations_record(identity) if identity else None
        specializations = recorded_specializations(record)
        if specializations is None:
            if plans is None:
                return None
            specializations = discover(plans, extra)
            save_specializations(record, specializations)
            used = None
        else:
            used = record
        discovered = time.perf_counter()
        index = torch.cuda.current_device()
        import triton

        capability = torch.cuda.get_device_capability(index)
        prefilled_record = prefill_record(specialization_digest(specializations,
                                                                f"triton {triton.__version__} sm {capability}"))
        failed = prefill_unless_recorded(specializations, index, threads, prefilled_record)
        prefilled = time.perf_counter()
        try:
            compile_specializations(specializations, threads)
        except Exception as error:
            if used is None:
                raise
            _log.warning("recorded kernel specializations did not compile (%s); discovering them again", error)
            forget_record(used)
            return None if plans is None else _compile(plans, device, threads, extra, identity)
        compiled = time.perf_counter()
        loaded = load_kernels(specializations, index, threads)
        if not failed:
            record_compiled(prefilled_record)
    _log.info("%d kernel specializations: %s in %.2f s, %s, compiled in this process in %.2f s, "
              "%d loaded for their first launch in %.2f s",
              len(specializations), "discovered" if used is None else "read from their record", discovered - start,
              "no prefill (compiled before)" if failed is None else
              f"prefilled by {min(threads, len(specializations)) if len(specializations) > 1 and threads > 1 else 0} "
              f"processes in {prefilled - discovered:.2f} s ({failed} failed there)", compiled - prefilled,
              loaded, time.perf_counter() - compiled)
    return CompiledPlans(len(specializations), used)
