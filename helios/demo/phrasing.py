"""Surface variation of demo prompts (host side): phrasing pools split into training and held-out
halves, casing, punctuation, filler words, and numbers spelled in words.

Every pool is a `Phrasings` pair: the training half is what the corpus shows, the held-out half is
written apart and only used for held-out and validation prompts, so the evaluation asks in words
the model was never trained on.
"""

from __future__ import annotations

import random
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
        return rng.choice(self.train if split is Split.TRAIN else self.held_out)


PREFIXES = Phrasings(
    train=("", "", "", "", "", "Hey, ", "Quick question: ", "Please, ", "Hi! ", "Can you help? ", "OK, ", "So, ",
           "Hello, ", "I need this: ", "Tell me: "),
    held_out=("", "", "", "Hi there, ", "Excuse me, ", "Question: ", "Hey there! "),
)
SUFFIXES = Phrasings(
    train=("", "", "", "", "", " please", " Thanks!", " thanks", " Please.", " Thank you.", " quickly"),
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
