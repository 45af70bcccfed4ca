"""The demo chat template and its renderer (host side).

`ChatTemplate` renders `chat_template.jinja` with jinja2 in the environment Hugging Face templates
expect: a sandbox with `trim_blocks` and `lstrip_blocks`, loop controls, `raise_exception`,
`strftime_now` and an HF-compatible `tojson` (no HTML escaping, keys in insertion order). Messages
and tools are OpenAI-style dictionaries; tool-call arguments must be objects, not JSON strings.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from helios.demo import TEMPLATE_PATH
from helios.errors import HeliosError


class TemplateRenderError(HeliosError):
    """The chat template rejected the conversation (it raised, or a message is malformed)."""


def _raise_exception(message: str) -> None:
    raise TemplateRenderError(f"chat template: {message}")


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def _strftime_now(format_string: str) -> str:
    return datetime.now().strftime(format_string)


@dataclass(frozen=True, slots=True)
class ChatTemplate:
    """A compiled chat template; `render` turns messages (and tools) into prompt text."""

    source: str  # the jinja2 source text
    _compiled: jinja2.Template = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.source.strip():
            raise TemplateRenderError("chat template source is empty")
        environment = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
        )
        environment.filters["tojson"] = _tojson
        environment.globals["raise_exception"] = _raise_exception
        environment.globals["strftime_now"] = _strftime_now
        try:
            compiled = environment.from_string(self.source)
        except jinja2.TemplateSyntaxError as error:
            raise TemplateRenderError(f"chat template line {error.lineno}: {error.message}") from None
        object.__setattr__(self, "_compiled", compiled)

    @classmethod
    def load(cls, path: Path = TEMPLATE_PATH) -> ChatTemplate:
        return cls(path.read_text(encoding="utf-8"))

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = False,
    ) -> str:
        """Render a conversation; with `add_generation_prompt` the text ends in an open assistant turn."""
        for index, message in enumerate(messages):
            if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
                raise TemplateRenderError(f"message {index} must be a mapping with a string 'role'")
        try:
            return self._compiled.render(
                messages=list(messages),
                tools=list(tools) if tools else None,
                add_generation_prompt=add_generation_prompt,
            )
        except jinja2.TemplateError as error:
            raise TemplateRenderError(f"chat template failed: {error}") from None


_DEFAULT: ChatTemplate | None = None


def default_template() -> ChatTemplate:
    """The package's chat template, compiled once."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = ChatTemplate.load()
    return _DEFAULT
