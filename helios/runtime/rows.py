"""Row sequences kept as columns (host side): `ColumnRows`, the base of a round's results that are
stored column by column and turned into row objects only when someone reads them as rows
(`helios.runtime.completion.CompletionRows`, `helios.engine.outcomes.RoundOutcomes`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class ColumnRows(Sequence):
    """A read-only sequence of row objects built once, on first row access, by `_build_rows()`;
    equal to any sequence of equal rows. Subclasses keep the columns and define `__len__`."""

    __slots__ = ("_rows",)  # subclasses set it to None in __init__

    def _build_rows(self) -> list[Any]:
        raise NotImplementedError

    def _all(self) -> list[Any]:
        if self._rows is None:
            self._rows = self._build_rows()
        return self._rows

    def __len__(self) -> int:
        raise NotImplementedError

    def __getitem__(self, index):  # type: ignore[override]
        return self._all()[index]

    def __iter__(self):
        return iter(self._all())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._all()!r})"


__all__ = ["ColumnRows"]
