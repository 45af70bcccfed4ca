"""Surface variation of demo prompts (host side): phrasing pools split into training and held-out
halves, casing, punctuation, filler words, and numbers spelled in words.

Every pool is a `Phrasings` pair: the training half is what the corpus shows, the held-out half is
written apart and only used for held-out and validation prompts, so the evaluation asks in words
the model was never trained on. Training halves are mostly composed (`compose`: frames over a
shared lexicon of synonyms), and a training template is sometimes misspelt (`typo`) or carries a
stray word (`distract`); neither ever touches a slot.
"""

from __future__ import annotations

import itertools
import random
import re
from dataclasses import dataclass

from helios.demo.kinds import Split
from helios.errors import HeliosError


class EmptyPhrasings(HeliosError):
    """A phrasing pool has an empty half."""


@dataclass(frozen=True, slots=True)
class Phrasings:
    """One pool of interchangeable phrasings, its training and held-out halves disjoint."""

    train: tuple[str, ...]
    held_out: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.train or not self.held_out:
            raise EmptyPhrasings(f"both halves need phrasings, got {self!r}")
        shared = (set(self.train) & set(self.held_out)) - {""}  # the empty filler may be in both
        if shared:
            raise EmptyPhrasings(f"phrasings in both halves: {sorted(shared)}")

    def pick(self, rng: random.Random, split: Split) -> str:
        if split is Split.TRAIN:
            template = rng.choice(self.train)
            roll = rng.random()
            if roll < TYPO_RATE:
                return typo(rng, template)
            if roll < TYPO_RATE + DISTRACTOR_RATE:
                return distract(rng, template)
            return template
        return rng.choice(self.held_out)


TYPO_RATE = 0.06  # training templates with one misspelt word (slots are never touched)
DISTRACTOR_RATE = 0.05  # training templates with one stray word between two words
DISTRACTORS = ("just", "really", "actually", "basically", "like", "kinda", "maybe", "um", "please", "quickly",
               "now", "so", "ok", "uh", "simply", "also", "btw", "hmm", "honestly", "again")
_LEXICON_SLOT = re.compile(r"\[(\w+)\]")
_PLAIN_WORD = re.compile(r"(?<![{\w])[a-z]{4,}(?![}\w])")


def compose(frames: tuple[str, ...], lexicon: dict[str, tuple[str, ...]], held_out: tuple[str, ...] = (),
            cap: int = 600) -> tuple[str, ...]:
    """The expansions of `frames` whose `[word]` slots take each synonym of `lexicon[word]` (format
    slots like `{s}` stay), first letter capitalized when the frame starts with a slot, in a stable
    order, without duplicates and without any of `held_out` (compared case- and punctuation-blind).
    A frame gives at most `cap` expansions (a stable sample), so no frame crowds out the others."""
    blocked = {_bare(text) for text in held_out}
    out: list[str] = []
    for frame in frames:
        names = _LEXICON_SLOT.findall(frame)
        choices = list(itertools.product(*(lexicon[name] for name in names)))
        if len(choices) > cap:
            choices = random.Random(f"helios-demo-compose:{frame}").sample(choices, cap)
        for choice in choices:
            pieces = _LEXICON_SLOT.split(frame)  # text, slot name, text, slot name, ..., text
            pieces[1::2] = choice
            text = "".join(pieces)
            text = re.sub(r"  +", " ", text).strip()
            text = re.sub(r" ([,.?!:])(?!\))", r"\1", text)
            if frame.startswith("[") and text:
                text = text[0].upper() + text[1:]
            if text and _bare(text) not in blocked:
                out.append(text)
    return tuple(dict.fromkeys(out))


def _bare(text: str) -> str:
    return re.sub(r"[^a-z0-9{}]+", " ", text.lower()).strip()


def distract(rng: random.Random, template: str) -> str:
    """`template` with one stray word (of DISTRACTORS) put at a space between two plain words (never
    beside a slot, so the text a slot carries stays apart from it)."""
    spaces = [index for index in range(1, len(template) - 1)
              if template[index] == " " and template[index - 1].isalpha() and template[index + 1].isalpha()]
    if not spaces:
        return template
    at = rng.choice(spaces)
    return f"{template[:at]} {rng.choice(DISTRACTORS)}{template[at:]}"


def typo(rng: random.Random, template: str) -> str:
    """`template` with one plain word (four letters or more, outside slots) misspelt: two letters
    swapped, one dropped or one doubled."""
    words = list(_PLAIN_WORD.finditer(template))
    if not words:
        return template
    match = rng.choice(words)
    word, at = match.group(), rng.randrange(1, len(match.group()) - 1)
    change = rng.randrange(3)
    if change == 0:
        word = word[:at] + word[at + 1] + word[at] + word[at + 2:]
    elif change == 1:
        word = word[:at] + word[at + 1:]
    else:
        word = word[:at] + word[at] + word[at:]
    return template[: match.start()] + word + template[match.end():]


PREFIXES = Phrasings(
    train=("", "", "", "", "", "", "", "", "Hey, ", "Quick question: ", "Please, ", "Hi! ", "Can you help? ", "OK, ",
           "So, ", "Hello, ", "I need this: ", "Tell me: ", "hey ", "hi, ", "Hello! ", "um, ", "ok so ", "Hmm, ",
           "Quick one: ", "btw ", "Alright, ", "Well, ", "Yo, ", "Hey you, ", "Good morning! ", "Sorry, ",
           "One more: ", "Next: ", "Help me out: ", "I wonder, ", "Dear assistant, ", "Hey Helios, "),
    held_out=("", "", "", "Hi there, ", "Excuse me, ", "Question: ", "Hey there! "),
)
SUFFIXES = Phrasings(
    train=("", "", "", "", "", "", "", "", " please", " Thanks!", " thanks", " Please.", " Thank you.", " quickly",
           " pls", " asap", " :)", " !", " ok?", " thank you!", " Thanks in advance.", " right now", " for me",
           " real quick", " now", " please?", " ty", " lol", " thanks a lot"),
    held_out=("", "", "", " thx", " Cheers!", " if you can"),
)

_ONES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
         "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen")
_TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")


def spell(number: int) -> str:
    """`number` (0..999) in English words: 42 -> 'forty-two', 305 -> 'three hundred five'."""
    if not 0 <= number <= 999:
        raise ValueError(f"spell takes 0..999, got {number}")
    if number < 20:
        return _ONES[number]
    if number < 100:
        tens, ones = divmod(number, 10)
        return _TENS[tens] + (f"-{_ONES[ones]}" if ones else "")
    hundreds, rest = divmod(number, 100)
    return f"{_ONES[hundreds]} hundred" + (f" {spell(rest)}" if rest else "")


def write_number(rng: random.Random, number: int, words: float = 0.15) -> str:
    """`number` as digits, or with probability `words` (for 0..99) in words."""
    if 0 <= number <= 99 and rng.random() < words:
        return spell(number)
    return str(number)


def dress(rng: random.Random, core: str, split: Split, *, casing: bool = True, punctuation: bool = True,
          fillers: bool = True) -> str:
    """`core` with a filler prefix or suffix, and sometimes lower case or a dropped final mark."""
    text = core
    if punctuation and text[-1:] in "?." and rng.random() < 0.25:
        text = text[:-1]
    if casing:
        roll = rng.random()
        if roll < 0.2:
            text = text.lower()
        elif roll < 0.3:
            text = text[:1].lower() + text[1:]
    if not fillers:
        return text
    prefix, suffix = PREFIXES.pick(rng, split), SUFFIXES.pick(rng, split)
    if prefix and text[:1].isupper() and rng.random() < 0.5:
        text = text[:1].lower() + text[1:]
    return f"{prefix}{text}{suffix}"
