"""Signing keys, trust sets and protection keys: formats, directories, refusals."""

from __future__ import annotations

import os
import stat

import pytest
from cryptography.hazmat.primitives import serialization

from helios.core import (
    KeyFileInvalid,
    generate_keypair,
    generate_protection_key,
    load_private_key,
    load_protection_key,
    load_public_key,
    load_trusted_keys,
)
from helios.core.keys import raw_public_key


def test_generated_pair_is_pem_and_private_key_is_owner_only(tmp_path):
    generate_keypair(tmp_path / "k")
    assert (tmp_path / "k").read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert (tmp_path / "k.pub").read_bytes().startswith(b"-----BEGIN PUBLIC KEY-----")
    assert stat.S_IMODE(os.stat(tmp_path / "k").st_mode) == 0o600
    private, public = load_private_key(tmp_path / "k"), load_public_key(tmp_path / "k.pub")
    assert raw_public_key(private.public_key()) == raw_public_key(public)


def test_raw_32_byte_keys_are_read(tmp_path):
    generate_keypair(tmp_path / "k")
    private = load_private_key(tmp_path / "k")
    (tmp_path / "raw").write_bytes(private.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()))
    (tmp_path / "raw.pub").write_bytes(raw_public_key(private.public_key()))
    assert raw_public_key(load_private_key(tmp_path / "raw").public_key()) == raw_public_key(private.public_key())
    assert raw_public_key(load_public_key(tmp_path / "raw.pub")) == raw_public_key(private.public_key())


def test_trust_directory_collects_pub_files_only(tmp_path):
    for name in ("a", "b"):
        generate_keypair(tmp_path / name)
    trusted = load_trusted_keys(tmp_path)  # the private key files are not .pub and are ignored
    assert set(trusted) == {raw_public_key(load_public_key(tmp_path / f"{n}.pub")) for n in ("a", "b")}
    assert len(load_trusted_keys([tmp_path / "a.pub", tmp_path / "a.pub"])) == 1


def test_bad_key_files(tmp_path):
    (tmp_path / "junk").write_bytes(b"not a key")
    with pytest.raises(KeyFileInvalid, match="not a PEM or raw Ed25519 public key"):
        load_public_key(tmp_path / "junk")
    with pytest.raises(KeyFileInvalid, match="not a PEM or raw Ed25519 private key"):
        load_private_key(tmp_path / "junk")
    with pytest.raises(KeyFileInvalid, match="cannot read"):
        load_public_key(tmp_path / "missing.pub")
    generate_keypair(tmp_path / "k")
    with pytest.raises(KeyFileInvalid):
        load_public_key(tmp_path / "k")  # a private key where a public one belongs


def test_protection_keys(tmp_path):
    generate_protection_key(tmp_path / "aes")
    key = load_protection_key(tmp_path / "aes")
    assert len(key) == 32 and (tmp_path / "aes").read_text().strip() == key.hex()
    (tmp_path / "raw").write_bytes(key)
    assert load_protection_key(tmp_path / "raw") == key
    (tmp_path / "short").write_text("abcd")
    with pytest.raises(KeyFileInvalid, match="AES-256"):
        load_protection_key(tmp_path / "short")
