from __future__ import annotations

import pytest
from cryptography.hazmat.primitives import serialization

from tests.core.forge import OTHER_KEY, SIGNING_KEY


@pytest.fixture()
def trust(tmp_path):
    """A trust file holding the public half of forge.SIGNING_KEY."""
    path = tmp_path / "publisher.pub"
    path.write_bytes(SIGNING_KEY.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return path


@pytest.fixture()
def other_trust(tmp_path):
    path = tmp_path / "other.pub"
    path.write_bytes(OTHER_KEY.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw))
    return path
