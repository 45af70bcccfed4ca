"""The demo tools: schemas the template renders, and the deterministic stand-in implementations."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from helios.demo.tools import TOOL_NAMES, TOOL_SCHEMAS, InvalidToolArguments, UnknownTool, demo_tool_result

NOON = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def test_schemas_require_every_parameter():
    assert TOOL_NAMES == ("get_weather", "convert_currency", "lookup_time")
    for schema in TOOL_SCHEMAS.values():
        parameters = schema["function"]["parameters"]
        assert parameters["required"] == list(parameters["properties"])


def test_results_are_deterministic_json():
    weather = json.loads(demo_tool_result("get_weather", {"city": "Oslo"}, NOON))
    assert weather == json.loads(demo_tool_result("get_weather", {"city": "Oslo"}, NOON))
    assert weather["city"] == "Oslo" and -5 <= weather["temperature_c"] <= 30
    money = json.loads(demo_tool_result("convert_currency", {"amount": 100, "from_currency": "USD", "to_currency": "EUR"}, NOON))
    assert money == {"amount": 100, "from_currency": "USD", "to_currency": "EUR", "result": 92.0}
    assert json.loads(demo_tool_result("lookup_time", {"city": "Tokyo"}, NOON))["time"] == "21:00"


def test_bad_calls_are_rejected():
    with pytest.raises(UnknownTool, match="get_news"):
        demo_tool_result("get_news", {})
    with pytest.raises(InvalidToolArguments, match="expected arguments"):
        demo_tool_result("get_weather", {"town": "Oslo"})
    with pytest.raises(InvalidToolArguments, match="currency code"):
        demo_tool_result("convert_currency", {"amount": 1, "from_currency": "USD", "to_currency": "XYZ"})
    with pytest.raises(InvalidToolArguments, match="not a number"):
        demo_tool_result("convert_currency", {"amount": "lots", "from_currency": "USD", "to_currency": "EUR"})
