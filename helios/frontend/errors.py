"""Request errors of the frontend (host side): each names the request field that broke.

The server answers every `RequestFieldError` with HTTP 400 and an OpenAI-style error body whose
`param` is the field; the CLI prints the message as one line.
"""

from __future__ import annotations

from helios.errors import HeliosError


class RequestFieldError(HeliosError):
    """A request field is invalid; `param` names it (dotted, e.g. `messages.2.content`)."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(f"{param}: {message}")
        self.param = param
        self.detail = message


class InvalidFieldType(RequestFieldError):
    """A field has the wrong JSON type."""


class InvalidFieldValue(RequestFieldError):
    """A field's value is out of range or not one of the accepted values."""


class MissingField(RequestFieldError):
    """A required field is absent."""


class UnknownModel(RequestFieldError):
    """The request names a model this server does not serve."""


class InvalidStop(RequestFieldError):
    """`stop`, `stop_token_ids` or `stop_token_sequences` break the specification's limits."""


class IncompatibleOptions(RequestFieldError):
    """Two options that cannot be combined (string stops with token stops or structured output)."""


class PromptTooLong(RequestFieldError):
    """The rendered prompt alone does not fit the served context."""


class InvalidJSON(RequestFieldError):
    """The request body is not a JSON document (bad syntax or bytes that are not UTF-8)."""


class NestingTooDeep(RequestFieldError):
    """The request body nests arrays and objects deeper than the server reads."""


class InvalidText(RequestFieldError):
    """A string holds a lone surrogate: it is not Unicode text and cannot be encoded."""


class NonFiniteNumber(RequestFieldError):
    """A number is NaN or infinite (JSON has neither; Python's decoder accepts them)."""


class InvalidToolSchema(RequestFieldError):
    """A tool's `parameters` schema has a part of the wrong shape; `param` is its path."""


class OutsideCapacity(HeliosError):
    """A request that can never fit the prepared capacities (prompt plus `max_tokens` past the served
    context): the specification's admission failure, HTTP 503 without `Retry-After` (it is permanent).
    `param` names the field, `limit` the largest value that fits, `value` the request's."""

    def __init__(self, param: str, message: str, *, limit: int, value: int) -> None:
        super().__init__(f"{param}: {message}")
        self.param = param
        self.limit = limit
        self.value = value


class ImagesNotServed(RequestFieldError):
    """A request holds image content parts for a model without vision."""
