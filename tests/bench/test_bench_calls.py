"""The benches call the runtime the way it is called today.

A bench's GPU path runs only on a GPU, so a keyword the runtime renamed fails there and nowhere
else (bench/decode.py, prefill.py and speculative.py once passed `rank_filters` to
`GraphCapture.replay` long after it took `rank_form`). Every keyword a bench passes to a replay is
checked here against the method's signature.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from helios.production.capture import GraphCapture

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _replay_keywords() -> list[tuple[str, int, str]]:
    found = []
    for path in sorted(BENCH.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "replay":
                found += [(path.name, node.lineno, keyword.arg) for keyword in node.keywords if keyword.arg]
    return found


def test_every_keyword_a_bench_passes_to_a_replay_is_one_the_replay_takes():
    taken = set(inspect.signature(GraphCapture.replay).parameters)
    found = _replay_keywords()
    assert found, "no bench passes a keyword to a replay: the scan finds nothing to check"
    assert [(name, line, arg) for name, line, arg in found if arg not in taken] == []
