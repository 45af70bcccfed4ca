"""The concept table of the demo's generated tool space (host side): what tools can do, every name,
wording and request template of each, the argument values requests carry, and each tool's result
and the answer that cites it. `helios.demo.toolspace` draws schemas from it.
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

from helios.demo.kinds import Split
from helios.demo.phrasing import Phrasings, spell
from helios.demo.tool_descriptions import WORDINGS, descriptions
from helios.demo.tool_requests import INTENTS, requests
from helios.demo.tools import convert_amount
from helios.demo.toolspace import Concept, Parameter, Spoken, Values, split_options
from helios.demo.vocabulary import CITIES, CURRENCY_PER_USD, NAMES, WEATHER_CONDITIONS

ROOMS = ("kitchen", "bedroom", "living room", "office", "bathroom", "garage", "hallway")
GROCERIES = ("milk", "eggs", "bread", "apples", "rice", "coffee", "butter", "cheese", "tomatoes", "pasta",
             "bananas", "tea", "onions", "yogurt")
REMINDERS = ("call Alice", "buy milk", "water the plants", "take my pills", "walk the dog", "pay the rent",
             "send the report", "book a table", "stretch", "check the oven", "call my mother", "feed the cat")
SUBJECTS = ("the meeting", "lunch tomorrow", "the report", "the trip", "our project", "the invoice", "dinner plans")
PHRASES = {
    "good morning": {"French": "bonjour", "Spanish": "buenos días", "German": "guten Morgen", "Italian": "buongiorno"},
    "thank you": {"French": "merci", "Spanish": "gracias", "German": "danke", "Italian": "grazie"},
    "good night": {"French": "bonne nuit", "Spanish": "buenas noches", "German": "gute Nacht", "Italian": "buona notte"},
    "see you soon": {"French": "à bientôt", "Spanish": "hasta pronto", "German": "bis bald", "Italian": "a presto"},
    "how are you": {"French": "comment ça va", "Spanish": "cómo estás", "German": "wie geht's", "Italian": "come stai"},
}
LANGUAGES = ("French", "Spanish", "German", "Italian")
CUISINES = ("italian", "japanese", "mexican", "indian", "thai", "french")
STOCKS = ("AAPL", "MSFT", "GOOG", "AMZN", "TSLA", "NVDA", "IBM", "META")
SONGS = ("Blue Sky", "Night Train", "Golden Hour", "Paper Moon", "River Song", "Summer Rain", "City Lights")
TOPICS = ("sports", "science", "business", "music", "travel", "technology", "health")
RESTAURANT_WORDS = ("Luna", "Sakura", "Casa", "Bella", "Golden", "Green", "Blue", "Little")
RESTAURANT_KINDS = ("Bistro", "Kitchen", "Garden", "House", "Table", "Corner")
HOTEL_WORDS = ("Grand", "Royal", "Park", "Central", "Harbor", "Plaza")


def _city(rng: random.Random) -> str:
    return rng.choice(CITIES)


def _count(rng: random.Random, low: int, high: int) -> tuple[int, str]:
    value = rng.randint(low, high)
    return value, spell(value) if value <= 12 and rng.random() < 0.25 else str(value)


def _weather_draw(rng: random.Random) -> tuple[Values, Spoken]:
    city, unit = _city(rng), rng.choice(("celsius", "fahrenheit"))
    return {"city": city, "unit": unit}, {"city": city, "unit": unit.capitalize()}


def _weather_answer(rng: random.Random, values: Values) -> tuple[dict[str, Any], str, tuple[str, ...]]:
    fahrenheit = values.get("unit") == "fahrenheit"
    temperature = rng.randint(20, 95) if fahrenheit else rng.randint(-10, 35)
    condition, mark = rng.choice(WEATHER_CONDITIONS), "°F" if fahrenheit else "°C"
    payload = {"city": values["city"], "temperature": temperature, "unit": "F" if fahrenheit else "C",
               "condition": condition}
    return payload, f"It is {temperature}{mark} and {condition} in {values['city']}.", (f"{temperature}{mark}", condition)


def _time_draw(rng: random.Random) -> tuple[Values, Spoken]:
    city = _city(rng)
    return {"city": city}, {"city": city}


def _time_answer(rng: random.Random, values: Values) -> tuple[dict[str, Any], str, tuple[str, ...]]:
    time_text = f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}"
    return {"city": values["city"], "time": time_text}, f"It is {time_text} in {values['city']}.", (time_text,)


def _currency_draw(rng: random.Random) -> tuple[Values, Spoken]:
    source, target = rng.sample(sorted(CURRENCY_PER_USD), 2)
    amount: int | float = rng.randint(1, 999) if rng.random() < 0.8 else rng.randint(1, 99) + 0.5
    return {"amount": amount, "source": source, "target": target}, {"amount": str(amount), "source": source,
                                                                     "target": target}


def _currency_answer(rng: random.Random, values: Values) -> tuple[dict[str, Any], str, tuple[str, ...]]:
    result = convert_amount(values["amount"], values["source"], values["target"])
    payload = {"amount": values["amount"], "from": values["source"], "to": values["target"], "result": result}
    return payload, f"{values['amount']} {values['source']} is {result} {values['target']}.", (str(result), values["target"])


def _email_draw(rng: random.Random) -> tuple[Values, Spoken]:
    name, subject, urgent = rng.choice(NAMES), rng.choice(SUBJECTS), rng.random() < 0.5
    return ({"recipient": name, "subject": subject, "urgent": urgent},
            {"recipient": name, "subject": subject, "urgent": "an urgent" if urgent else "a non-urgent"})


def _email_answer(rng: random.Random, values: Values) -> tuple[dict[str, Any], str, tuple[str, ...]]:
    message_id = rng.randint(100, 999)
    payload = {"status": "sent", "to": values["recipient"], "id": message_id}
    return payload, f"Done: the email to {values['recipient']} was sent.", (values["recipient"], "sent")


def _reminder_draw(rng: random.Random) -> tuple[Values, Spoken]:
    minutes, spoken = _count(rng, 1, 120)
    text = rng.choice(REMINDERS)
    return {"text": text, "minutes": minutes}, {"text": text, "minutes": spoken}


def _reminder_answer(rng: random.Random, values: Values) -> tuple[dict[str, Any], str, tuple[str, ...]]:
    payload = {"status": "scheduled", "text": values["text"], "in_minutes": values.get("minutes", 60)}
    when = f" in {values['minutes']} minutes" if "minutes" in values else ""
    return payload, f"OK, I will remind you to {values['text']}{when}.", (values["text"],)


def _timer_draw(rng: random.Random) -> tuple[Values, Spoken]:
    minutes, spoken = _count(rng, 1, 90)
    return {"minutes": minutes}, {"minutes": spoken}


def _timer_answer(rng: random.Random, values: Values) -> tuple[dict[str, Any], str, tuple[str, ...]]:
    return ({"status": "running", "minutes": values["minutes"]},
            f"Your timer for {values['minutes']} minutes is running.", (str(values["minutes"]),))


def _restaurant_draw(rng: random.Random) -> tuple[Values, Spoken]:
    city, cuisine = _city(rng), rng.choice(CUISINES)
    people, spoken = _count(rng, 2, 12)
    return {"city": city, "cuisine": cuisine, "people": people}, {"city": city, "cuisine": cuisine, "people": spoken}


def _restaurant_answer(rng: random.Random, values: Values) -> tuple[dict[str, Any], str, tuple[str, ...]]:
    first, second = (f"{rng.choice(RESTAURANT_WORDS)} {kind}" for kind in rng.sample(RESTAURANT_KINDS, 2))
    payload = {"results": [{"name": first, "rating": rng.randint(35, 50) / 10},
                           {"name": second, "rating": rng.randint(35, 50) / 10}]}
    return payload, f"I found {first} and {second} in {values['city']}.", (first, second)


def _flight_draw(rng: random.Random) -> tuple[Values, Spoken]:
    origin, destination = rng.sample(CITIES, 2)
    passengers, spoken = _count(rng, 1, 6)
    return ({"origin": origin, "destination": destination, "passengers": passengers},
            {"origin": origin, "destination": destination, "passengers": spoken})


def _flight_answer(rng: random.Random, values: Values) -> tuple[dict[str, Any], str, tuple[str, ...]]:
    flight = f"{rng.choice('ABCDEFGHJKLMNPRSTUVWXYZ')}{rng.choice('ABCDEFGHJKLMNPRSTUVWXYZ')}{rng.randint(100, 999)}"
    departure, price = f"{rng.randint(5, 22):02d}:{rng.choice((0, 15, 30, 45)):02d}", rng.randint(80, 900)
    payload = {"flight": flight, "departure": departure, "price": price}
    return (payload, f"Flight {flight} from {values['origin']} to {values['destination']} leaves at {departure} "
                     f"and costs {price} dollars.", (flight, departure))


def _stock_draw(rng: random.Random) -> tuple[Values, Spoken]:
    symbol = rng.choice(STOCKS)
    return {"symbol": symbol}, {"symbol": symbol}


def _stock_answer(rng: random.Random, values: Values) -> tuple[dict[str, Any], str, tuple[str, ...]]:
    price = rng.randint(1000, 90000) / 100
    return {"symbol": values["symbol"], "price": price}, f"{values['symbol']} is trading at {price} dollars.", (str(price),)


def _translate_draw(rng: random.Random) -> tuple[Values, Spoken]:
    phrase, language = rng.choice(sorted(PHRASES)), rng.choice(LANGUAGES)
    return {"text": phrase, "language": language}, {"text": phrase, "language": language}


def _translate_answer(rng: random.Random, values: Values) -> tuple[dict[str, Any], str, tuple[str, ...]]:
    language = values.get("language", "French")
    translation = PHRASES[values["text"]][language]
    return ({"translation": translation, "language": language},
            f'In {language}, "{values["text"]}" is "{translation}".', (translation,))


def _shopping_draw(rng: random.Random) -> tuple[Values, Spoken]:
    items = rng.sample(GROCERIES, rng.randint(1, 4))
    spoken = items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
    return {"items": items}, {"items": spoken}


def _shopping_answer(rng: random.Random, values: Values) -> tuple[dict[str, Any], str, tuple[str, ...]]:
    items = values["items"]
    spoken = items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
    return ({"status": "added", "count": len(items)}, f"I added {spoken} to your shopping list.", tuple(items))


def _lights_draw(rng: random.Random) -> tuple[Values, Spoken]:
    room, on = rng.choice(ROOMS), rng.random() < 0.5
    return {"room": room, "on": on}, {"room": room, "on": "on" if on else "off"}


def _lights_answer(rng: random.Random, values: Values) -> tuple[dict[str, Any], str, tuple[str, ...]]:
    state = "on" if values["on"] else "off"
    return ({"room": values["room"], "on": values["on"]}, f"The lights in the {values['room']} are now {state}.",
            (values["room"], state))


def _thermostat_draw(rng: random.Random) -> tuple[Values, Spoken]:
    temperature = rng.randint(32, 56) / 2
    room = rng.choice(ROOMS)
    return {"temperature": temperature, "room": room}, {"temperature": str(temperature), "room": room}


def _thermostat_answer(rng: random.Random, values: Values) -> tuple[dict[str, Any], str, tuple[str, ...]]:
    return ({"status": "ok", "temperature": values["temperature"]},
            f"The thermostat is set to {values['temperature']} degrees.", (str(values["temperature"]),))


def _distance_draw(rng: random.Random) -> tuple[Values, Spoken]:
    origin, destination = rng.sample(CITIES, 2)
    return {"origin": origin, "destination": destination}, {"origin": origin, "destination": destination}


def _distance_answer(rng: random.Random, values: Values) -> tuple[dict[str, Any], str, tuple[str, ...]]:
    kilometers = rng.randint(50, 15000)
    return ({"from": values["origin"], "to": values["destination"], "km": kilometers},
            f"It is {kilometers} km from {values['origin']} to {values['destination']}.", (str(kilometers),))


CITY = Parameter("city", ("city", "location", "city_name", "place", "town", "where"), "string",
                 ("The city name, e.g. Paris", "Name of the city", "City to look up", "The place, e.g. Tokyo",
                  "Which city"))


def _city_parameter(role: str, names: tuple[str, ...], descriptions: tuple[str, ...]) -> Parameter:
    return Parameter(role, names, "string", descriptions)


_WRITTEN: tuple[Concept, ...] = (
    Concept(
        "weather", ("get", "fetch", "lookup", "check", "query", "current", ""),
        ("weather", "forecast", "current_weather", "weather_report", "conditions"),
        ("Get the current weather in a city.", "Current weather for a city", "Returns the weather conditions at a place.",
         "Look up today's weather and temperature.", "Weather forecast for a location", "Check the weather somewhere",
         "Reports temperature and conditions for a city."),
        (CITY, Parameter("unit", ("unit", "units", "temperature_unit", "scale"), "string",
                         ("Temperature unit", "celsius or fahrenheit", "The unit of the temperature"),
                         enum=("celsius", "fahrenheit"), required=False)),
        Phrasings(
            train=("What's the weather like in {city}?", "What is the weather in {city}?", "Is it raining in {city}?",
                   "How warm is it in {city} today?", "Tell me the weather in {city}.", "Weather in {city}?",
                   "What's the weather in {city} in {unit}?", "How hot is it in {city}? Answer in {unit}.",
                   "Is it cold in {city} right now?", "Give me the forecast for {city}.",
                   "What's the temperature in {city} in {unit}?", "Do I need an umbrella in {city}?"),
            held_out=("Could you check the weather for {city}?", "How is the weather over in {city}?",
                      "I'm flying to {city}: what's the weather there?", "Weather report for {city} in {unit}, please.",
                      "Is it sunny in {city}?")),
        "the weather in {city}", _weather_draw, _weather_answer, fixed_names=("get_weather",)),
    Concept(
        "time", ("get", "lookup", "fetch", "current", "check", ""),
        ("time", "local_time", "time_zone_time", "clock", "current_time"),
        ("Look up the current local time in a city.", "Current local time for a city", "Returns the time of day at a place.",
         "Get the clock time somewhere in the world", "What time it is in a given city"),
        (CITY,),
        Phrasings(
            train=("What time is it in {city}?", "What's the local time in {city}?", "Tell me the current time in {city}.",
                   "Do you know the time in {city}?", "Time in {city}?", "What's the time in {city} now?",
                   "Is it late in {city}?", "Current time in {city}, please."),
            held_out=("Could you tell me what time it is in {city}?", "I need the local time of {city}.",
                      "How late is it over in {city}?")),
        "the time in {city}", _time_draw, _time_answer, fixed_names=("lookup_time",)),
    Concept(
        "currency", ("convert", "exchange", "get", "calculate", ""),
        ("currency", "money", "exchange_rate", "currency_amount", "fx"),
        ("Convert an amount of money from one currency to another.", "Currency conversion at today's rates",
         "Exchange money between two currencies", "Converts a sum from one currency into another."),
        (Parameter("amount", ("amount", "value", "sum", "quantity"), "number",
                   ("The amount to convert", "How much money", "Amount in the source currency")),
         Parameter("source", ("from_currency", "source", "base", "from_code", "source_currency"), "string",
                   ("Three-letter code of the source currency", "Currency to convert from", "ISO code, e.g. USD")),
         Parameter("target", ("to_currency", "target", "quote", "to_code", "target_currency"), "string",
                   ("Three-letter code of the target currency", "Currency to convert to", "ISO code, e.g. EUR"))),
        Phrasings(
            train=("How much is {amount} {source} in {target}?", "Convert {amount} {source} to {target}.",
                   "What is {amount} {source} worth in {target}?", "I have {amount} {source}. How many {target} is that?",
                   "{amount} {source} to {target}?", "Change {amount} {source} into {target}.",
                   "How many {target} do I get for {amount} {source}?"),
            held_out=("Could you exchange {amount} {source} into {target}?", "What would {amount} {source} be in {target}?",
                      "I'd like {amount} {source} in {target}, how much is it?")),
        "{amount} {source} in {target}", _currency_draw, _currency_answer, fixed_names=("convert_currency",)),
    Concept(
        "email", ("send", "compose", "write", ""),
        ("email", "mail", "message", "email_message"),
        ("Send an email to a contact.", "Compose and send an email", "Sends a mail message to someone.",
         "Email a person with a subject line"),
        (_city_parameter("recipient", ("recipient", "to", "contact", "person", "addressee"),
                         ("Who receives the email", "Name of the recipient", "The contact to write to")),
         Parameter("subject", ("subject", "topic", "title", "about"), "string",
                   ("Subject line", "What the email is about", "The topic of the message")),
         Parameter("urgent", ("urgent", "high_priority", "important", "is_urgent"), "boolean",
                   ("Whether the email is urgent", "Mark as high priority", "true for urgent mail"), required=False)),
        Phrasings(
            train=("Send an email to {recipient} about {subject}.", "Email {recipient} about {subject}.",
                   "Write {recipient} an email about {subject}.", "Send {urgent} email to {recipient} about {subject}.",
                   "Please mail {recipient} regarding {subject}.", "Send {recipient} {urgent} message about {subject}."),
            held_out=("Could you drop {recipient} an email about {subject}?", "Shoot {recipient} {urgent} email on {subject}.",
                      "I need to email {recipient} concerning {subject}.")),
        "to email {recipient} about {subject}", _email_draw, _email_answer),
    Concept(
        "reminder", ("create", "set", "add", "schedule", ""),
        ("reminder", "alert", "reminder_note", "notification"),
        ("Create a reminder for later.", "Set a reminder with a message", "Schedules a reminder notification.",
         "Remind the user about something"),
        (Parameter("text", ("text", "message", "note", "what", "task"), "string",
                   ("What to be reminded of", "The reminder text", "Message of the reminder")),
         Parameter("minutes", ("minutes", "delay_minutes", "in_minutes", "after_minutes"), "integer",
                   ("Minutes from now", "Delay in minutes", "How many minutes to wait"), required=False)),
        Phrasings(
            train=("Remind me to {text} in {minutes} minutes.", "Set a reminder to {text}.", "Remind me to {text}.",
                   "In {minutes} minutes, remind me to {text}.", "Create a reminder: {text}.",
                   "Don't let me forget to {text} in {minutes} minutes."),
            held_out=("Could you remind me to {text} in {minutes} minutes?", "I must {text}, remind me please.",
                      "Give me a reminder to {text} after {minutes} minutes.")),
        "a reminder to {text}", _reminder_draw, _reminder_answer),
    Concept(
        "timer", ("set", "start", "create", ""),
        ("timer", "countdown", "kitchen_timer", "stopwatch_timer"),
        ("Start a countdown timer.", "Set a timer for some minutes", "Starts a timer that rings when done.",
         "Countdown timer in minutes"),
        (Parameter("minutes", ("minutes", "duration", "length_minutes", "duration_minutes"), "integer",
                   ("Length of the timer in minutes", "How many minutes", "Duration in minutes")),),
        Phrasings(
            train=("Set a timer for {minutes} minutes.", "Start a {minutes} minute timer.", "Timer for {minutes} minutes.",
                   "Count down {minutes} minutes.", "Can you set a timer of {minutes} minutes?"),
            held_out=("Could you start a countdown of {minutes} minutes?", "I need a timer: {minutes} minutes.",
                      "Ring me in {minutes} minutes with a timer.")),
        "a timer for {minutes} minutes", _timer_draw, _timer_answer),
    Concept(
        "restaurants", ("find", "search", "lookup", "get", ""),
        ("restaurants", "places_to_eat", "restaurant", "dining"),
        ("Find restaurants in a city.", "Search for places to eat", "Looks up restaurants by cuisine and city.",
         "Restaurant search"),
        (CITY, Parameter("cuisine", ("cuisine", "food_type", "kind_of_food", "style"), "string",
                         ("Type of food", "The cuisine", "Kind of restaurant"), enum=CUISINES),
         Parameter("people", ("people", "party_size", "guests", "seats"), "integer",
                   ("Number of people", "How many guests", "Party size"), required=False)),
        Phrasings(
            train=("Find a {cuisine} restaurant in {city}.", "Where can I eat {cuisine} food in {city}?",
                   "Find a {cuisine} place in {city} for {people} people.", "I want {cuisine} food in {city}.",
                   "Search {cuisine} restaurants in {city} for {people}."),
            held_out=("Any good {cuisine} restaurants in {city}?", "Could you look for {cuisine} food in {city}, "
                      "a table for {people}?", "We are {people} people in {city} and want {cuisine} food.")),
        "{cuisine} restaurants in {city}", _restaurant_draw, _restaurant_answer),
    Concept(
        "flights", ("search", "find", "book", "get", ""),
        ("flights", "flight", "plane_tickets", "air_travel"),
        ("Search flights between two cities.", "Find plane tickets", "Looks up flights from one city to another.",
         "Flight search"),
        (_city_parameter("origin", ("origin", "from_city", "departure", "source_city", "leaving_from"),
                         ("City of departure", "Where the flight leaves from", "Origin city")),
         _city_parameter("destination", ("destination", "to_city", "arrival", "target_city", "going_to"),
                         ("City of arrival", "Where the flight goes", "Destination city")),
         Parameter("passengers", ("passengers", "travelers", "seats", "adults"), "integer",
                   ("Number of passengers", "How many travelers", "Seats needed"), required=False)),
        Phrasings(
            train=("Find a flight from {origin} to {destination}.", "Search flights from {origin} to {destination}.",
                   "I need a flight from {origin} to {destination} for {passengers} people.",
                   "Book a flight from {origin} to {destination}.", "Flights {origin} to {destination}?",
                   "Get me {passengers} tickets from {origin} to {destination}."),
            held_out=("Could you look up flights between {origin} and {destination}?",
                      "How do I fly from {origin} to {destination}? We are {passengers}.",
                      "Plane tickets from {origin} to {destination}, please.")),
        "a flight from {origin} to {destination}", _flight_draw, _flight_answer),
    Concept(
        "stock", ("get", "fetch", "lookup", "quote", ""),
        ("stock_price", "share_price", "stock", "ticker_price"),
        ("Get the latest price of a stock.", "Stock quote by ticker symbol", "Returns the current share price.",
         "Look up a stock's price"),
        (Parameter("symbol", ("symbol", "ticker", "stock_symbol", "code"), "string",
                   ("Ticker symbol, e.g. AAPL", "The stock's symbol", "Exchange ticker")),),
        Phrasings(
            train=("What is the price of {symbol}?", "How much is {symbol} stock?", "Get me a quote for {symbol}.",
                   "What's {symbol} trading at?", "Stock price of {symbol}?", "Check the share price of {symbol}."),
            held_out=("Could you look up {symbol} for me?", "Where is {symbol} trading today?",
                      "Give me the latest {symbol} price.")),
        "the price of {symbol}", _stock_draw, _stock_answer),
    Concept(
        "translate", ("translate", "get", ""),
        ("text", "translation", "phrase", "words"),
        ("Translate text into another language.", "Translation service", "Translates a phrase.",
         "Turn text into a different language"),
        (Parameter("text", ("text", "phrase", "source_text", "words"), "string",
                   ("Text to translate", "The phrase", "What to translate")),
         Parameter("language", ("language", "target_language", "to_language", "lang"), "string",
                   ("Language to translate into", "Target language", "The language"), enum=LANGUAGES)),
        Phrasings(
            train=('Translate "{text}" into {language}.', 'How do you say "{text}" in {language}?',
                   'What is "{text}" in {language}?', 'Say "{text}" in {language}.',
                   "Translate {text} to {language}."),
            held_out=('Could you put "{text}" into {language}?', 'I need "{text}" in {language}.',
                      'What\'s the {language} for "{text}"?')),
        'the {language} for "{text}"', _translate_draw, _translate_answer),
    Concept(
        "shopping", ("add_to", "update", "append_to", ""),
        ("shopping_list", "grocery_list", "cart", "list"),
        ("Add items to the shopping list.", "Put groceries on the list", "Adds things to buy to a list.",
         "Shopping list manager"),
        (Parameter("items", ("items", "products", "things", "groceries"), "array",
                   ("Items to add", "The list of products", "What to buy")),),
        Phrasings(
            train=("Add {items} to my shopping list.", "Put {items} on the grocery list.", "I need to buy {items}.",
                   "Add {items} to the list.", "Please note that we need {items}."),
            held_out=("Could you put {items} on my list?", "We're out of {items}, add them please.",
                      "Remember to buy {items}.")),
        "to add {items} to the list", _shopping_draw, _shopping_answer),
    Concept(
        "lights", ("set", "switch", "toggle", "control", ""),
        ("lights", "light", "lamp", "room_lights"),
        ("Switch the lights in a room on or off.", "Turn lights on or off", "Controls the lamps in the house.",
         "Smart light switch"),
        (Parameter("room", ("room", "area", "location", "zone"), "string",
                   ("Which room", "The room name", "Room, e.g. kitchen")),
         Parameter("on", ("on", "state", "power", "turn_on"), "boolean",
                   ("true to switch on, false for off", "Power state", "Whether the lights are on"))),
        Phrasings(
            train=("Turn {on} the lights in the {room}.", "Switch {on} the {room} lights.", "Lights {on} in the {room}.",
                   "Please turn the {room} lights {on}.", "Can you switch the light {on} in the {room}?"),
            held_out=("Could you flip the {room} lights {on}?", "I want the lights {on} in the {room}.",
                      "Set the {room} lamp {on}.")),
        "the {room} lights switched", _lights_draw, _lights_answer),
    Concept(
        "thermostat", ("set", "adjust", "change", ""),
        ("thermostat", "temperature", "heating", "room_temperature"),
        ("Set the thermostat to a temperature.", "Adjust the heating", "Changes the target room temperature.",
         "Thermostat control"),
        (Parameter("temperature", ("temperature", "degrees", "target", "celsius"), "number",
                   ("Target temperature in degrees", "Degrees Celsius", "The new set point")),
         Parameter("room", ("room", "area", "zone"), "string", ("Which room", "Room name"), required=False)),
        Phrasings(
            train=("Set the thermostat to {temperature} degrees.", "Make it {temperature} degrees in the {room}.",
                   "Change the heating to {temperature}.", "Set the {room} to {temperature} degrees.",
                   "I want {temperature} degrees."),
            held_out=("Could you put the heating at {temperature} degrees?", "Warm the {room} to {temperature} degrees.",
                      "Thermostat at {temperature}, please.")),
        "the thermostat at {temperature} degrees", _thermostat_draw, _thermostat_answer),
    Concept(
        "distance", ("get", "compute", "measure", "calculate", ""),
        ("distance", "travel_distance", "distance_between", "km_between"),
        ("Distance between two cities in kilometers.", "Compute how far apart two places are",
         "Returns the travel distance between cities.", "Measure a distance"),
        (_city_parameter("origin", ("origin", "from_city", "start", "city_a", "source"),
                         ("First city", "Where to start", "Origin")),
         _city_parameter("destination", ("destination", "to_city", "end", "city_b", "target"),
                         ("Second city", "Where to go", "Destination"))),
        Phrasings(
            train=("How far is {origin} from {destination}?", "Distance from {origin} to {destination}?",
                   "How many km from {origin} to {destination}?", "How far apart are {origin} and {destination}?",
                   "What is the distance between {origin} and {destination}?"),
            held_out=("Could you tell me how far {origin} is from {destination}?",
                      "Is {destination} far from {origin}?", "Kilometers between {origin} and {destination}?")),
        "the distance from {origin} to {destination}", _distance_draw, _distance_answer),
)



def _with_composed_wordings(concept: Concept) -> Concept:
    """`concept` with its written training requests and those composed from its intent (indirect
    requests, needs, third-person asks, extra clauses), and descriptions composed from its wording;
    the held-out requests and descriptions stay as written, and no composed one repeats them."""
    written = concept.requests
    composed = requests(INTENTS[concept.key], written.held_out)
    held_descriptions = split_options(concept.descriptions, Split.HELD_OUT)
    return replace(concept, requests=Phrasings(train=tuple(dict.fromkeys(written.train + composed)),
                                               held_out=written.held_out),
                   composed_descriptions=descriptions(WORDINGS[concept.key], held_descriptions))


CONCEPTS: tuple[Concept, ...] = tuple(_with_composed_wordings(concept) for concept in _WRITTEN)
CONCEPTS_BY_KEY: dict[str, Concept] = {concept.key: concept for concept in CONCEPTS}
