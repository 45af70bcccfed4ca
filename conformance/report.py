"""The divergence report (host side): what `helios conform` prints, as a table or as JSON.

Owns `Divergence` (one disagreement between the runtimes: where, which field, both values and the
logit margin), `LevelResult` (one level's counts and divergences) and `Report` (the verdict over the
levels run). A case ends in one of three verdicts: pass, numeric tie (the runtimes disagreed on a
sampled id whose winning logit margin lies within the tolerance of their precisions; production's
token was adopted) or divergence. Only divergences fail a run.

A run that served workloads also carries its coverage table (`conformance.coverage.Coverage`: which
mechanisms each workload level exercised). When coverage is required (the generated workloads, or
when asked) and a mechanism the core supports was reached by no level, the run's verdict is
`incomplete` rather than `pass`: nothing diverged, but the run does not show what it should.

Exit codes: 0 pass, 1 divergence, 4 incomplete (2 and 3: unusable input, raised before a report).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from helios.errors import HeliosError

LEVELS = ("operators", "trace", "e2e")
VERDICTS = ("pass", "numeric tie", "divergence")
EXIT_CODES = {"pass": 0, "divergence": 1, "incomplete": 4}  # a run's verdict -> `helios conform`'s status


class InvalidReport(HeliosError):
    """A report value is out of range (an unknown level or verdict, counts that do not add up)."""


@dataclass(frozen=True, slots=True)
class Divergence:
    """One disagreement: the first one found in its case."""

    case: str  # the case that diverged, e.g. "trace/pressure" or "paged_attention/ragged/window"
    field: str  # what differs, e.g. "sampled_id", "transport.lane_page_table", "text", "out[3, 17]"
    reference: object  # the reference runtime's value (JSON-representable)
    production: object  # the production runtime's value
    round: int | None = None  # the submission (trace) or the token index (e2e); None for operators
    lane: int | None = None  # the lane (slot for trace rounds, request index for e2e, row for operators)
    margin: float | None = None  # the winning logit margin where a sampled id differs, else None
    detail: str = ""  # one short sentence more, when the field alone does not explain it

    def __post_init__(self) -> None:
        if not self.case or not self.field:
            raise InvalidReport("a divergence names its case and its field")

    def as_json(self) -> dict:
        return {"case": self.case, "round": self.round, "lane": self.lane, "field": self.field,
                "reference": _plain(self.reference), "production": _plain(self.production),
                "margin": self.margin}


@dataclass(frozen=True, slots=True)
class CaseResult:
    """One case's verdict; a numeric tie carries the margins it accepted, a divergence its first one."""

    case: str
    verdict: str  # one of VERDICTS
    divergence: Divergence | None = None
    ties: tuple[Divergence, ...] = ()  # the accepted numeric ties (field, values and margin)

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise InvalidReport(f"verdict {self.verdict!r} is not one of {VERDICTS}")
        if (self.verdict == "divergence") != (self.divergence is not None):
            raise InvalidReport(f"case {self.case}: a divergence verdict carries exactly its divergence")


@dataclass(frozen=True, slots=True)
class LevelResult:
    level: str  # one of LEVELS
    cases: tuple[CaseResult, ...]

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise InvalidReport(f"level {self.level!r} is not one of {LEVELS}")

    @property
    def passed(self) -> int:
        return sum(c.verdict == "pass" for c in self.cases)

    @property
    def numeric_ties(self) -> int:
        return sum(c.verdict == "numeric tie" for c in self.cases)

    @property
    def divergences(self) -> tuple[Divergence, ...]:
        return tuple(c.divergence for c in self.cases if c.divergence is not None)

    def as_json(self) -> dict:
        return {"level": self.level, "cases": len(self.cases), "passed": self.passed,
                "numeric_ties": self.numeric_ties, "divergences": [d.as_json() for d in self.divergences]}


@dataclass(frozen=True, slots=True)
class Report:
    levels: tuple[LevelResult, ...] = field(default_factory=tuple)
    coverage: Any = None  # conformance.coverage.Coverage of the workload levels, None when none ran

    @property
    def verdict(self) -> str:
        """divergence, else incomplete (required coverage missing a supported mechanism), else pass."""
        if any(level.divergences for level in self.levels):
            return "divergence"
        if self.coverage is not None and self.coverage.required and self.coverage.missing:
            return "incomplete"
        return "pass"

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    def level(self, name: str) -> LevelResult:
        for level in self.levels:
            if level.level == name:
                return level
        raise KeyError(name)

    def as_json(self) -> dict:
        out = {"verdict": self.verdict, "levels": [level.as_json() for level in self.levels]}
        if self.coverage is not None:
            out["coverage"] = self.coverage.as_json()
        return out

    def to_json(self) -> str:
        return json.dumps(self.as_json(), ensure_ascii=False)

    def table(self) -> str:
        """One table: level, case, verdict; under each tie or divergence, where and what differs."""
        rows = [("level", "case", "verdict", "round", "lane", "field", "reference", "production", "margin")]
        for level in self.levels:
            for case in level.cases:
                shown = ([case.divergence] if case.divergence is not None else []) + list(case.ties)
                if not shown:
                    rows.append((level.level, case.case, case.verdict, "", "", "", "", "", ""))
                for i, item in enumerate(shown):
                    verdict = case.verdict if i == 0 else "numeric tie"
                    rows.append((level.level if i == 0 else "", case.case if i == 0 else "", verdict,
                                 _cell(item.round), _cell(item.lane), item.field, _short(item.reference),
                                 _short(item.production), "" if item.margin is None else f"{item.margin:.3g}"))
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
                 for row in rows]
        summary = ", ".join(f"{level.level}: {level.passed}/{len(level.cases)} passed, "
                            f"{level.numeric_ties} numeric ties, {len(level.divergences)} divergences"
                            for level in self.levels)
        details = [f"  {d.case}: {d.detail}" for level in self.levels for d in level.divergences if d.detail]
        coverage: list[str] = []
        if self.coverage is not None:
            missing = self.coverage.missing
            state = ("required" if self.coverage.required else "reported, not required (workloads given)")
            coverage = ["", f"coverage ({state}):", *self.coverage.table()]
            if missing:
                coverage.append(f"not reached: {', '.join(missing)}")
        return "\n".join([*lines, "", f"{self.verdict}: {summary}", *details, *coverage])


def _cell(value: int | None) -> str:
    return "" if value is None else str(value)


def _short(value: object, limit: int = 48) -> str:
    text = json.dumps(_plain(value), ensure_ascii=False)  # strings quoted: newlines never break a row
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _plain(value: object) -> object:
    """`value` as JSON data (NumPy scalars and arrays become numbers and lists)."""
    if hasattr(value, "tolist"):
        return value.tolist()  # type: ignore[no-any-return]
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def level_result(level: str, cases: Sequence[CaseResult]) -> LevelResult:
    return LevelResult(level, tuple(cases))
