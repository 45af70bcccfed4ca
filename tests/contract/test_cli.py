"""`helios contract check` and `helios contract json`, through the real entry point."""

from __future__ import annotations

import subprocess
import sys

from helios.contract import to_json
from tests.contract import valid


def helios(*args):
    return subprocess.run([sys.executable, "-m", "helios", *args], capture_output=True, text=True, timeout=60)


def test_check_prints_ok_for_a_valid_contract(tmp_path):
    path = tmp_path / "deployment.pb"
    path.write_bytes(valid.deployment().SerializeToString(deterministic=True))
    result = helios("contract", "check", str(path))
    assert (result.returncode, result.stdout) == (0, "ok\n")


def test_check_prints_one_line_per_error_and_fails(tmp_path):
    deployment = valid.deployment()
    deployment.contract.model.frontend.tool_parser = 0
    deployment.contract.model.graphs[2].value_bindings[0].destination = "nowhere"
    path = tmp_path / "deployment.json"
    path.write_text(to_json(deployment))
    result = helios("contract", "check", str(path))
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        "model.graphs[2].value_bindings[0].destination: 'nowhere' is not a registered transport buffer",
        "model.frontend.tool_parser: tool parser is unspecified; it must name an implementation",
    ]
    assert "Traceback" not in result.stderr


def test_check_reports_unknown_json_fields(tmp_path):
    path = tmp_path / "deployment.json"
    path.write_text(to_json(valid.deployment()).replace('"servedId"', '"servedID"', 1))
    result = helios("contract", "check", str(path))
    assert result.returncode == 1
    assert result.stdout.startswith("contract: ")
    assert "servedID" in result.stdout


def test_json_round_trips_through_check(tmp_path):
    binary = tmp_path / "deployment.pb"
    binary.write_bytes(valid.deployment().SerializeToString(deterministic=True))
    shown = helios("contract", "json", str(binary))
    assert shown.returncode == 0
    text = tmp_path / "deployment.json"
    text.write_text(shown.stdout)
    assert helios("contract", "check", str(text)).stdout == "ok\n"


def test_unreadable_file_is_one_line_not_a_traceback(tmp_path):
    path = tmp_path / "garbage"
    path.write_bytes(b"\xff\xfe\x00garbage")
    result = helios("contract", "check", str(path))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and result.stderr.startswith("helios contract: ")


def test_check_reads_a_verified_core(tmp_path):
    from helios.core import ResourceInput, generate_keypair, load_private_key, write_core
    from helios.proto import core_pb2

    key = tmp_path / "publisher.key"
    generate_keypair(key)
    core = tmp_path / "model.hcore"
    resources = [ResourceInput(rid, core_pb2.RESOURCE_KIND_PROGRAM, b"program bytes")
                 for rid in ("program/initialize_4", "program/prefill_16", "program/decode_4",
                             "program/speculative_4x3")]
    write_core(core, publisher="acme/tests", signing_key=load_private_key(key), deployment=valid.deployment(),
               resources=resources)
    result = helios("contract", "check", str(core), "--accept", "acme/tests", "--trust", f"{key}.pub")
    assert (result.returncode, result.stdout) == (0, "ok\n"), result.stderr
    untrusted = helios("contract", "check", str(core))
    assert untrusted.returncode == 2 and "--accept" in untrusted.stderr and "Traceback" not in untrusted.stderr
    refused = helios("contract", "check", str(core), "--accept", "acme/other", "--trust", f"{key}.pub")
    assert refused.returncode == 3 and "does not equal the signed publisher namespace" in refused.stderr
