"""Request bodies (host side): the bytes of a POST body become one JSON value every later step can
use without raising.

Owns: `decode_body` and `MAX_JSON_DEPTH`. A body is rejected, with a `RequestFieldError` whose `param`
is the path of the offending value (dotted, `messages.0.content`; `body` for the document itself),
when it is not JSON (`InvalidJSON`), nests deeper than `MAX_JSON_DEPTH` (`NestingTooDeep`), holds a
string with a lone surrogate anywhere, keys included (`InvalidText`: the tokenizer, the template and
the response encoder could not encode it), or a NaN or infinite number (`NonFiniteNumber`). The size
of a body is bounded before it is read, by the server (`--max-request-bytes`).
"""

from __future__ import annotations

import json
import math
from typing import Any

from helios.frontend.errors import InvalidJSON, InvalidText, NestingTooDeep, NonFiniteNumber

# Arrays and objects inside one another; the deepest real request (a tool schema inside a tool
# inside the tools array) is a few tens of levels.
MAX_JSON_DEPTH = 64


def decode_body(raw: bytes) -> Any:
    """The JSON value of a request body, checked as the module docstring says."""
    try:
        value = json.loads(raw)
    except RecursionError:
        raise NestingTooDeep("body", f"nests arrays and objects deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as error:  # JSONDecodeError, and UnicodeDecodeError for bytes that are not UTF-8
        where = f" at character {error.pos}" if isinstance(error, json.JSONDecodeError) else ""
        raise InvalidJSON("body", f"the request body is not valid JSON{where}") from None
    check_value(value)
    return value


def _join(path: str, key: object) -> str:
    return str(key) if not path else f"{path}.{key}"


def _check_text(text: str, path: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        code = ord(text[error.start])
        raise InvalidText(path or "body", f"holds a lone surrogate (U+{code:04X} at character {error.start}), "
                                          "which is not Unicode text") from None  # fmt: skip


def check_value(value: Any) -> None:
    """Depth, text and numbers of an already decoded value (iterative: no recursion to exhaust)."""
    stack: list[tuple[Any, str, int]] = [(value, "", 1)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, str):
            _check_text(item, path)
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise NonFiniteNumber(path or "body", f"must be a finite number, got {item}")
        elif isinstance(item, dict | list):
            if depth > MAX_JSON_DEPTH:
                raise NestingTooDeep(path or "body", f"nests arrays and objects deeper than {MAX_JSON_DEPTH} levels")
            if isinstance(item, dict):
                for key, child in item.items():
                    _check_text(key, path)  # NOTE: a bad key is reported at its parent's path
                    stack.append((child, _join(path, key), depth + 1))
            else:
                stack.extend((child, _join(path, index), depth + 1) for index, child in enumerate(item))
