"""The generated tool space of the demo (host side): tool concepts and how their schemas are drawn.

A `Concept` is something a tool can do (the weather in a city, a timer, a shopping list…). A schema
for it is drawn from a large space: the function name from verbs, nouns and a naming style, the
description from several wordings, each parameter's name from its synonyms, optional parameters in
or out. Every name, description and parameter name belongs to one split by a stable hash, so the
held-out prompts offer schemas (and distractors) whose names and wordings training never showed,
and the model has to read the rendered schemas to pick the tool and name its arguments. Training
schemas go further: most function and parameter names are generated (random verbs, themed and
unrelated words, pseudo-words, four naming styles), so a name can only be copied from the prompt,
never recalled; no generated name is a held-out one (`held_out_names`); and half the descriptions
are composed from the concept's wording (`helios.demo.tool_descriptions`), so a tool is recognised
by what its description says rather than by a string seen before.

`helios.demo.tool_concepts` holds the concept table; `helios.demo.tool_tasks` builds the tasks.
"""

from __future__ import annotations

import functools
import hashlib
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from helios.demo.kinds import Split
from helios.demo.phrasing import Phrasings
from helios.errors import HeliosError


class InvalidConcept(HeliosError):
    """A tool concept's tables are inconsistent (no names in a split, a request with unknown slots)."""


JSON_TYPES = ("string", "integer", "number", "boolean", "array")
COMPOSED_DESCRIPTION_SHARE = 0.5  # training schemas whose description is a composed one
# training parameters named by `generated_name` rather than the concept's own names: a held-out
# schema's parameter names are copied from it, never recalled from the role
GENERATED_PARAMETER_SHARE = 0.65


@dataclass(frozen=True, slots=True)
class Parameter:
    """One parameter of a concept: its role in requests, and the names and wordings a schema uses."""

    role: str  # the slot name in request templates, e.g. "city"
    names: tuple[str, ...]  # snake_case synonyms a schema may call it, e.g. ("city", "location")
    type: str  # a JSON schema type of JSON_TYPES (an enum is a string with `enum` values)
    descriptions: tuple[str, ...]  # wordings of its schema description
    enum: tuple[str, ...] = ()  # the allowed values of an enum parameter
    required: bool = True  # optional parameters are in some schemas and some requests only

    def __post_init__(self) -> None:
        if self.type not in JSON_TYPES or not self.names or not self.descriptions:
            raise InvalidConcept(f"parameter {self.role}: type must be one of {JSON_TYPES}, with names and descriptions")


Values = dict[str, Any]  # role -> the argument value a call carries
Spoken = dict[str, str]  # role -> how the request says it


@dataclass(frozen=True, slots=True)
class Concept:
    """Something a tool does, with every way a schema and a request can express it."""

    key: str  # a stable identifier, e.g. "weather"
    verbs: tuple[str, ...]  # function-name verbs, e.g. ("get", "fetch"); "" for a bare noun
    nouns: tuple[str, ...]  # function-name nouns in snake_case, e.g. ("weather", "current_weather")
    descriptions: tuple[str, ...]  # wordings of the function's description
    parameters: tuple[Parameter, ...]
    requests: Phrasings  # request templates with {role} slots; the slots say which arguments a call has
    gist: str  # what the user wants, with {role} slots of required roles, for the reasoning
    draw: Callable[[random.Random], tuple[Values, Spoken]]  # argument values and their spoken forms
    # the tool's result payload for a call, the answer citing it and the facts the answer must hold
    answer: Callable[[random.Random, Values], tuple[dict[str, Any], str, tuple[str, ...]]]
    fixed_names: tuple[str, ...] = ()  # names always in the training split (the demo's own tools)
    # descriptions composed from the concept's wording (`helios.demo.tool_descriptions`): training only
    composed_descriptions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        roles = {parameter.role for parameter in self.parameters}
        for template in (*self.requests.train, *self.requests.held_out):
            slots = _slots(template)
            if not slots <= roles or not {p.role for p in self.parameters if p.required} <= slots:
                raise InvalidConcept(f"{self.key}: request {template!r} must name every required role and no other")

    def description(self, rng: random.Random, split: Split) -> str:
        """A description of `split`: in training, half the time one composed from the concept's
        wording, otherwise one of the written descriptions of the split."""
        if split is Split.TRAIN and self.composed_descriptions and rng.random() < COMPOSED_DESCRIPTION_SHARE:
            return rng.choice(self.composed_descriptions)
        return rng.choice(split_options(self.descriptions, split))

    def function_names(self, split: Split) -> tuple[str, ...]:
        names = []
        for verb in self.verbs:
            for noun in self.nouns:
                words = ([verb] if verb else []) + noun.split("_")
                names.append("_".join(words))
                if len(words) > 1:
                    names.append(words[0] + "".join(word.capitalize() for word in words[1:]))
        return split_options(names, split, self.fixed_names)


def _slots(template: str) -> set[str]:
    import string

    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


def _in_held_out(text: str) -> bool:
    return hashlib.sha256(f"helios-demo-tools:{text}".encode()).digest()[0] % 3 == 0


def split_options(options: list[str] | tuple[str, ...], split: Split, fixed: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The options of one split: a stable third held out, never one of `fixed`; each split non-empty."""
    unique = list(dict.fromkeys(options))
    held = [option for option in unique if _in_held_out(option) and option not in fixed]
    if not held:
        held = [unique[-1]]
    train = [option for option in unique if option not in held]
    if not train:
        train, held = held[:1], held[1:] or held[:1]
    chosen = train if split is Split.TRAIN else held
    return tuple(chosen)


@dataclass(frozen=True, slots=True)
class DrawnTool:
    """One schema drawn for a concept, and how its parameter names map to the concept's roles."""

    concept: Concept
    schema: dict[str, Any]  # the OpenAI-style tool: {"type": "function", "function": {...}}
    names: dict[str, str] = field(default_factory=dict)  # role -> parameter name, for the parameters in the schema

    @property
    def name(self) -> str:
        return self.schema["function"]["name"]


# Training-only name space: generated function and parameter names, so the only way to name the
# right tool or argument is to copy it from the rendered schema. Held-out names (the concepts' held-out
# splits) are rejected from it by their normalized spelling, so no held-out name is ever generated.
NAME_VERBS = ("get", "fetch", "find", "lookup", "query", "read", "load", "make", "create", "set", "put", "add",
              "run", "do", "call", "start", "open", "send", "post", "push", "pull", "show", "list", "search",
              "compute", "calc", "resolve", "handle", "process", "request", "retrieve", "obtain", "update", "apply",
              "trigger", "invoke", "perform", "execute", "submit", "register", "issue", "emit", "dispatch", "grab",
              "give", "take", "use", "want", "see", "view", "track", "scan", "probe", "ask", "tell", "report")
NAME_WORDS = ("data", "info", "item", "value", "record", "entry", "task", "job", "thing", "service", "status",
              "result", "action", "event", "request", "handler", "helper", "util", "api", "node", "unit", "block",
              "panel", "module", "feature", "system", "object", "signal", "batch", "chunk", "frame", "slot",
              "token", "cell", "board", "page", "stack", "queue", "graph", "index", "table", "field", "path",
              "source", "target", "sample", "report", "detail", "summary", "state", "config", "setting", "mode",
              "level", "point", "place", "area", "zone", "room", "home", "day", "week", "alpha", "beta", "gamma",
              "delta", "omega", "blue", "green", "red", "orange", "purple", "silver", "gold", "iron", "stone",
              "cloud", "river", "forest", "ocean", "star", "moon", "sun", "wind", "fire", "snow", "rain", "leaf",
              "apple", "lemon", "tiger", "panda", "fox", "owl", "wolf", "bear", "whale", "falcon", "rocket", "pixel",
              "vector", "matrix", "kernel", "socket", "widget", "gadget", "bridge", "tower", "garden", "castle")
_SYLLABLES = ("ba", "ko", "ri", "zu", "me", "ta", "lo", "vi", "nex", "dor", "qua", "sen", "pli", "mar", "tek",
              "zo", "fi", "ul", "bra", "cor", "dy", "gen", "hul", "ix", "jo", "kra", "lum", "ny", "or", "pex")
# Short words that generated parameter names and JSON keys take before or after their stem
# (`on_day`, `itemQty`, `max_count`, `getWords`), so no affix of a schema's name can be predicted.
NAME_AFFIXES = ("on", "at", "in", "for", "by", "of", "to", "from", "per", "with", "is", "has", "max", "min", "new",
                "qty", "num", "no", "amt", "cnt", "id", "ref", "val", "raw", "src", "dst", "req", "opt", "my",
                "the", "get", "set", "use", "list", "count", "total", "item", "user", "arg", "param", "input")
NAME_STYLES = ("snake", "camel", "pascal", "kebab", "dotted", "flat", "snake", "camel")
PARAMETER_STYLES = ("snake", "camel", "pascal", "flat")


def _normal(name: str) -> str:
    return name.replace("_", "").replace("-", "").lower()


def _style(words: list[str], style: str) -> str:
    if style == "camel":
        return words[0] + "".join(word.capitalize() for word in words[1:])
    if style == "pascal":
        return "".join(word.capitalize() for word in words)
    if style == "flat":
        return "".join(words)
    if style == "kebab":
        return "-".join(words)
    if style == "dotted":
        return ".".join(words)
    return "_".join(words)


def name_words(name: str) -> list[str]:
    """The lower-case words of an identifier in any of the styles: `getText`, `get_text`, `get-text`…"""
    return [word.lower() for word in re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+", name)]


def restyled(rng: random.Random, name: str, styles: tuple[str, ...], avoid: frozenset[str]) -> str:
    """`name`'s words in a random style of `styles`, or `name` itself when that spelling is in `avoid`."""
    words = name_words(name)
    if not words:
        return name
    candidate = _style(words, rng.choice(styles))
    return name if candidate in avoid or not candidate[:1].isalpha() else candidate


def _pseudo_word(rng: random.Random) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 3)))


def generated_name(rng: random.Random, style: str, themed: tuple[str, ...], verbs: bool = True) -> str:
    """A random identifier: verbs, themed and unrelated words or pseudo-words, sometimes a number."""
    roll = rng.random()
    if roll < 0.12:
        words = [_pseudo_word(rng)]
    elif roll < 0.2:
        words = [_pseudo_word(rng), rng.choice(NAME_WORDS)]
    else:
        words = []
        if verbs and rng.random() < 0.7:
            words.append(rng.choice(NAME_VERBS))
        for _ in range(rng.choices((1, 2, 3), weights=(0.45, 0.4, 0.15))[0]):
            pool = themed if themed and rng.random() < 0.5 else NAME_WORDS
            words.extend(rng.choice(pool).split("_"))
    if rng.random() < 0.15:
        words.append(str(rng.randint(1, 99)) if rng.random() < 0.5 else "v" + str(rng.randint(2, 9)))
    name = _style(words, style)
    return name if name[:1].isalpha() else "f" + name


def affixed(rng: random.Random, words: list[str], share: float = 0.4) -> list[str]:
    """`words` with, at probability `share`, one word of NAME_AFFIXES put before or after them."""
    if rng.random() >= share:
        return words
    affix = rng.choice(NAME_AFFIXES)
    return [affix, *words] if rng.random() < 0.6 else [*words, affix]


def decoy_name(rng: random.Random, concept: Concept, avoid: frozenset[str]) -> str | None:
    """A generated function name made of `concept`'s own verbs and noun words (`setAlert` for a
    reminder), for a tool of another concept: a name that shares words with the request while the
    description says otherwise. None when no try lands outside `avoid` (held-out spellings)."""
    words = _concept_words(concept)
    verbs = tuple(verb for verb in concept.verbs if verb) or NAME_VERBS
    for _ in range(10):
        parts = ([rng.choice(verbs)] if rng.random() < 0.7 else []) + rng.sample(words, min(len(words), rng.randint(1, 2)))
        candidate = _style([word for part in parts for word in part.split("_")], rng.choice(NAME_STYLES))
        if candidate[:1].isalpha() and candidate not in avoid and _normal(candidate) not in _normalized(avoid):
            return candidate
    return None


def _concept_words(concept: Concept) -> tuple[str, ...]:
    return tuple(dict.fromkeys(word for noun in concept.nouns for word in noun.split("_")))


def _parameter_name(parameter: Parameter, style: str, rng: random.Random, split: Split,
                    held: frozenset[str], exact: frozenset[str]) -> str:
    if split is Split.TRAIN and rng.random() < GENERATED_PARAMETER_SHARE:
        themed = tuple(dict.fromkeys(word for name in parameter.names for word in name.split("_")))
        for _ in range(20):
            name = generated_name(rng, style, themed, verbs=False)
            name = _style(affixed(rng, name_words(name)), style) or name
            if name[:1].isalpha() and _normal(name) not in held:
                return name
    names = split_options(parameter.names, split)
    if split is Split.TRAIN:
        names = tuple(name for name in names if name not in exact) or names
    name = rng.choice(names)
    if split is Split.TRAIN and rng.random() < 0.3:  # the style of a parameter never follows from its role
        return restyled(rng, name, PARAMETER_STYLES, exact)
    if style in ("camel", "pascal") and "_" in name:
        first, *rest = name.split("_")
        return first + "".join(word.capitalize() for word in rest)
    return name


def _function_name(concept: Concept, rng: random.Random, split: Split, held: frozenset[str],
                   exact: frozenset[str]) -> tuple[str, str]:
    if split is Split.TRAIN and rng.random() < 0.6:
        style = rng.choice(NAME_STYLES)
        for _ in range(20):
            name = generated_name(rng, style, _concept_words(concept))
            if _normal(name) not in held:
                return name, "snake" if style in ("snake", "flat") else "camel"
    names = concept.function_names(split)
    if split is Split.TRAIN:  # another concept may hold out the same spelling
        names = tuple(name for name in names if name not in exact) or names
    name = rng.choice(names)
    if split is Split.TRAIN and rng.random() < 0.6:
        # NOTE: the concept's own names in any style: a training name spelled `get_text` must not
        # teach that the translation tool is spelled so, or a held-out `getText` is re-spelled.
        name = restyled(rng, name, NAME_STYLES, exact)
    return name, "camel" if any(character.isupper() for character in name) else "snake"


def near_miss(rng: random.Random, name: str, avoid: frozenset[str]) -> str | None:
    """A name that differs from `name` a little: its words in another style, one word swapped, added
    or dropped, or another number; None when no try lands outside `avoid` (held-out spellings)."""
    words = name_words(name)
    for _ in range(10):
        variant = list(words)
        roll = rng.random()
        if roll < 0.35 or not variant:
            pass  # the same words; only the style changes
        elif roll < 0.6:
            variant[rng.randrange(len(variant))] = rng.choice(NAME_WORDS + NAME_VERBS)
        elif roll < 0.8:
            variant.insert(rng.randint(0, len(variant)), rng.choice(NAME_WORDS))
        elif roll < 0.9 and len(variant) > 1:
            del variant[rng.randrange(len(variant))]
        else:
            variant.append(str(rng.randint(1, 9)))
        candidate = _style(variant, rng.choice(NAME_STYLES))
        if candidate != name and candidate[:1].isalpha() and candidate not in avoid \
                and _normal(candidate) not in _normalized(avoid):
            return candidate
    return None


def renamed(tool: DrawnTool, name: str) -> DrawnTool:
    """`tool` with another function name (same description and parameters)."""
    function = {**tool.schema["function"], "name": name}
    return DrawnTool(tool.concept, {**tool.schema, "function": function}, dict(tool.names))


@functools.cache
def held_out_names(concepts: tuple[Concept, ...]) -> tuple[frozenset[str], frozenset[str]]:
    """The held-out function and parameter names of `concepts` (the concept table), exactly as a
    schema spells them (parameter names in snake and camel case): what no training schema carries."""
    functions = {name for concept in concepts for name in concept.function_names(Split.HELD_OUT)}
    parameters = {spelling for concept in concepts for parameter in concept.parameters
                  for name in split_options(parameter.names, Split.HELD_OUT)
                  for spelling in (name, _style(name.split("_"), "camel"))}
    return frozenset(functions), frozenset(parameters)


@functools.cache
def _normalized(names: frozenset[str]) -> frozenset[str]:
    return frozenset(_normal(name) for name in names)


DESCRIPTION_LEADS = ("", "", "", "Tool: ", "Use this to: ", "Helper. ", "API call. ", "Service: ", "Function that does this: ")
DESCRIPTION_TAILS = ("", "", "", " Returns JSON.", " Fast.", " Needs the listed arguments.", " (beta)", " Call it when asked.",
                     " No side effects.", " Works worldwide.")


def _description(rng: random.Random, description: str, split: Split) -> str:
    """A training description sometimes wrapped in boilerplate words, so the model reads past them."""
    if split is not Split.TRAIN or rng.random() < 0.7:
        return description
    return f"{rng.choice(DESCRIPTION_LEADS)}{description}{rng.choice(DESCRIPTION_TAILS)}"


def undecorated(description: str) -> str:
    """`description` without the boilerplate `_description` may have wrapped it in."""
    for lead in DESCRIPTION_LEADS:
        if lead and description.startswith(lead):
            description = description[len(lead):]
            break
    for tail in DESCRIPTION_TAILS:
        if tail and description.endswith(tail):
            return description[:-len(tail)]
    return description


def draw_tool(concept: Concept, rng: random.Random, split: Split,
              held_out: tuple[frozenset[str], frozenset[str]]) -> DrawnTool:
    """A schema for `concept` from the names and wordings of `split`; optional parameters in or out.
    Training schemas often carry generated names (random words and styles) instead of the concept's,
    never one of `held_out` (`held_out_names` of the concept table)."""
    exact_functions, exact_parameters = held_out
    name, style = _function_name(concept, rng, split, _normalized(exact_functions), exact_functions)
    properties: dict[str, Any] = {}
    names: dict[str, str] = {}
    required = []
    for parameter in concept.parameters:
        if not parameter.required and rng.random() < 0.35:
            continue
        parameter_name = _parameter_name(parameter, style, rng, split, _normalized(exact_parameters), exact_parameters)
        if parameter_name in properties:  # two roles drew the same name: keep the schema unambiguous
            parameter_name = f"{parameter_name}_{len(properties)}"
        entry: dict[str, Any] = {"type": parameter.type, "description": rng.choice(split_options(parameter.descriptions, split))}
        if parameter.enum:
            entry["enum"] = list(parameter.enum)
        if parameter.type == "array":
            entry["items"] = {"type": "string"}
        properties[parameter_name] = entry
        names[parameter.role] = parameter_name
        if parameter.required:
            required.append(parameter_name)
    schema = {
        "type": "function",
        "function": {
            "name": name,
            "description": _description(rng, concept.description(rng, split), split),
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }
    return DrawnTool(concept, schema, names)


def pick_request(tool: DrawnTool, rng: random.Random, split: Split) -> str:
    """A request template of `split` whose slots the drawn schema can carry (required roles always)."""
    pool = tool.concept.requests.train if split is Split.TRAIN else tool.concept.requests.held_out
    fitting = [template for template in pool if _slots(template) <= set(tool.names)]
    if not fitting:
        raise InvalidConcept(f"{tool.concept.key}: no {split} request fits the parameters {sorted(tool.names)}")
    # prefer requests that use every optional parameter the schema has, half of the time
    complete = [template for template in fitting if _slots(template) == set(tool.names)]
    return rng.choice(complete if complete and rng.random() < 0.5 else fitting)


def call_arguments(tool: DrawnTool, template: str, values: Values) -> dict[str, Any]:
    """The call's arguments in schema order: the roles the request names."""
    slots = _slots(template)
    return {tool.names[role]: values[role] for role in tool.names if role in slots}


def rendered_value(value: Any) -> str:
    """A call argument as the chat template writes it (the scorer compares these)."""
    import json

    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return str(value)
