"""Contract versions 1-3 decode (golden fixtures kept forever), and the JSON human form is strict."""

from __future__ import annotations

from pathlib import Path

import pytest

from helios.contract import PreparedContract, from_json, load_deployment, to_json
from helios.contract import errors as e
from helios.contract.jsonform import UnreadableContract
from tests.contract import valid

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize("version", [1, 2, 3])
def test_every_released_contract_version_still_decodes(version):
    # NOTE: these fixtures are the standing rule "engine upgrades keep serving previously supported
    # cores without re-export": never edit them; add a new one for each new version.
    deployment = load_deployment(FIXTURES / f"deployment-v{version}.json")
    contract = PreparedContract.decode(deployment.contract, deployment.manifest)
    assert contract.version == version
    assert contract.vocabulary.sampled_tokens == 60


def test_version_1_derives_geometry_and_input_range():
    deployment = load_deployment(FIXTURES / "deployment-v1.json")
    contract = PreparedContract.decode(deployment.contract, deployment.manifest)
    assert (contract.vocabulary.logits_width, contract.vocabulary.histogram_width) == (60, 60)
    assert contract.vocabulary.mask_words == 2
    assert contract.input_vocabulary.input_tokens == 60
    assert contract.input_vocabulary.image_sentinels == ()


def test_version_3_requires_explicit_geometry():
    serving, manifest = valid.serving(), valid.manifest()
    serving.model.vocabulary.mask_words = 0
    with pytest.raises(e.InvalidGeometry) as raised:
        PreparedContract.decode(serving, manifest)
    assert raised.value.path == "model.vocabulary.mask_words"


def test_json_round_trip_is_exact():
    deployment = valid.deployment()
    assert from_json(to_json(deployment)) == deployment


def test_unknown_semantic_json_field_is_rejected_with_its_path():
    text = to_json(valid.deployment()).replace('"pageTokens": 16', '"pageTokens": 16, "pageColour": "red"', 1)
    with pytest.raises(e.UnknownJsonField) as raised:
        from_json(text)
    assert raised.value.path == "contract.model.cache"
    assert "pageColour" in str(raised.value)


def test_unknown_enum_name_in_json_is_rejected():
    text = to_json(valid.deployment()).replace('"TOOL_PARSER_QWEN_CODER"', '"TOOL_PARSER_MYSTERY"', 1)
    with pytest.raises(e.UnknownJsonField) as raised:
        from_json(text)
    assert raised.value.path == "contract.model.frontend.tool_parser"


def test_load_deployment_reads_binary_and_rejects_garbage(tmp_path):
    binary = tmp_path / "deployment.pb"
    binary.write_bytes(valid.deployment().SerializeToString(deterministic=True))
    assert load_deployment(binary) == valid.deployment()
    garbage = tmp_path / "garbage.pb"
    garbage.write_bytes(b"\xff\xff\xff\xff")
    with pytest.raises(UnreadableContract):
        load_deployment(garbage)
