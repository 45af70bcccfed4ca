"""The CLI's refusals (issue finding 9 and 10): `keys new` never overwrites a key unless --force,
publisher namespaces are printable, and every error is one line naming file, class and cause with
the documented exit code."""

from __future__ import annotations

import pytest

from helios.cli import EXIT_CODES, main
from helios.core.envelope import check_namespace
from helios.core.errors import NamespaceInvalid


def test_keys_new_refuses_to_overwrite_a_key(tmp_path, capsys) -> None:
    key = tmp_path / "publisher.key"
    assert main(["keys", "new", "--out", str(key)]) == 0
    private, public = key.read_bytes(), (tmp_path / "publisher.key.pub").read_bytes()
    capsys.readouterr()
    assert main(["keys", "new", "--out", str(key)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "KeyFileExists" in err and str(key) in err and "--force" in err
    assert key.read_bytes() == private and (tmp_path / "publisher.key.pub").read_bytes() == public
    # the public half alone existing is refused too: a new pair would not match it
    lone = tmp_path / "lone.key"
    (tmp_path / "lone.key.pub").write_bytes(public)
    assert main(["keys", "new", "--out", str(lone)]) == 2 and not lone.exists()
    assert main(["keys", "new", "--out", str(key), "--force"]) == 0
    assert key.read_bytes() != private
    protection = tmp_path / "protection.key"
    assert main(["keys", "protection", "--out", str(protection)]) == 0
    secret = protection.read_bytes()
    assert main(["keys", "protection", "--out", str(protection)]) == 2 and protection.read_bytes() == secret


@pytest.mark.parametrize("namespace", ["acme\x00models", "acme/\nmodels", "acme\x1b[2Jmodels", "a\u2028b", ""])
def test_namespaces_must_be_printable(namespace: str) -> None:
    with pytest.raises(NamespaceInvalid):
        check_namespace(namespace)


def test_prepare_refuses_an_unprintable_publisher_before_preparing(tmp_path, capsys) -> None:
    key = tmp_path / "k.key"
    assert main(["keys", "new", "--out", str(key)]) == 0
    capsys.readouterr()
    code = main(["prepare", str(tmp_path / "no-checkpoint"), "--out", str(tmp_path / "x.hcore"),
                 "--publisher", "acme\tmodels", "--key", str(key)])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 3 and err.count("\n") == 1 and "NamespaceInvalid" in err and "U+0009" in err
    assert not (tmp_path / "x.hcore").exists()


def test_errors_name_file_class_and_cause(tmp_path, capsys) -> None:
    missing = tmp_path / "missing.hcore"
    key = tmp_path / "k.key"
    assert main(["keys", "new", "--out", str(key)]) == 0
    capsys.readouterr()
    code = main(["serve", str(missing), "--accept", "a", "--trust", f"{key}.pub"])
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("helios serve: ") and str(missing) in err
    assert code in EXIT_CODES and code != 0
    assert "Error" in err.split(": ")[2] or "Unavailable" in err  # the error class
    assert main(["serve", str(missing), "--accept", "a", "--trust", f"{key}.pub", "--api-key", "k",
                 "--api-key-file", str(key)]) == 2  # fmt: skip
    assert "ApiKeyUnavailable" in capsys.readouterr().err
    empty = tmp_path / "empty.key"
    empty.write_text("\n")
    assert main(["serve", str(missing), "--accept", "a", "--trust", f"{key}.pub", "--api-key-file", str(empty)]) == 2
    err = capsys.readouterr().err
    assert "ApiKeyUnavailable" in err and str(empty) in err and err.count("\n") == 1
