"""bench/program_choice.py times the same choice both ways and stops where they disagree."""

from __future__ import annotations

import json

from bench import program_choice as bench
from helios.engine import program_choice


def test_both_forms_choose_alike_and_the_threshold_is_restored(tmp_path, capsys):
    threshold = program_choice.VECTOR_LANES
    out = tmp_path / "choice.json"
    assert bench.main(["--lanes", "1", "256", "--number", "3", "--repeats", "1", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert [row["lanes"] for row in rows] == [1, 256]
    assert all(row["vector_us"] > 0 and row["lanes_us"] > 0 for row in rows)
    assert program_choice.VECTOR_LANES == threshold
    assert "lanes/vector" in capsys.readouterr().out
