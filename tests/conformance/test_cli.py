"""`helios conform` on a signed core file: the JSON object of the issue, the table, exit codes,
one line for unusable input, and the audit of a trace written by an earlier run."""

from __future__ import annotations

import json

import pytest

from helios.cli import main
from tests.conformance.conftest import DEVICE


def _args(signed_core, *more: str) -> list[str]:
    core, public = signed_core
    return ["conform", str(core), "--accept", "acme/tests", "--trust", public, "--device", DEVICE, *more]


def test_json_output_of_the_operators_level(signed_core, capsys):
    capsys.readouterr()
    code = main(_args(signed_core, "--level", "operators", "--operator", "paged_attention", "--operator",
                      "rotary+paged_cache_write", "--json"))
    captured = capsys.readouterr()
    out = captured.out
    data = json.loads(out)
    assert code == 0 and out.count("\n") == 1
    assert data["verdict"] == "pass"
    (level,) = data["levels"]
    assert set(level) == {"level", "cases", "passed", "numeric_ties", "divergences"}
    assert level["level"] == "operators" and level["cases"] == level["passed"] >= 8
    # progress on stderr (not a terminal here): a line at every tenth of the cases, the JSON alone on stdout
    progress = captured.err.splitlines()
    cases = level["cases"]
    assert progress[0] == f"operator cases: 0/{cases} (0%)" and progress[-1] == f"operator cases: {cases}/{cases} (100%)"
    assert len(progress) <= 11 and all(line.startswith("operator cases: ") for line in progress)


def test_trace_written_then_audited(signed_core, tmp_path, capsys):
    workloads = tmp_path / "one.json"
    workloads.write_text(json.dumps({"name": "one", "runtime": {"max_active": 1, "pages": 4},
                                     "requests": [{"prompt": [3, 3, 3], "max_tokens": 2, "temperature": 0}]}))
    assert main(_args(signed_core, "--level", "trace", "--workloads", str(workloads),
                      "--trace-dir", str(tmp_path))) == 0
    captured = capsys.readouterr()
    table = captured.out
    assert table.splitlines()[0].split()[:3] == ["level", "case", "verdict"] and "trace  one" in table
    assert captured.err.splitlines() == ["workloads: 0/1 (0%)", "workloads: 1/1 (100%)"]
    assert main(_args(signed_core, "--audit", str(tmp_path / "one.trace"), "--json")) == 0
    assert json.loads(capsys.readouterr().out)["levels"][0]["passed"] == 1


def test_unusable_input_is_one_line(signed_core, tmp_path, capsys):
    core, public = signed_core
    # a core that does not authorize exits with the core reader's code, never 0 or 1 (divergence)
    assert main(["conform", str(core), "--accept", "someone/else", "--trust", public]) not in (0, 1)
    assert capsys.readouterr().err.strip().count("\n") == 0
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"name": "x", "requests": [{"prompt": "hi", "temperature": 0.5}]}))
    assert main(_args(signed_core, "--level", "e2e", "--workloads", str(bad))) == 2
    err = capsys.readouterr().err
    assert "needs a seed" in err and err.strip().count("\n") == 0


def test_serve_trace_records_what_production_served(signed_core, tmp_path, capsys):
    """`helios serve --runtime production --trace FILE` serves through the recorder; the file then
    audits clean with `helios conform --audit FILE`."""
    from conformance.e2e import drive, prepare_requests
    from helios.cli.compose import ServeOptions, load_state
    from helios.errors import HeliosError
    from tests.conformance.helpers import workload

    core_path, public = signed_core
    trace = tmp_path / "served.trace"
    state, core = load_state(ServeOptions(core=core_path, accept="acme/tests", trust=(public,),
                                          runtime="production", max_active=2, trace=trace))
    try:
        served = workload("served", {"prompt": "Hi there", "max_tokens": 3, "temperature": 0.8, "seed": 2},
                          {"prompt": [6, 6, 6], "max_tokens": 2, "temperature": 0})
        (requests,) = prepare_requests(core, served, copies=1)
        assert all(r.outcome == "finished" for r in drive(state.runtime, requests))
    finally:
        core.close()
    assert len(trace.read_text().splitlines()) > 4  # the header and every round
    assert main(_args(signed_core, "--audit", str(trace))) == 0
    assert "pass" in capsys.readouterr().out
    with pytest.raises(HeliosError, match="--runtime production"):
        ServeOptions(core=core_path, accept="acme/tests", trust=(public,), trace=trace)


def test_audit_compares_sequences_as_the_transport_wrote_them(signed_core, tmp_path, capsys):
    """A trace recorded past 2**31 submissions: rows echo the sequence modulo 2**31, and the audit
    compares them with the wrapped value, not the raw count."""
    import json

    from helios.cli.compose import ServeOptions, load_state
    from helios.runtime.completion import SEQUENCE_MODULUS
    from tests.conformance.helpers import workload

    core_path, public = signed_core
    trace = tmp_path / "served.trace"
    state, core = load_state(ServeOptions(core=core_path, accept="acme/tests", trust=(public,),
                                          runtime="production", max_active=1, trace=trace))
    try:
        from conformance.e2e import drive, prepare_requests

        (requests,) = prepare_requests(core, workload("w", {"prompt": [6, 6, 6], "max_tokens": 2, "temperature": 0}),
                                       copies=1)
        assert all(r.outcome == "finished" for r in drive(state.runtime, requests))
    finally:
        core.close()
    lines = trace.read_text().splitlines()
    shifted = [json.dumps(json.loads(line) | {"sequence": json.loads(line)["sequence"] + SEQUENCE_MODULUS})
               if json.loads(line).get("sequence") is not None else line for line in lines[1:]]
    assert any(line != original for line, original in zip(shifted, lines[1:], strict=True))
    wrapped = tmp_path / "wrapped.trace"
    wrapped.write_text("\n".join([lines[0], *shifted]) + "\n")
    assert main(_args(signed_core, "--audit", str(wrapped))) == 0
    assert "pass" in capsys.readouterr().out
