"""The command-line face of the core format: keys, pack, verify, inspect, migrate."""

from __future__ import annotations

import json

import pytest

from helios.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture()
def packed(tmp_path, capsys):
    key = tmp_path / "publisher.key"
    assert run(capsys, "keys", "new", "--out", str(key))[0] == 0
    (tmp_path / "tokenizer.json").write_text('{"model": {}}')
    (tmp_path / "w0.bin").write_bytes(bytes(range(256)) * 100)
    (tmp_path / "contract.json").write_text('{"servedId": "tiny", "contextTokens": 512}')
    core = tmp_path / "model.hcore"
    code, out, _ = run(capsys, "core", "pack", "--out", str(core), "--publisher", "acme/models", "--key", str(key),
                       "--contract", str(tmp_path / "contract.json"),
                       f"tokenizer:{tmp_path / 'tokenizer.json'}", f"weight:embed={tmp_path / 'w0.bin'}")
    assert code == 0 and "payload core of 2 resources" in out
    return tmp_path, core, key


def test_verify_sound_core(capsys, packed):
    tmp_path, core, key = packed
    code, out, err = run(capsys, "verify", str(core), "--accept", "acme/models", "--trust", f"{key}.pub")
    assert code == 0 and err == ""
    assert out.count("\n") == 1 and out.startswith("ok: ") and "2 resources" in out and "'acme/models'" in out


@pytest.mark.parametrize(
    ("tamper", "error"),
    [("flip-resource", "ChunkDigestMismatch"), ("append", "LayoutGap"), ("accept", "NamespaceNotAccepted"),
     ("trust", "UntrustedKey"), ("flip-signature", "SignatureInvalid")],
)
def test_verify_unsound_core_exits_3_with_one_line(capsys, packed, tamper, error):
    tmp_path, core, key = packed
    data = bytearray(core.read_bytes())
    accept, trust = "acme/models", f"{key}.pub"
    if tamper == "flip-resource":
        data[200] ^= 1
    elif tamper == "append":
        data += b"\0"
    elif tamper == "flip-signature":
        data[-100] ^= 1  # inside the envelope or signature near the end of the body
    elif tamper == "accept":
        accept = "acme/models "
    else:
        run(capsys, "keys", "new", "--out", str(tmp_path / "stranger.key"))
        trust = str(tmp_path / "stranger.key.pub")
    core.write_bytes(bytes(data))
    code, out, err = run(capsys, "verify", str(core), "--accept", accept, "--trust", trust)
    assert code == 3 and out == ""
    assert err.count("\n") == 1 and f": {error}: " in err and "Traceback" not in err


def test_inspect_table_and_json(capsys, packed):
    tmp_path, core, key = packed
    code, out, _ = run(capsys, "inspect", str(core))
    assert code == 0
    assert "UNVERIFIED" in out and "(claimed, unverified)" in out and "served_id='tiny'" in out
    assert "embed" in out and "WEIGHT" in out and "TOKENIZER" in out and "every byte accounted for" in out
    code, out, _ = run(capsys, "inspect", str(core), "--json", "--trust", f"{key}.pub")
    report = json.loads(out)
    assert report["signature"]["status"] == "verified"
    assert [r["id"] for r in report["resources"]] == ["tokenizer.json", "embed"]
    assert report["contract"]["context_tokens"] == 512


def test_pack_index_v4_and_migrate(capsys, packed):
    tmp_path, _, key = packed
    aes = tmp_path / "aes.key"
    assert run(capsys, "keys", "protection", "--out", str(aes))[0] == 0
    v4, v6 = tmp_path / "v4.hcore", tmp_path / "v6.hcore"
    code, _, _ = run(capsys, "core", "pack", "--out", str(v4), "--publisher", "acme", "--key", str(key),
                     "--format", "index-v4", "--protection-key", str(aes), str(tmp_path / "w0.bin"))
    assert code == 0
    code, _, err = run(capsys, "verify", str(v4), "--accept", "acme", "--trust", f"{key}.pub")
    assert code == 3 and "ProtectionKeyMissing" in err
    code, out, _ = run(capsys, "verify", str(v4), "--accept", "acme", "--trust", f"{key}.pub",
                       "--protection-key", str(aes))
    assert code == 0 and "index-v4" in out
    code, _, _ = run(capsys, "core", "migrate", str(v4), "--out", str(v6), "--trust", f"{key}.pub",
                     "--accept", "acme", "--key", str(key), "--protection-key", str(aes))
    assert code == 0
    code, out, _ = run(capsys, "verify", str(v6), "--accept", "acme", "--trust", str(tmp_path))
    assert code == 0 and "index-v6" in out


def test_pack_refuses_bad_input_in_one_line(capsys, tmp_path, packed):
    _, _, key = packed
    code, _, err = run(capsys, "core", "pack", "--out", str(tmp_path / "x.hcore"), "--publisher", "p",
                       "--key", str(key), str(tmp_path / "missing.bin"))
    assert code == 3 and err.count("\n") == 1 and "cannot read" in err
    assert not (tmp_path / "x.hcore").exists() and not (tmp_path / "x.hcore.partial").exists()


@pytest.mark.parametrize(
    "command", [["keys", "new"], ["core", "pack"], ["core", "migrate"], ["core", "relocate"], ["verify"], ["inspect"]]
)
def test_help_teaches(capsys, command):
    with pytest.raises(SystemExit) as caught:
        main([*command, "--help"])
    assert caught.value.code == 0
    out = capsys.readouterr().out
    assert "usage: helios" in out and len(out.splitlines()) > 8


def test_inspect_reports_what_is_wrong(capsys, packed):
    tmp_path, core, key = packed
    data = bytearray(core.read_bytes())
    body_offset = int.from_bytes(data[8:16], "little")
    data[body_offset + 10] ^= 1  # inside the signed envelope
    core.write_bytes(bytes(data))
    code, out, _ = run(capsys, "inspect", str(core), "--json", "--trust", f"{key}.pub")
    assert code == 0 and json.loads(out)["signature"]["status"] == "invalid"
    (tmp_path / "junk").write_bytes(b"not a core at all")
    code, out, err = run(capsys, "inspect", str(tmp_path / "junk"))
    assert code == 3 and out == "" and err.count("\n") == 1 and "BadMagic" in err


def test_unwritable_and_missing_files_are_one_line(capsys, tmp_path, packed):
    _, core, key = packed
    code, _, err = run(capsys, "core", "pack", "--out", str(tmp_path / "no" / "such" / "dir.hcore"),
                       "--publisher", "p", "--key", str(key), str(core))
    assert code == 3 and err.count("\n") == 1 and "cannot write" in err and "dir.hcore" in err
    code, _, err = run(capsys, "verify", str(tmp_path / "missing.hcore"), "--accept", "p", "--trust", f"{key}.pub")
    assert code == 3 and err.count("\n") == 1 and "CoreFileUnavailable" in err
    code, _, err = run(capsys, "core", "migrate", str(tmp_path / "missing.hcore"), "--out", str(tmp_path / "o"),
                       "--trust", f"{key}.pub", "--accept", "p", "--key", str(key))
    assert code == 3 and err.count("\n") == 1 and "missing.hcore" in err


def test_relocate_keeps_the_core_sound(capsys, packed):
    tmp_path, core, key = packed
    code, out, _ = run(capsys, "core", "relocate", str(core), "embed=rank0.bin")
    assert code == 0 and "signature is unchanged" in out and (tmp_path / "rank0.bin").exists()
    code, out, _ = run(capsys, "verify", str(core), "--accept", "acme/models", "--trust", f"{key}.pub")
    assert code == 0
    code, _, err = run(capsys, "core", "relocate", str(core), "nothing")
    assert code == 3 and "is not ID=FILE" in err
