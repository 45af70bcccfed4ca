"""The schema fuzzer (issue acceptance): schemathesis generates requests from the server's own
/openapi.json for both completion endpoints, a bounded number of examples each, and every response
must be below 500 (the one exception is the specification's permanent 503 for a prompt plus
`max_tokens` past the served context, which names its field) and every 400 must name its field.

The engine honours grammar masks (`MaskedEngine`), so structured output runs end to end."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings

from helios.runtime.limits import AdmissionLimits
from tests.frontend import tinyfront
from tests.runtime.scripted import MaskedEngine
from tests.server.inprocess import serving

EOS = tinyfront.token_id("<|im_end|>")
CONTEXT = 160
OUTSIDE_CAPACITY = {"max_tokens", "max_completion_tokens"}
EXAMPLES = 80  # per endpoint


@pytest.fixture(scope="module")
def served():
    engine = MaskedEngine([40, 41, 42, 43, 44, 45] * 8 + [EOS])
    with serving(engine, limits=AdmissionLimits(max_active=2, queue_capacity=4), context_tokens=CONTEXT) as running:
        yield running


def header(response, name: str) -> str | None:
    value = response.headers.get(name)
    return value[0] if isinstance(value, list) else value


def check(response) -> None:
    is_json = (header(response, "content-type") or "").startswith("application/json")
    error = response.json().get("error") if is_json else None
    if response.status_code == 400:
        assert error is not None and error["param"], response.text
    if response.status_code >= 500:
        # the specification's permanent 503: prompt plus max_tokens past the context, naming the field
        assert response.status_code == 503 and error is not None, response.text
        assert error["code"] == "context_length_exceeded" and error["param"] in OUTSIDE_CAPACITY, response.text
        assert header(response, "retry-after") is None
    if response.status_code == 200 and not is_json:  # a stream never ends with a presentation failure
        assert '"output_failed"' not in response.text and '"execution_failed"' not in response.text, response.text


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_no_server_error_and_every_400_names_its_field(served, path: str) -> None:
    base, _ = served
    schema = schemathesis.openapi.from_url(base + "/openapi.json")
    operation = schema[path]["POST"]
    statuses: list[int] = []

    @given(case=operation.as_strategy())
    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))  # fmt: skip
    def fuzz(case) -> None:
        response = case.call(base_url=base, timeout=30)
        statuses.append(response.status_code)
        check(response)

    fuzz()
    assert len(statuses) >= EXAMPLES // 2 and 200 in statuses, statuses


def test_the_server_is_idle_after_fuzzing(served) -> None:
    _, state = served
    assert state.admission.in_use == 0 and state.runtime.residency().requests == ()
