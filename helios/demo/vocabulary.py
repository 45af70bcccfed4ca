"""Fixed tables the demo tasks draw from (host side): names, cities, units, currencies, weather.

Everything a task needs to know about the world lives here, so that the corpus, the tools and the
scorer agree on it. The tables are small on purpose: the demo model has a few million parameters.
"""

from __future__ import annotations

from dataclasses import dataclass

from helios.errors import HeliosError


class InvalidUnitConversion(HeliosError):
    """A unit conversion row is malformed (empty names, non-positive factor or amount range)."""


NAMES: tuple[str, ...] = (
    "Alice", "Bob", "Carol", "David", "Emma", "Frank", "Grace", "Henry", "Irene", "Jack",
    "Karen", "Leo", "Maria", "Nina", "Oscar", "Paula", "Quinn", "Rosa", "Sam", "Tina",
    "Umar", "Vera", "Walter", "Xenia", "Yusuf", "Zoe", "Ahmed", "Bianca", "Chen", "Diego",
    "Elena", "Farah", "Hugo", "Ines", "Jonas", "Kenji", "Lena", "Mateo", "Noor", "Priya",
)  # fmt: skip

CITIES: tuple[str, ...] = (
    "Paris", "London", "Tokyo", "Berlin", "Madrid", "Rome", "Lisbon", "Vienna", "Prague", "Oslo",
    "Dublin", "Athens", "Cairo", "Nairobi", "Lagos", "Delhi", "Mumbai", "Seoul", "Beijing", "Sydney",
    "Toronto", "Chicago", "Boston", "Denver", "Lima", "Bogota", "Santiago", "Havana", "Manila", "Hanoi",
    "Warsaw", "Zurich", "Helsinki", "Istanbul", "Dubai", "Singapore", "New York", "Mexico City",
    "Buenos Aires", "Cape Town",
)  # fmt: skip

WEATHER_CONDITIONS: tuple[str, ...] = ("sunny", "cloudy", "rainy", "windy", "snowy", "foggy", "clear")

# Units per one US dollar; a conversion goes through the dollar and is rounded to cents.
CURRENCY_PER_USD: dict[str, float] = {
    "USD": 1.0,
    "EUR": 0.92,
    "GBP": 0.79,
    "JPY": 151.0,
    "CHF": 0.88,
    "CAD": 1.36,
    "AUD": 1.52,
    "INR": 83.0,
}

# Hours added to UTC for each city's demo clock (standard time, rounded to whole hours).
CITY_UTC_OFFSET: dict[str, int] = {
    "Paris": 1, "London": 0, "Tokyo": 9, "Berlin": 1, "Madrid": 1, "Rome": 1, "Lisbon": 0, "Vienna": 1,
    "Prague": 1, "Oslo": 1, "Dublin": 0, "Athens": 2, "Cairo": 2, "Nairobi": 3, "Lagos": 1, "Delhi": 5,
    "Mumbai": 5, "Seoul": 9, "Beijing": 8, "Sydney": 10, "Toronto": -5, "Chicago": -6, "Boston": -5,
    "Denver": -7, "Lima": -5, "Bogota": -5, "Santiago": -4, "Havana": -5, "Manila": 8, "Hanoi": 7,
    "Warsaw": 1, "Zurich": 1, "Helsinki": 2, "Istanbul": 3, "Dubai": 4, "Singapore": 8, "New York": -5,
    "Mexico City": -6, "Buenos Aires": -3, "Cape Town": 2,
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class UnitConversion:
    """One row of the unit table: `amount` of `source` is `amount * factor` of `target`."""

    source: str  # plural unit name as written in prompts, e.g. "kilometers"
    target: str  # plural unit name of the result, e.g. "meters"
    singular: str  # the source unit for a quantity of one, e.g. "kilometer"
    target_singular: str  # the target unit for a quantity of one, e.g. "meter"
    factor: int  # how many target units one source unit is
    max_amount: int  # amounts are drawn from 1..max_amount
    source_abbreviations: tuple[str, ...]  # other ways prompts write the source unit, e.g. ("km",)
    target_abbreviations: tuple[str, ...]  # other ways prompts write the target unit

    def __post_init__(self) -> None:
        if not (self.source and self.target and self.singular and self.target_singular):
            raise InvalidUnitConversion(f"unit names must be non-empty, got {self!r}")
        if not (self.source_abbreviations and self.target_abbreviations):
            raise InvalidUnitConversion(f"{self.source}->{self.target} needs at least one abbreviation of each unit")
        if self.factor < 2 or self.max_amount < 1:
            raise InvalidUnitConversion(
                f"factor must be >= 2 and max_amount >= 1 in {self.source}->{self.target}, "
                f"got factor={self.factor}, max_amount={self.max_amount}"
            )


def _row(source: str, target: str, factor: int, max_amount: int, source_abbreviations: tuple[str, ...],
         target_abbreviations: tuple[str, ...]) -> UnitConversion:
    singular = {"feet": "foot", "inches": "inch"}
    return UnitConversion(source, target, singular.get(source, source[:-1]), singular.get(target, target[:-1]),
                          factor, max_amount, source_abbreviations, target_abbreviations)


UNIT_CONVERSIONS: tuple[UnitConversion, ...] = (
    _row("kilometers", "meters", 1000, 99, ("km",), ("m",)),
    _row("meters", "centimeters", 100, 99, ("m",), ("cm",)),
    _row("centimeters", "millimeters", 10, 99, ("cm",), ("mm",)),
    _row("meters", "millimeters", 1000, 99, ("m",), ("mm",)),
    _row("kilograms", "grams", 1000, 99, ("kg",), ("g",)),
    _row("liters", "milliliters", 1000, 99, ("l", "L"), ("ml", "mL")),
    _row("hours", "minutes", 60, 12, ("h", "hrs"), ("min", "mins")),
    _row("minutes", "seconds", 60, 12, ("min", "mins"), ("s", "sec")),
    _row("hours", "seconds", 3600, 12, ("h", "hrs"), ("s", "sec")),
    _row("days", "hours", 24, 12, ("d",), ("h", "hrs")),
    _row("weeks", "days", 7, 12, ("wk", "wks"), ("d",)),
    _row("feet", "inches", 12, 12, ("ft",), ("in",)),
    _row("yards", "feet", 3, 12, ("yd", "yds"), ("ft",)),
    _row("pounds", "ounces", 16, 12, ("lb", "lbs"), ("oz",)),
)

# Copy and reverse strings are capital letters: the tokenizer keeps each capital a token of its own,
# so a string tokenizes the same inside a sentence and at the start of an answer.
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
