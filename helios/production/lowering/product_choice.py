"""Path choice for skinny matrix products (device side): Triton GEMV kernels or torch (cuBLAS), per shape.

The lowering asks a `LinearPolicy` once per distinct product shape it lowers (`ProductShape`: rows,
output columns of each group, K, dtypes, biases, and the fusion: one matmul, several matmuls of one
input, gate/up with the activation, or logits; or one of those products with the residual add and
RMS norm before it in its prologue, where "triton" is the one fused launch and "torch" the norm
kernel followed by the product's own Triton launch; or a group of torch products the Triton kernels
do not take, where "triton" runs them side by side on streams of their own and "torch" one after
another, lowering/linear.py `stream_fusion`). It is a lowering decision of this runtime, and
not the specification's startup tuning (the manifest's tuning producers filling TUNED buffers: the
"tuning" phase of `NativeModel.load`). Policies:

  MeasuredPolicy  (CUDA default) times both paths once and takes the faster; decisions are cached
                  per process and device, so a shape lowered again (every layer, every reload of the
                  plans) is not timed again;
  FixedPolicy     always one path: "torch" is the CPU default (torch's matrix products are faster
                  there than the Triton interpreter), "triton" is what CPU tests inject to run the
                  Triton kernels and the fused lowering, and what "auto" means in the GPU-paths mode
                  (helios/production/gpu_paths.py) on every device.

Each policy keeps the table of the decisions it handed out (`decisions`) for `NativeModel` to report.

A deferred MeasuredPolicy answers "triton" for a shape it has not measured and keeps its candidates:
`NativeModel.load` lowers every plan twice (a warm pass that compiles the Triton kernels, many at
once, then the final pass), so the warm pass names every Triton specialization the products can use,
`measure_pending()` times them once they are compiled, and the final pass reads the decisions. Timing
while lowering would compile each specialization on its own, one after another. A load records the
decisions it timed (`save_decisions`) under its identity beside its kernel specializations
(helios/production/kernel_compile.py): a later load of the same identity (the same core, options,
Helios source, versions and device) takes them (`adopt`) instead of timing again; a warm start,
which lowers every plan once, gives them before lowering (`preload`): the lowering asks for a shape
and gets its recorded decision, not the provisional answer.

Timing (`GraphTimer`): each candidate is captured `calls` times into one CUDA graph, each call
preceded by a write over twice the L2 cache so weights come from HBM as they do in a decode step;
the graph of the L2 writes alone is timed too and subtracted. Replays are timed with CUDA events.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from helios.errors import HeliosError

PATHS = ("triton", "torch")
PRODUCTS = ("matmul", "matmul*2", "matmul*3", "gate_up+activation")
# the products with the residual add and RMS norm (or the norm alone) in their prologue
NORM_FUSIONS = tuple(prefix + product for prefix in ("add+rms_norm+", "rms_norm+") for product in PRODUCTS)
# the groups whose torch products run side by side on streams of their own
STREAMS = "streams:"
STREAM_FUSIONS = tuple(STREAMS + product for product in PRODUCTS[1:])
FUSIONS = (*PRODUCTS, "logits", *NORM_FUSIONS, *STREAM_FUSIONS)
Run = Callable[[], None]
Candidates = Callable[[], tuple[Run, Run]]  # builds (triton run, torch run) over scratch operands


class ProductChoiceError(HeliosError):
    """A product shape or a policy is malformed (unknown path or fusion, empty extents)."""


@dataclass(frozen=True, slots=True)
class ProductShape:
    """One distinct skinny product of a lowered program."""

    rows: int  # M, packed rows
    columns: tuple[int, ...]  # N of each output group
    k: int  # reduction extent
    dtype: str  # "input x weight -> output" dtypes, e.g. "bfloat16xbfloat16->float32"
    fusion: str  # one of FUSIONS
    bias: bool = False  # the products add biases

    def __post_init__(self) -> None:
        if self.rows < 1 or self.k < 1 or not self.columns or min(self.columns) < 1:
            raise ProductChoiceError(f"product shape needs positive extents, got rows={self.rows} "
                              f"columns={self.columns} k={self.k}")
        if self.fusion not in FUSIONS:
            raise ProductChoiceError(f"unknown fusion {self.fusion!r}; expected one of {FUSIONS}")

    def describe(self) -> str:
        n = "+".join(str(c) for c in self.columns)
        return f"{self.fusion} M={self.rows} N={n} K={self.k} {self.dtype}{' +bias' if self.bias else ''}"


@dataclass(frozen=True, slots=True)
class Decision:
    """The path one shape runs on, with the timings it was chosen by (None where not measured)."""

    shape: ProductShape
    path: str
    triton_us: float | None = None
    torch_us: float | None = None

    def __post_init__(self) -> None:
        if self.path not in PATHS:
            raise ProductChoiceError(f"decision for {self.shape.describe()}: unknown path {self.path!r}")
        for value in (self.triton_us, self.torch_us):
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise ProductChoiceError(f"decision for {self.shape.describe()}: timing {value} "
                                         "is not a duration")

    @property
    def labels(self) -> tuple[str, str]:
        """What the two paths are for this shape: ("triton", "torch"), for a norm prologue ("fused",
        "apart": the norm kernel, then the product's Triton launch), for a group on streams
        ("streams": its torch products side by side, "serial": one after another)."""
        if self.shape.fusion in NORM_FUSIONS:
            return ("fused", "apart")
        return ("streams", "serial") if self.shape.fusion in STREAM_FUSIONS else PATHS

    @property
    def label(self) -> str:
        """The chosen path as `labels` names it."""
        return self.labels[PATHS.index(self.path)]

    def describe(self) -> str:
        def us(value: float | None) -> str:
            return "-" if value is None else f"{value:.2f} us"
        first, second = self.labels
        return f"{self.shape.describe()}: {self.label} ({first} {us(self.triton_us)}, {second} {us(self.torch_us)})"


class LinearPolicy:
    """Chooses the path of each product shape and remembers what it chose, in first-asked order."""

    def __init__(self) -> None:
        self._table: dict[ProductShape, Decision] = {}

    def choose(self, shape: ProductShape, candidates: Candidates) -> str:
        decision = self._table.get(shape)
        if decision is None:
            decision = self._decide(shape, candidates)
            self._table[shape] = decision
        return decision.path

    def _decide(self, shape: ProductShape, candidates: Candidates) -> Decision:
        raise NotImplementedError

    def known(self) -> tuple[str, ...] | None:
        """What this policy answers without timing anything (the lowering's products follow it), as
        stable text: part of a load's identity (helios/production/kernel_compile.py); None where it
        cannot be told (the load then has no identity: its kernels are discovered each time)."""
        return None

    def measure_pending(self) -> int:
        """Decide the shapes a deferred policy answered provisionally (nothing for other policies);
        returns how many shapes were timed."""
        return 0

    def adopt(self, recorded: Mapping[ProductShape, Decision]) -> int:
        """Takes recorded decisions for the shapes still to be timed (nothing for other policies)."""
        return 0

    def preload(self, recorded: Mapping[ProductShape, Decision]) -> None:
        """Answers each shape `recorded` decides as recorded when the lowering first asks for it,
        instead of provisionally (a warm start lowers its plans once: nothing for other policies)."""

    def pending_runs(self) -> list[Run]:
        """The runs `measure_pending` will time (none for other policies), built now, so that the
        kernels phase compiles their kernels ahead with the plans'."""
        return []

    @property
    def decisions(self) -> tuple[Decision, ...]:
        return tuple(self._table.values())

    def table(self) -> str:
        """The decisions as lines of text (empty when no product was lowered)."""
        return "\n".join(d.describe() for d in self.decisions)


class FixedPolicy(LinearPolicy):
    """Every shape runs on one path, untimed."""

    def __init__(self, path: str) -> None:
        super().__init__()
        if path not in PATHS:
            raise ProductChoiceError(f"unknown product path {path!r}; expected one of {PATHS}")
        self.path = path

    def _decide(self, shape: ProductShape, candidates: Candidates) -> Decision:
        return Decision(shape, self.path)

    def known(self) -> tuple[str, ...]:
        return (f"every shape {self.path}",)


Timer = Callable[[Run], float]  # seconds one call of `run` takes

# per process: (timer key, shape) -> decision, shared by every MeasuredPolicy of that timer key
_MEASURED: dict[tuple[str, ProductShape], Decision] = {}


class MeasuredPolicy(LinearPolicy):
    """Times both paths of each new shape once per process (per `key`, e.g. the device) and takes the faster."""

    def __init__(self, timer: Timer, key: str, *, deferred: bool = False) -> None:
        super().__init__()
        self.timer = timer
        self.key = key
        self.deferred = deferred
        self._pending: dict[ProductShape, Candidates] = {}
        self._preloaded: dict[ProductShape, Decision] = {}

    def choose(self, shape: ProductShape, candidates: Candidates) -> str:
        if shape not in self._table and (self.key, shape) not in _MEASURED and shape in self._preloaded:
            self._table[shape] = _MEASURED[(self.key, shape)] = self._preloaded[shape]
        if self.deferred and shape not in self._table and (self.key, shape) not in _MEASURED:
            self._pending.setdefault(shape, candidates)
            return "triton"
        return super().choose(shape, candidates)

    def known(self) -> tuple[str, ...]:
        decided = sorted(f"{shape.describe()}: {decision.path}" for (key, shape), decision in _MEASURED.items()
                         if key == self.key)
        return (f"measured on {self.key}, deferred {self.deferred}", *decided)

    def pending_runs(self) -> list[Run]:
        runs: list[Run] = []
        for shape, candidates in self._pending.items():
            built = candidates()
            self._pending[shape] = lambda built=built: built  # timed as discovered, not built again
            runs += built
        return runs

    def adopt(self, recorded: Mapping[ProductShape, Decision]) -> int:
        """Takes the `recorded` decision of every pending shape that has one (measured by an earlier
        load of the same identity on this platform) instead of timing it; returns how many."""
        taken = [shape for shape in self._pending if shape in recorded]
        for shape in taken:
            del self._pending[shape]
            self._table[shape] = _MEASURED[(self.key, shape)] = recorded[shape]
        return len(taken)

    def preload(self, recorded: Mapping[ProductShape, Decision]) -> None:
        self._preloaded = dict(recorded)

    def measure_pending(self) -> int:
        pending, self._pending = self._pending, {}
        for shape, candidates in pending.items():
            self._table[shape] = self._decide(shape, candidates)
        release = getattr(self.timer, "release", None)
        if release is not None:
            release()
        return len(pending)

    def _decide(self, shape: ProductShape, candidates: Candidates) -> Decision:
        cached = _MEASURED.get((self.key, shape))
        if cached is not None:
            return cached
        triton_run, torch_run = candidates()
        triton_s, torch_s = self.timer(triton_run), self.timer(torch_run)
        decision = Decision(shape, "triton" if triton_s < torch_s else "torch", triton_s * 1e6, torch_s * 1e6)
        _MEASURED[(self.key, shape)] = decision
        return decision


def save_decisions(record: Path | None, decisions: Iterable[Decision]) -> bool:
    """Records the measured `decisions` at `record` (a load's product record, keyed like its kernel
    specializations: helios/production/kernel_compile.py), written whole or not at all; False where
    it cannot be (no record path, a read-only cache)."""
    if record is None:
        return False
    entries = [{"rows": d.shape.rows, "columns": list(d.shape.columns), "k": d.shape.k, "dtype": d.shape.dtype,
                "fusion": d.shape.fusion, "bias": d.shape.bias, "path": d.path, "triton_us": d.triton_us,
                "torch_us": d.torch_us} for d in decisions if d.triton_us is not None and d.torch_us is not None]
    from helios.production.kernel_compile import write_record

    return write_record(record, entries)


def recorded_decisions(record: Path | None) -> dict[ProductShape, Decision] | None:
    """The decisions recorded at `record` by shape; None where there is none or it cannot be read."""
    if record is None or not record.exists():
        return None
    try:
        out = {}
        for e in json.loads(record.read_text()):
            shape = ProductShape(int(e["rows"]), tuple(int(c) for c in e["columns"]), int(e["k"]), str(e["dtype"]),
                                 str(e["fusion"]), bool(e["bias"]))
            out[shape] = Decision(shape, e["path"], float(e["triton_us"]), float(e["torch_us"]))
        return out
    except (OSError, ValueError, KeyError, TypeError, ProductChoiceError):
        return None


def forget_measurements() -> None:
    """Drop the per-process decisions (a later MeasuredPolicy times every shape again)."""
    _MEASURED.clear()


class GraphTimer:
    """Times one run as a decode step sees it: inside a CUDA graph, weights not in L2 (see the module docstring)."""

    def __init__(self, device, *, calls: int = 8, replays: int = 5) -> None:
        import torch

        if device.type != "cuda":
            raise ProductChoiceError(f"GraphTimer needs a CUDA device, got {device}")
        self.device, self.calls, self.replays = device, calls, replays
        l2 = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 64 << 20)
        self._flush_elements = 2 * l2 // 4
        self._flush = None  # allocated at the first timing, dropped by release()
        self._baseline = 0.0

    def _elapsed(self, body: Run) -> float:
        import torch

        from helios.production.capture import capturing

        device = self.device
        stream = torch.cuda.Stream(device)
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream):
            for _ in range(2):  # compiles, picks cuBLAS algorithms, warms up
                body()
        torch.cuda.current_stream(device).wait_stream(stream)
        torch.cuda.synchronize(device)
        graph = torch.cuda.CUDAGraph()
        with capturing(graph, stream):
            for _ in range(self.calls):
                body()
        graph.replay()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(self.replays):
            graph.replay()
        end.record()
        torch.cuda.synchronize(device)
        del graph
        return start.elapsed_time(end) * 1e-3 / (self.calls * self.replays)

    def __call__(self, run: Run) -> float:
        import torch

        if self._flush is None:
            self._flush = torch.empty(self._flush_elements, dtype=torch.float32, device=self.device)
            self._baseline = self._elapsed(self._flush.zero_)
        flush = self._flush

        def body() -> None:
            flush.zero_()
            run()
        return max(0.0, self._elapsed(body) - self._baseline)

    def release(self) -> None:
        """Drop the L2-flush buffer and hand cached device memory back (the cache is sized next)."""
        import torch

        if self._flush is not None:
            self._flush = None
            torch.cuda.empty_cache()


def default_policy(device, *, deferred: bool = False) -> LinearPolicy:
    """Measured on a CUDA device (`deferred`: see the module docstring), torch everywhere else."""
    if device.type == "cuda":
        return MeasuredPolicy(GraphTimer(device), key=str(device), deferred=deferred)
    return FixedPolicy("torch")


def policy_for(path: str, device, *, deferred: bool = False, gpu_paths: bool = False) -> LinearPolicy:
    """`"auto"` (the default policy of `device`; Triton for every shape with `gpu_paths`), `"triton"`
    or `"torch"`."""
    if path == "auto":
        return FixedPolicy("triton") if gpu_paths else default_policy(device, deferred=deferred)
    return FixedPolicy(path)
