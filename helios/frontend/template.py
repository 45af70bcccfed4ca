"""The chat template renderer (host side): a sandboxed jinja2 environment with the functions
Hugging Face chat templates use.

Owns: `ChatTemplate` (compile once, render many). The environment is immutable and sandboxed, so a
template from a core cannot reach Python objects beyond the values it is given; `raise_exception`,
`strftime_now`, the `tojson` filter (non-ASCII kept, `indent`, `separators`, `sort_keys`) and loop
controls (`break`, `continue`) are provided, as templates written for transformers expect.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

from helios.errors import HeliosError


class InvalidChatTemplate(HeliosError):
    """The core's chat template does not compile."""


class TemplateRenderError(HeliosError):
    """The chat template rejected the messages (it called raise_exception, or failed)."""


def _raise_exception(message: str) -> None:
    raise TemplateRenderError(f"chat template: {message}")


def _strftime_now(format_string: str) -> str:
    return datetime.now().strftime(format_string)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


class _GenerationTag(jinja2.ext.Extension):
    """`{% generation %}…{% endgeneration %}` marks assistant spans for training masks; rendering
    only needs its body."""

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.Scope(body, lineno=lineno)


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
        extensions=[jinja2.ext.loopcontrols, _GenerationTag],
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


class ChatTemplate:
    """A compiled chat template. `render(**variables)` returns the prompt text."""

    __slots__ = ("_template", "source")

    def __init__(self, source: str) -> None:
        if not source.strip():
            raise InvalidChatTemplate("the chat template is empty")
        self.source = source
        try:
            self._template = _environment().from_string(source)
        except jinja2.TemplateSyntaxError as error:
            raise InvalidChatTemplate(f"chat template line {error.lineno}: {error.message}") from None

    def render(self, **variables: Any) -> str:
        try:
            return self._template.render(**variables)
        except TemplateRenderError:
            raise
        except jinja2.TemplateError as error:
            raise TemplateRenderError(f"chat template failed: {error}") from None
        except (TypeError, ValueError, KeyError, AttributeError, IndexError) as error:
            raise TemplateRenderError(f"chat template failed: {type(error).__name__}: {error}") from None
