"""bench/startup.py reads `python -X importtime` output into its slowest imports."""

from __future__ import annotations

from bench import startup

IMPORTTIME = """\
import time: self [us] | cumulative | imported package
import time:       120 |        120 |   _io
import time:      3000 |    4600000 | torch
import time:      1000 |    1140000 |   torch.nn
import time:       500 |     268000 |   triton
helios.production.native_model: a log line between them
import time:        20 |         20 |     tiny
"""


def test_the_slowest_imports_are_read_by_their_cumulative_time():
    assert startup.slowest_imports(IMPORTTIME, 3) == ["  4.600s torch", "  1.140s   torch.nn", "  0.268s   triton"]
    assert startup.slowest_imports(IMPORTTIME, 10)[-1] == "  0.000s     tiny"
    assert startup.slowest_imports("no import lines", 5) == []
