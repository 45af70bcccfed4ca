"""Text and record tasks of the demo (host side): copying and reversing capital-letter strings, and
JSON answers that follow a schema given in the request.

The JSON task describes a person, a product or an event in a sentence and asks for an object whose
keys (drawn from synonyms, split like tool parameter names) and types the request spells out, in one
of three schema notations.
"""

from __future__ import annotations

import json
import random
from typing import Any

from helios.demo.kinds import Expectation, Split, Task, TaskKind
from helios.demo.phrasing import PREFIXES, Phrasings, compose, dress
from helios.demo.toolspace import NAME_AFFIXES, split_options
from helios.demo.vocabulary import CITIES, LETTERS, NAMES

_COPY_HELD_OUT = ("Could you parrot this back: {s}", "Type {s} exactly as given.", "Mirror this: {s}")
_REVERSE_HELD_OUT = ("Could you spell {s} back to front?", "Give me {s} in reverse order.", "Read {s} from the end.")
_TEXT_LEXICON = {
    "copy": ("repeat", "copy", "echo", "say back", "write back", "return", "print", "output", "reproduce",
             "duplicate", "say", "write", "send back", "give back", "rewrite", "restate", "write out", "just say"),
    "this": ("this", "the following", "this text", "these letters", "the text", "this string", "the string",
             "this word", "the word", "these words", "my text", "what I write", ""),
    "exactly": ("exactly", "verbatim", "word for word", "as it is", "unchanged", "letter for letter", "precisely", ""),
    "ask": ("Can you", "Could you", "Would you", "Will you", "Please", "Kindly", "I want you to", "I need you to",
            "Go ahead and", "Now", "Try to"),
    # NOTE: no "mirror": a held-out copy request says "Mirror this", and a reverse verb that close
    # taught the model to reverse it.
    "reverse": ("reverse", "flip", "invert", "turn around", "backwards-spell"),
    "backwards": ("backwards", "in reverse", "reversed", "the other way round", "right to left", "last letter first",
                  "in reverse letter order", "starting from the last letter"),
    "spell": ("spell", "write", "say", "print", "give me", "show", "output", "type out", "return"),
}
COPY = Phrasings(
    train=compose(("[copy] [this] [exactly]: {s}", "[copy] [this]: {s}", "[ask] [copy] [this] [exactly]: {s}",
                   "[ask] [copy] {s} [exactly]", "[copy] {s} [exactly].", "{s} - [copy] [this] [exactly]",
                   "[ask] [copy] [this]? {s}", "[copy] [exactly]:\n{s}", "Text: {s}. [copy] it [exactly]."),
                  _TEXT_LEXICON, _COPY_HELD_OUT),
    held_out=_COPY_HELD_OUT)
REVERSE = Phrasings(
    train=compose(("[reverse] [this]: {s}", "[reverse] {s}.", "[ask] [reverse] {s}?", "[spell] {s} [backwards].",
                   "[ask] [spell] {s} [backwards]?", "What is {s} [backwards]?", "{s} [backwards]?",
                   "[ask] [reverse] the letters of {s}.", "[reverse] the string {s}", "[spell] [this] [backwards]: {s}",
                   "How do you [spell] {s} [backwards]?", "{s} - [reverse] it"),
                  _TEXT_LEXICON, _REVERSE_HELD_OUT),
    held_out=_REVERSE_HELD_OUT)


def _random_word(rng: random.Random, shortest: int, longest: int) -> str:
    return "".join(rng.choice(LETTERS) for _ in range(rng.randint(shortest, longest)))


def _lead(rng: random.Random, question: str, split: Split) -> str:
    """A training question, sometimes after a filler prefix; never a suffix, which would run on from
    the text to copy or reverse. Held-out questions stay as written."""
    if split is Split.TRAIN and rng.random() < 0.3:
        return PREFIXES.pick(rng, split) + question
    return question


def copy(rng: random.Random, split: Split) -> Task:
    if split is Split.TRAIN and rng.random() < 0.5:
        # longer and more varied strings than the held-out ones, so copying letter by letter holds
        # past the lengths it is scored on (held-out prompts draw as below, unchanged)
        words = rng.choices((1, 2, 3, 4), weights=(0.35, 0.35, 0.2, 0.1))[0]
        text = " ".join(_random_word(rng, 2, 12) for _ in range(words))
    else:
        words = 1 if rng.random() < 0.7 else 2
        text = " ".join(_random_word(rng, 3, 8) for _ in range(words))
    question = _lead(rng, COPY.pick(rng, split).format(s=text), split)
    return Task(question, f"Copy exactly: {text}", text, Expectation(TaskKind.COPY, text=text))


def reverse(rng: random.Random, split: Split) -> Task:
    word = _random_word(rng, 3, 7)
    question = _lead(rng, REVERSE.pick(rng, split).format(s=word), split)
    backwards = word[::-1]
    # Numbered letters make the reversal a count-down plus lookups, robust to repeated letters.
    forward = " ".join(f"{position} {letter}" for position, letter in enumerate(word, start=1))
    backward = " ".join(f"{len(word) - offset} {letter}" for offset, letter in enumerate(backwards))
    return Task(question, f"{forward}\nBackwards: {backward}", backwards, Expectation(TaskKind.REVERSE, text=backwards))


JOBS = ("teacher", "doctor", "engineer", "pilot", "chef", "nurse", "artist", "farmer", "lawyer")
PRODUCTS = ("lamp", "chair", "phone", "backpack", "kettle", "bicycle", "guitar", "desk", "jacket")
COLORS = ("red", "blue", "green", "black", "white", "yellow", "gray")
EVENTS = ("concert", "meeting", "party", "workshop", "wedding", "match", "lecture")
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")

# field role: (key synonyms, JSON type)
FIELDS: dict[str, tuple[tuple[str, ...], str]] = {
    "name": (("name", "full_name", "person", "first_name"), "string"),
    "age": (("age", "years", "age_years"), "integer"),
    "city": (("city", "town", "home_city", "lives_in"), "string"),
    "job": (("job", "occupation", "profession", "work"), "string"),
    "product": (("product", "item", "product_name", "article"), "string"),
    "price": (("price", "cost", "price_usd", "amount"), "number"),
    "color": (("color", "colour", "shade"), "string"),
    "quantity": (("quantity", "count", "units", "pieces"), "integer"),
    "event": (("event", "event_name", "occasion", "what"), "string"),
    "day": (("day", "weekday", "on_day"), "string"),
    "time": (("time", "start_time", "starts_at", "hour"), "string"),
}
_PERSON_HELD_OUT = ("Our new {job} is {name}; {name} is {age} and comes from {city}.",
                    "{name} ({age}) works as a {job} and calls {city} home.")
_PRODUCT_HELD_OUT = ("We have {quantity} of the {color} {product} left, each at {price} dollars.",)
_EVENT_HELD_OUT = ("Save the date: a {event} takes place in {city} this {day} starting {time}.",)
# NOTE: composed training sentences, the facts in many orders and wordings: with three or four
# fixed sentences a record's values were found by their place in the sentence, not by their cue
# words, and a held-out sentence got a price for a count.
_RECORD_LEXICON = {
    "lives": ("lives in", "is from", "is based in", "resides in", "lives and works in"),
    "works": ("works as a", "is a", "is employed as a", "has a job as a", "earns a living as a"),
    "aged": ("aged", "age", "who is", "now"),
    "left": ("are left", "remain", "are in stock", "are available", "are on the shelf"),
    "each": ("each", "apiece", "per piece", "a piece", "per unit"),
    "sells": ("sells for", "costs", "is priced at", "goes for"),
    "have": ("have", "still have", "keep", "stock"),
    "happens": ("takes place", "happens", "is held", "will be"),
    "at": ("at", "from", "beginning at", "starting at"),
    "note": ("Reminder:", "Note:", "Calendar:", "Plan:", "Heads up:"),
    "begins": ("begins at", "starts at", "opens at", "kicks off at"),
}
RECORDS: dict[str, tuple[tuple[str, ...], Phrasings]] = {
    "person": (("name", "age", "city", "job"), Phrasings(
        train=("{name} is {age} years old and lives in {city}, working as a {job}.",
               "{name}, aged {age}, is a {job} in {city}.", "Meet {name} from {city}, a {job} who is {age}.",
               "In {city} lives {name}, a {age}-year-old {job}.") + compose((
                   "{name} [works] {job}, [lives] {city} and is {age}.", "{name}, [aged] {age}, [lives] {city} and [works] {job}.",
                   "This is {name}: {age} years old, [lives] {city}, [works] {job}.", "Age {age}, city {city}, job {job}, name {name}.",
                   "{city} is home to {name}, {age}, who [works] {job}.", "The {job} {name} ({age} years) [lives] {city}.",
                   "{name} [lives] {city}. {name} is {age} and [works] {job}.", "Name: {name}. {name} [works] {job} and is {age}; [lives] {city}."),
                   _RECORD_LEXICON, _PERSON_HELD_OUT),
        held_out=_PERSON_HELD_OUT)),
    "product": (("product", "price", "color", "quantity"), Phrasings(
        train=("I bought {quantity} {color} {product}s for {price} dollars each.",
               "The {color} {product} costs {price} dollars and {quantity} are in stock.",
               "Order: {quantity} x {product}, color {color}, price {price}.") + compose((
                   "{quantity} {color} {product}s [left], [each] {price} dollars.", "A {color} {product} [sells] {price} dollars; we [have] {quantity}.",
                   "We [have] {quantity} units of the {color} {product} at {price} dollars [each].", "Price {price}, {quantity} pieces, {color} {product}.",
                   "We sold {quantity} {product}s in {color} at {price} dollars [each].", "The {product} comes in {color}; {quantity} [left] and it [sells] {price} dollars.",
                   "For {price} dollars [each] you get a {color} {product}; {quantity} [left]."),
                   _RECORD_LEXICON, _PRODUCT_HELD_OUT),
        held_out=_PRODUCT_HELD_OUT)),
    "event": (("event", "day", "time", "city"), Phrasings(
        train=("The {event} is on {day} at {time} in {city}.", "Join us for a {event} in {city} on {day}, {time}.",
               "{day} at {time}: {event} in {city}.") + compose((
                   "A {event} [happens] in {city} on {day} [at] {time}.", "[note] {event}, {city}, {day}, {time}.",
                   "On {day} there is a {event} in {city}, [at] {time}.", "{city} hosts a {event} on {day}; it [begins] {time}.",
                   "The {event} [begins] {time} on {day}, in {city}.", "[note] the {event} in {city} [happens] on {day} [at] {time}."),
                   _RECORD_LEXICON, _EVENT_HELD_OUT),
        held_out=_EVENT_HELD_OUT)),
}
_REQUESTS_HELD_OUT = ("Please format this as JSON following {shape}.", "I need the data as JSON, schema {shape}.")
REQUESTS = Phrasings(
    train=("Reply only with JSON of the shape {shape}.", "Answer in JSON as {shape}.", "Extract {shape} as JSON.",
           "Give me JSON: {shape}", "Return a JSON object {shape}.", "Output JSON matching {shape}.") + compose((
               "[ask] [reply] [json] [shaped] {shape}[end]", "[reply] [json] [shaped] {shape}[end]",
               "[json] [shaped] {shape}, [ask2][end]", "[shaped] {shape}: [reply] [json][end]",
               "[ask] turn this into [json] [shaped] {shape}[end]", "[ask] extract the fields {shape} as [json][end]"), {
               "ask": ("Can you", "Could you", "Please", "Now", "I want you to", "Kindly", "Just"),
               "reply": ("reply with", "answer with", "return", "give me", "output", "write", "produce", "respond in",
                         "send", "put it in"),
               "json": ("JSON", "a JSON object", "json", "an object in JSON", "only JSON", "valid JSON"),
               "shaped": ("of the shape", "matching", "with the shape", "shaped like", "with keys and types",
                          "using the schema", "that fits", "like", "in the form"),
               "ask2": ("please", "nothing else", "no prose", "thanks", "only the object"),
               "end": (".", "", "!", ":")}, _REQUESTS_HELD_OUT),
    held_out=_REQUESTS_HELD_OUT,
)


def _value(rng: random.Random, role: str) -> Any:
    draw = {
        "name": lambda: rng.choice(NAMES), "age": lambda: rng.randint(18, 90), "city": lambda: rng.choice(CITIES),
        "job": lambda: rng.choice(JOBS), "product": lambda: rng.choice(PRODUCTS),
        "price": lambda: rng.randint(2, 400) if rng.random() < 0.6 else rng.randint(20, 4000) / 10,
        "color": lambda: rng.choice(COLORS), "quantity": lambda: rng.randint(2, 50), "event": lambda: rng.choice(EVENTS),
        "day": lambda: rng.choice(DAYS), "time": lambda: f"{rng.randint(7, 22):02d}:{rng.choice((0, 15, 30, 45)):02d}",
    }
    return draw[role]()


def _shape(rng: random.Random, keys: list[tuple[str, str]]) -> str:
    notation = rng.randrange(3)
    if notation == 0:
        return "{" + ", ".join(f'"{key}": {kind}' for key, kind in keys) + "}"
    if notation == 1:
        return "with keys " + ", ".join(f'"{key}" ({kind})' for key, kind in keys)
    properties = {key: {"type": kind} for key, kind in keys}
    return json.dumps({"type": "object", "properties": properties})


KEY_PREFIXES = ("the", "my", "main", "user", "primary", "current", "client", "record", "item", "entry", "x", "raw")
KEY_SUFFIXES = ("value", "field", "info", "text", "data", "str", "val", "label", "key", "1", "2")


def _snake(words: list[str]) -> str:
    return "_".join(words)


def _camel(words: list[str]) -> str:
    return words[0] + "".join(word.capitalize() for word in words[1:])


_HELD_OUT_KEYS = frozenset(key.replace("_", "").lower() for synonyms, _ in FIELDS.values()
                           for key in split_options(synonyms, Split.HELD_OUT))


def _key(rng: random.Random, role: str, split: Split) -> str:
    """The key a request asks `role` under: a synonym of its split, or in training often a generated
    name around one of the role's words (so the key is copied from the requested shape, never
    recalled), never a held-out key."""
    if split is Split.TRAIN and rng.random() < 0.6:
        themed = tuple(dict.fromkeys(word for key in FIELDS[role][0] for word in key.split("_") if len(word) > 2))
        for _ in range(20):
            words = [rng.choice(themed)]
            # NOTE: prefixes and suffixes come from the key words and the shared name affixes
            # (`on_day`, `item_qty`), so no spelling of a requested key is more likely than another.
            if rng.random() < 0.5:
                words.insert(0, rng.choice(KEY_PREFIXES if rng.random() < 0.5 else NAME_AFFIXES))
            if rng.random() < 0.4:
                words.append(rng.choice(KEY_SUFFIXES if rng.random() < 0.5 else NAME_AFFIXES))
            key = rng.choice((_snake, _camel))(words)
            if key.replace("_", "").lower() not in _HELD_OUT_KEYS:
                return key
    return rng.choice(split_options(FIELDS[role][0], split))


def json_extraction(rng: random.Random, split: Split) -> Task:
    record = rng.choice(sorted(RECORDS))
    roles, sentences = RECORDS[record]
    values = {role: _value(rng, role) for role in roles}
    sentence = sentences.pick(rng, split).format(**values)
    chosen = rng.sample(roles, rng.randint(2, len(roles)))
    keys = [(_key(rng, role, split), FIELDS[role][1]) for role in chosen]
    if len({key for key, _ in keys}) < len(keys):  # two roles drew the same key: number them apart
        keys = [(f"{key}_{position}", kind) for position, (key, kind) in enumerate(keys, start=1)]
    request = REQUESTS.pick(rng, split).format(shape=_shape(rng, keys))
    question = f"{sentence} {request}" if rng.random() < 0.5 else f"{request}\n{sentence}"
    answer = {key: values[role] for (key, _), role in zip(keys, chosen, strict=True)}
    reasoning = "\n".join(f"{key}: {values[role]}" for (key, _), role in zip(keys, chosen, strict=True))
    text = json.dumps(answer)
    return Task(dress(rng, question, split, casing=False, punctuation=False, fillers=False), reasoning, text,
                Expectation(TaskKind.JSON_EXTRACTION, json_text=text))
