"""The demo's tools (host side): OpenAI-style schemas, result payloads and how answers cite them.

The demo model learns to call `get_weather(city)`, `convert_currency(amount, from_currency,
to_currency)` and `lookup_time(city)`. This module owns their schemas (what the chat template
renders into the system prompt), the JSON payload a tool message carries back, and
`demo_tool_result`, a deterministic stand-in implementation for examples and the demo server.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from helios.demo.vocabulary import CITY_UTC_OFFSET, CURRENCY_PER_USD, WEATHER_CONDITIONS
from helios.errors import HeliosError


class UnknownTool(HeliosError):
    """A tool name is not one of the demo's tools."""


class InvalidToolArguments(HeliosError):
    """A demo tool was called with missing, extra or unusable arguments."""


def _schema(name: str, description: str, properties: dict[str, dict[str, str]]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": list(properties)},
        },
    }


TOOL_SCHEMAS: dict[str, dict[str, Any]] = {
    "get_weather": _schema(
        "get_weather",
        "Get the current weather in a city.",
        {"city": {"type": "string", "description": "The city name, e.g. Paris"}},
    ),
    "convert_currency": _schema(
        "convert_currency",
        "Convert an amount of money from one currency to another.",
        {
            "amount": {"type": "number", "description": "The amount to convert"},
            "from_currency": {"type": "string", "description": "Three-letter code of the source currency"},
            "to_currency": {"type": "string", "description": "Three-letter code of the target currency"},
        },
    ),
    "lookup_time": _schema(
        "lookup_time",
        "Look up the current local time in a city.",
        {"city": {"type": "string", "description": "The city name, e.g. Tokyo"}},
    ),
}

TOOL_NAMES: tuple[str, ...] = tuple(TOOL_SCHEMAS)


def convert_amount(amount: float, from_currency: str, to_currency: str) -> float:
    """The demo exchange: through the dollar, rounded to cents."""
    for code in (from_currency, to_currency):
        if code not in CURRENCY_PER_USD:
            raise InvalidToolArguments(f"convert_currency: unknown currency code {code!r}")
    return round(amount / CURRENCY_PER_USD[from_currency] * CURRENCY_PER_USD[to_currency], 2)


def weather_payload(city: str, temperature_c: int, condition: str) -> str:
    return json.dumps({"city": city, "temperature_c": temperature_c, "condition": condition})


def currency_payload(amount: int, from_currency: str, to_currency: str, result: float) -> str:
    return json.dumps(
        {"amount": amount, "from_currency": from_currency, "to_currency": to_currency, "result": result}
    )


def time_payload(city: str, time_text: str) -> str:
    return json.dumps({"city": city, "time": time_text})


def _check_arguments(name: str, arguments: Mapping[str, Any]) -> None:
    expected = set(TOOL_SCHEMAS[name]["function"]["parameters"]["properties"])
    if set(arguments) != expected:
        raise InvalidToolArguments(
            f"{name}: expected arguments {sorted(expected)}, got {sorted(arguments)}"
        )


def demo_tool_result(name: str, arguments: Mapping[str, Any], now: datetime | None = None) -> str:
    """Run a demo tool deterministically (weather from a hash of the city and date) and return its
    JSON payload, as a client would put it in a `tool` message."""
    if name not in TOOL_SCHEMAS:
        raise UnknownTool(f"unknown tool {name!r}; the demo tools are {', '.join(TOOL_NAMES)}")
    _check_arguments(name, arguments)
    now = now or datetime.now(UTC)
    if name == "convert_currency":
        try:
            amount = float(arguments["amount"])
        except (TypeError, ValueError):
            raise InvalidToolArguments(f"convert_currency: amount {arguments['amount']!r} is not a number") from None
        whole = int(amount) if amount == int(amount) else amount
        result = convert_amount(amount, str(arguments["from_currency"]), str(arguments["to_currency"]))
        return currency_payload(whole, str(arguments["from_currency"]), str(arguments["to_currency"]), result)
    city = str(arguments["city"])
    if name == "lookup_time":
        local = now + timedelta(hours=CITY_UTC_OFFSET.get(city, 0))
        return time_payload(city, local.strftime("%H:%M"))
    digest = hashlib.sha256(f"{city}:{now.date().isoformat()}".encode()).digest()
    return weather_payload(city, digest[0] % 36 - 5, WEATHER_CONDITIONS[digest[1] % len(WEATHER_CONDITIONS)])
