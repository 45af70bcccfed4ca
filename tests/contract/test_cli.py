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
