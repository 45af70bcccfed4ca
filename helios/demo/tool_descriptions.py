"""Composed training descriptions of the demo's tool concepts (host side): what a tool does, said
in many ways, so a schema is recognised by what its description means, not by a wording seen before.

A concept's written descriptions are few (two to five, a third of them held out), and a model that
saw only the training third's exact strings learns them by heart: offered a timer described in
words it never saw, it answers that no tool fits. Each concept therefore also has a `Wording`:
`actions` (imperative verb phrases: "start a countdown") and `subjects` (noun phrases: "kitchen
timer"). Shared frames put them into commands, third-person sentences, tool and service labels;
`compose` expands them and drops any held-out description. The result joins the training split of
the concept's descriptions; the held-out descriptions stay as written and unseen.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from helios.demo.phrasing import compose


@dataclass(frozen=True, slots=True)
class Wording:
    """The parts a concept's descriptions are composed from, in lower case."""

    actions: tuple[str, ...]  # imperative verb phrases, e.g. "set a timer"
    subjects: tuple[str, ...]  # noun phrases, e.g. "countdown timer"


# [act]: an imperative action; [acts]: the same in the third person; [subject]: a noun phrase.
FRAMES = (
    "[act].", "[act]", "[acts].", "[acts]", "[subject]", "[subject].", "[subject] tool", "[subject] service",
    "[subject] API", "Use this to [act].", "Lets you [act].", "Tool to [act].", "Call this to [act].",
    "Helps the user [act].", "[subject]: [acts].", "[acts] on request.", "Can [act].",
)


def third_person(action: str) -> str:
    """`action` with its first word, a verb, in the third person singular: "fetch the time" ->
    "fetches the time", "carry on" -> "carries on", "look up x" -> "looks up x"."""
    verb, _, rest = action.partition(" ")
    if re.search(r"(s|sh|ch|x|z|o)$", verb):
        verb += "es"
    elif re.search(r"[^aeiou]y$", verb):
        verb = verb[:-1] + "ies"
    else:
        verb += "s"
    return f"{verb} {rest}".rstrip()


def descriptions(wording: Wording, held_out: tuple[str, ...], cap: int = 12) -> tuple[str, ...]:
    """The composed training descriptions of `wording`: every frame over its parts, a stable sample
    of at most `cap` per frame, none of `held_out` (compared case- and punctuation-blind)."""
    lexicon = {"act": wording.actions, "acts": tuple(third_person(action) for action in wording.actions),
               "subject": wording.subjects}
    return compose(FRAMES, lexicon, held_out, cap=cap)


WORDINGS: dict[str, Wording] = {
    "weather": Wording(
        actions=("get the weather for a city", "look up the current weather", "fetch the forecast for a location",
                 "check today's temperature in a city", "find out the weather in a town",
                 "report the conditions and temperature of a city", "get weather data for any city"),
        subjects=("weather lookup", "current weather by city", "weather forecast", "city weather report",
                  "temperature and conditions for a city", "live weather")),
    "time": Wording(
        actions=("get the local time in a city", "look up what time it is in a city", "find the current time of a place",
                 "tell the time in any city", "check the hour in a given town", "fetch the time for a time zone"),
        subjects=("local time lookup", "world clock", "current time by city", "time zone clock", "city time")),
    "currency": Wording(
        actions=("convert money between currencies", "exchange an amount into another currency",
                 "change a sum of money to a different currency", "calculate a currency conversion",
                 "turn an amount of one currency into another"),
        subjects=("currency converter", "exchange rates", "money conversion", "foreign exchange calculator",
                  "currency exchange")),
    "email": Wording(
        actions=("send an email", "write an email to someone", "mail a message to a contact",
                 "compose an email about a topic", "send a message by email", "email someone"),
        subjects=("email sender", "mail service", "outgoing email", "email composer", "messaging by email")),
    "reminder": Wording(
        actions=("create a reminder", "remind the user of a task", "schedule a reminder for later",
                 "set a reminder about something", "add a reminder note", "make sure the user remembers a task"),
        subjects=("reminders", "reminder scheduler", "to-do reminder", "reminder service",
                  "notes that remind you later")),
    "timer": Wording(
        actions=("set a timer", "start a countdown", "run a timer for some minutes", "count down minutes",
                 "start a kitchen timer", "time a number of minutes", "create a countdown timer"),
        subjects=("timer", "countdown", "minute timer", "kitchen timer", "countdown clock", "timer in minutes")),
    "restaurants": Wording(
        actions=("find restaurants", "search for restaurants in a city", "look up places to eat by cuisine",
                 "find somewhere to eat", "suggest restaurants of a cuisine in a city", "locate dining options"),
        subjects=("restaurant finder", "restaurant lookup", "dining search", "restaurants by city and cuisine",
                  "places to eat")),
    "flights": Wording(
        actions=("search for flights", "find flights between an origin and a destination", "look up plane tickets",
                 "book air travel between two cities", "find a plane between cities", "list flights between cities"),
        subjects=("flight search", "flight finder", "airline tickets", "plane ticket lookup",
                  "flights between cities")),
    "stock": Wording(
        actions=("get a stock price", "look up the price of a share", "quote a ticker symbol",
                 "check what a stock trades at", "fetch the share price for a ticker", "find the market price of a stock"),
        subjects=("stock quotes", "share prices", "ticker price lookup", "stock market price", "stock price")),
    "translate": Wording(
        actions=("translate text", "translate a phrase into another language", "put words into a different language",
                 "convert text to another language", "say a phrase in a foreign language"),
        subjects=("translator", "translation", "language translation", "phrase translator",
                  "text translation service")),
    "shopping": Wording(
        actions=("add items to a shopping list", "put products on the grocery list", "note things to buy",
                 "update the shopping list", "append groceries to the list"),
        subjects=("shopping list", "grocery list", "list of things to buy", "shopping list editor",
                  "grocery list manager")),
    "lights": Wording(
        actions=("turn the lights on or off", "switch a room's lights", "control the lighting in a room",
                 "toggle the lights", "dim or power the lights in a room", "switch lamps on or off"),
        subjects=("light switch", "lighting control", "smart lights", "room lights", "lamp control")),
    "thermostat": Wording(
        actions=("set the thermostat", "change the room temperature", "adjust the thermostat to some degrees",
                 "control the heating", "set the temperature of a room", "warm or cool a room"),
        subjects=("thermostat", "heating control", "room temperature setting", "climate control",
                  "smart thermostat")),
    "distance": Wording(
        actions=("measure the distance between two cities", "compute how far one place is from another",
                 "get the kilometers between two cities", "find the distance from a city to another",
                 "calculate the travel distance"),
        subjects=("distance calculator", "distance between cities", "kilometer distance", "route distance",
                  "how far apart two places are")),
}
