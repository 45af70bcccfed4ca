"""Progress of long command-line work on stderr (host side): `helios prepare`'s weight conversion,
`helios conform`'s operator cases and workloads.

    bar = ProgressBar("converting weights")      # stderr
    bar(done, total)                             # after each unit of work

On a terminal a bar is redrawn in place; elsewhere (a log file, CI, a pipe) a line is written at
every tenth of the work, so a log holds no carriage-return runs:

    converting weights: 8/76 (10%)
"""

from __future__ import annotations

import sys
from typing import TextIO


class ProgressBar:
    """`label`'s progress on `stream` (default stderr): a bar redrawn in place on a terminal, a line
    at every tenth elsewhere; the last call (done == total) ends the line."""

    width = 30

    def __init__(self, label: str, stream: TextIO | None = None) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        isatty = getattr(self.stream, "isatty", None)
        self.in_place = bool(isatty and isatty())
        self._tenths = -1

    def __call__(self, done: int, total: int, _name: str = "") -> None:
        """`done` of `total` units finished (`_name`, the unit's, is not shown)."""
        if self.in_place:
            filled = self.width * done // max(total, 1)
            bar = "#" * filled + "." * (self.width - filled)
            self.stream.write(f"\r{self.label} [{bar}] {done}/{total}" + ("\n" if done == total else ""))
        else:
            tenths = 10 * done // max(total, 1)
            if tenths == self._tenths:
                return
            self._tenths = tenths
            self.stream.write(f"{self.label}: {done}/{total} ({100 * done // max(total, 1)}%)\n")
        self.stream.flush()
