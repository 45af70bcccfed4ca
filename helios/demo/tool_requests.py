"""Composed training requests of the demo's tool concepts (host side): each concept's intent said
in many ways, so a request that needs a tool is recognised however it is put.

A concept's intent is written once as parts: `actions` (what to do, a verb phrase: "book a flight
from {origin} to {destination}"), `things` (what is wanted, a noun phrase: "a flight from {origin}
to {destination}"), `needs` (a situation that calls for it, stated rather than asked: "I have to get
from {origin} to {destination}") and `clauses` (an optional argument said in a sentence of its own:
"There are {passengers} of us."). Shared frames put the parts into commands, questions ("how do
I…", "can you…"), wishes, third-person requests and statements of need, with or without an extra
clause; `compose` expands them and drops any held-out phrasing. The result is the training half of
the concept's request pool; the held-out half is untouched.
"""

from __future__ import annotations

from dataclasses import dataclass

from helios.demo.phrasing import compose


@dataclass(frozen=True, slots=True)
class Intent:
    """The parts a concept's requests are composed from; every part names each required role."""

    actions: tuple[str, ...]  # verb phrases, e.g. "set a timer for {minutes} minutes"
    things: tuple[str, ...]  # noun phrases, e.g. "a {minutes} minute timer"
    needs: tuple[str, ...]  # situations stated in the first person, e.g. "my pasta needs {minutes} minutes"
    clauses: tuple[str, ...] = ("",)  # sentences carrying an optional role, e.g. "We are {people}."


# [do]: an action; [thing]: a noun phrase; [need]: a situation; [who]: a third person; [extra]: a
# clause with an optional argument (or none); [aside]: a remark that carries no argument.
FRAMES = (
    "[do].[extra]", "Please [do].[extra]", "Can you [do]?[extra]", "Could you [do] for me?[extra]",
    "Would you [do]?[extra]", "How do I [do]?[extra]", "How can I [do]?[extra]", "Is there a way to [do]?[extra]",
    "I'd like to [do].[extra]", "I want to [do].[extra]", "I need to [do].[extra]", "Help me [do].[extra]",
    "[aside] [do], please.[extra]", "[who] wants to [do].[extra]", "[who] asked me to [do]. Can you?[extra]",
    "Can you help [who] [do]?[extra]", "I need [thing].[extra]", "I'm looking for [thing].[extra]",
    "Can I get [thing]?[extra]", "Any chance of [thing]?[extra]", "[who] needs [thing].[extra]",
    "[thing], please.[extra]", "[aside] I need [thing].[extra]", "[need].[extra]", "[need]. Can you sort it out?[extra]",
    "[need]. What can you do?[extra]", "[need], so please help.[extra]", "[aside] [need].[extra]",
    "[need]. A friend said you could help.[extra]",
)
LEXICON: dict[str, tuple[str, ...]] = {
    "who": ("my wife", "my husband", "my friend", "my boss", "my mom", "my dad", "my colleague", "a client",
            "my sister", "my brother", "my partner", "our team", "my neighbour", "my kid"),
    "aside": ("Quick thing:", "By the way,", "Before I forget:", "Hmm.", "It's for work.", "I'm in a hurry.",
              "One more thing:", "Listen,", "OK so", "Heads up:"),
}


def requests(intent: Intent, held_out: tuple[str, ...], cap: int = 40) -> tuple[str, ...]:
    """The composed training requests of `intent`: every frame over its parts, a stable sample of at
    most `cap` per frame, none of `held_out` (compared case- and punctuation-blind)."""
    lexicon = {**LEXICON, "do": intent.actions, "thing": intent.things, "need": intent.needs,
               "extra": tuple(f" {clause}" if clause else "" for clause in intent.clauses)}
    return compose(FRAMES, lexicon, held_out, cap=cap)


INTENTS: dict[str, Intent] = {
    "weather": Intent(
        actions=("check the weather in {city}", "get the forecast for {city}", "find out how warm it is in {city}",
                 "see if it rains in {city}", "look up the weather for {city}", "know what to wear in {city}"),
        things=("the weather in {city}", "a forecast for {city}", "the temperature in {city}",
                "the weather report of {city}", "today's conditions in {city}"),
        needs=("I'm going to {city} today", "I'm packing for {city}", "I wonder if I need a coat in {city}",
               "I am walking around {city} this afternoon", "we have a picnic in {city}"),
        clauses=("", "", "In {unit}.", "Use {unit}.", "Give it in {unit}.", "I prefer {unit}.")),
    "time": Intent(
        actions=("check the time in {city}", "find out the local time in {city}", "see what time it is in {city}",
                 "look up the clock in {city}", "know the hour in {city}"),
        things=("the time in {city}", "the local time of {city}", "the current hour in {city}",
                "the clock time in {city}"),
        needs=("I have to call someone in {city}", "I don't want to wake my friend in {city}",
               "I have a meeting with people in {city}", "my flight lands in {city} soon")),
    "currency": Intent(
        actions=("convert {amount} {source} to {target}", "change {amount} {source} into {target}",
                 "find out what {amount} {source} is in {target}", "exchange {amount} {source} for {target}",
                 "turn {amount} {source} into {target}"),
        things=("{amount} {source} in {target}", "the {target} value of {amount} {source}",
                "a conversion of {amount} {source} to {target}"),
        needs=("I have {amount} {source} and I'm paying in {target}", "I got paid {amount} {source} but I spend {target}",
               "my bill is {amount} {source} and my card is in {target}", "I'm bringing {amount} {source} to a {target} country")),
    "email": Intent(
        actions=("email {recipient} about {subject}", "send {recipient} a mail about {subject}",
                 "write to {recipient} about {subject}", "let {recipient} know about {subject} by email",
                 "drop {recipient} a line about {subject}"),
        things=("an email to {recipient} about {subject}", "a mail to {recipient} on {subject}",
                "a message to {recipient} regarding {subject}"),
        needs=("{recipient} has to hear about {subject}", "{recipient} is waiting for news on {subject}",
               "I owe {recipient} an email about {subject}", "{recipient} asked me about {subject}"),
        clauses=("", "", "It's {urgent} one.", "Make it {urgent} email.", "This is {urgent} matter.")),
    "reminder": Intent(
        actions=("remind me to {text}", "set a reminder to {text}", "make sure I {text}",
                 "nudge me to {text}", "note that I have to {text}"),
        things=("a reminder to {text}", "a nudge to {text}", "a note to {text}"),
        needs=("I keep forgetting to {text}", "I have to {text} later", "I must not forget to {text}",
               "I will forget to {text} otherwise"),
        clauses=("", "", "In {minutes} minutes.", "Do it in {minutes} minutes.", "In about {minutes} minutes.",
                 "Not now, in {minutes} minutes.")),
    "timer": Intent(
        actions=("set a timer for {minutes} minutes", "start a {minutes} minute countdown",
                 "time {minutes} minutes", "count down from {minutes} minutes", "alert me after {minutes} minutes",
                 "ping me when {minutes} minutes are up"),
        things=("a timer for {minutes} minutes", "a {minutes} minute countdown", "a countdown of {minutes} minutes",
                "an alarm in {minutes} minutes"),
        needs=("the pasta needs {minutes} minutes", "my tea steeps for {minutes} minutes",
               "I'm taking a {minutes} minute break", "the cake bakes for {minutes} minutes",
               "I want to nap for {minutes} minutes")),
    "restaurants": Intent(
        actions=("find {cuisine} food in {city}", "look for a {cuisine} restaurant in {city}",
                 "eat {cuisine} in {city}", "get a table at a {cuisine} place in {city}",
                 "search for {cuisine} restaurants in {city}"),
        things=("a {cuisine} restaurant in {city}", "somewhere to eat {cuisine} in {city}",
                "a good {cuisine} place in {city}", "{cuisine} food in {city}"),
        needs=("we are hungry in {city} and love {cuisine} food", "I'm craving {cuisine} food in {city}",
               "I'm in {city} tonight and want {cuisine}", "we're celebrating in {city} with {cuisine} food"),
        clauses=("", "", "We are {people}.", "There are {people} of us.", "A table for {people}.",
                 "For {people} people.", "We'll be {people}.")),
    "flights": Intent(
        actions=("fly from {origin} to {destination}", "book a flight from {origin} to {destination}",
                 "get from {origin} to {destination} by plane", "find flights from {origin} to {destination}",
                 "travel by air from {origin} to {destination}", "get plane tickets from {origin} to {destination}"),
        things=("a flight from {origin} to {destination}", "tickets from {origin} to {destination}",
                "a plane from {origin} to {destination}", "flights between {origin} and {destination}"),
        needs=("I have to get from {origin} to {destination}", "I'm in {origin} and must be in {destination} tomorrow",
               "we are travelling from {origin} to {destination} next week",
               "my trip goes from {origin} to {destination}"),
        clauses=("", "", "We are {passengers}.", "There are {passengers} of us.", "For {passengers} people.",
                 "{passengers} passengers.", "We travel as {passengers}.")),
    "stock": Intent(
        actions=("look up {symbol}", "check {symbol}", "see how {symbol} is doing", "get the price of {symbol}",
                 "find out what {symbol} trades at", "check on {symbol} stock"),
        things=("the price of {symbol}", "a quote for {symbol}", "the {symbol} share price", "{symbol}'s price"),
        needs=("I own some {symbol} shares", "I'm thinking of buying {symbol}", "I want to sell my {symbol} stock",
               "I heard {symbol} moved a lot")),
    "translate": Intent(
        actions=('translate "{text}" into {language}', 'say "{text}" in {language}', 'put "{text}" in {language}',
                 'write "{text}" in {language}', 'get "{text}" in {language}'),
        things=('"{text}" in {language}', 'the {language} words for "{text}"', 'a {language} version of "{text}"'),
        needs=('I want to tell my {language} friend "{text}"', 'I\'m visiting a {language} speaker and must say "{text}"',
               'I don\'t know how to say "{text}" in {language}')),
    "shopping": Intent(
        actions=("add {items} to my list", "put {items} on the shopping list", "note {items} for shopping",
                 "get {items} on my grocery list", "remember {items} for me", "buy {items}"),
        things=("{items} on my shopping list", "{items} on the grocery list", "a note to buy {items}"),
        needs=("we have no {items} left", "we ran out of {items}", "the fridge has no {items}",
               "I used the last {items}", "we need {items} for the weekend")),
    "lights": Intent(
        actions=("turn the {room} lights {on}", "switch {on} the light in the {room}", "put the {room} lamps {on}",
                 "get the {room} lights {on}", "flip the lights {on} in the {room}"),
        things=("the {room} lights {on}", "the lamps in the {room} {on}", "lights {on} in the {room}"),
        needs=("the {room} lights should be {on}", "I want the {room} lights {on}",
               "I'm going to the {room} and want the lights {on}")),
    "thermostat": Intent(
        actions=("set the thermostat to {temperature} degrees", "make it {temperature} degrees",
                 "change the heating to {temperature}", "get the temperature to {temperature} degrees",
                 "heat the house to {temperature} degrees"),
        things=("the thermostat at {temperature} degrees", "{temperature} degrees", "the heating at {temperature}"),
        needs=("it's freezing, I want {temperature} degrees", "it's too warm, I want {temperature} degrees",
               "I sleep best at {temperature} degrees"),
        clauses=("", "", "In the {room}.", "That's for the {room}.", "Only the {room}.")),
    "distance": Intent(
        actions=("find out how far {origin} is from {destination}", "measure the distance from {origin} to {destination}",
                 "check the km from {origin} to {destination}", "know how far it is from {origin} to {destination}"),
        things=("the distance from {origin} to {destination}", "the km between {origin} and {destination}",
                "how far {origin} is from {destination}"),
        needs=("I'm driving from {origin} to {destination}", "I want to cycle from {origin} to {destination}",
               "my friend walks from {origin} to {destination}")),
}
