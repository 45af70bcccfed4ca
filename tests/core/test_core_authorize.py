"""authorize(s) succeeds exactly when s equals the signed publisher namespace, code point for code point."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helios.core import NamespaceNotAccepted, authorize
from helios.core.envelope import SignedContent
from helios.proto import contract_pb2, manifest_pb2

LOOKALIKES = {"a": "\u0430", "e": "\u0435", "o": "\u043e", "c": "\u0441", "p": "\u0440", "i": "\u0456",
              "/": "\u2215", "-": "\u2010", ".": "\u2024", "m": "\uff4d", "l": "\u04cf", "s": "\u0455"}


def content(namespace: str) -> SignedContent:
    return SignedContent("payload", namespace, (), contract_pb2.ServingContract(), manifest_pb2.ExecutionManifest(),
                         0, b"")


def accepts(namespace: str, acceptance) -> bool:
    try:
        authorize(content(namespace), acceptance)
    except NamespaceNotAccepted:
        return False
    return True


namespaces = st.one_of(
    st.sampled_from(["acme/models", "Acme", "straße/ﬁne", "café", "e\u0301cole", "Ω-lab", "a b", "x"]),
    st.text(min_size=1, max_size=24),
)


@st.composite
def near_misses(draw, namespace: str):
    kind = draw(st.sampled_from(
        ["case", "whitespace", "nul", "prefix", "suffix", "truncate", "lookalike", "nfc", "nfd", "nfkc", "nfkd",
         "casefold", "random"]))
    if kind == "case":
        return draw(st.sampled_from([namespace.upper(), namespace.lower(), namespace.swapcase(), namespace.title()]))
    if kind == "whitespace":
        space = draw(st.sampled_from([" ", "\t", "\n", "\r", "\u00a0", "\u2009", "\u200b", "\ufeff"]))
        return draw(st.sampled_from([space + namespace, namespace + space, namespace.replace("/", space + "/")]))
    if kind == "nul":
        return draw(st.sampled_from([namespace + "\0", "\0" + namespace, namespace[:1] + "\0" + namespace[1:]]))
    if kind == "prefix":
        return draw(st.text(min_size=1, max_size=4)) + namespace
    if kind == "suffix":
        return namespace + draw(st.text(min_size=1, max_size=4))
    if kind == "truncate":
        return namespace[: draw(st.integers(0, len(namespace) - 1))]
    if kind == "lookalike":
        return "".join(LOOKALIKES.get(ch, ch) for ch in namespace)
    if kind in ("nfc", "nfd", "nfkc", "nfkd"):
        return unicodedata.normalize(kind.upper(), namespace)
    if kind == "casefold":
        return namespace.casefold()
    return draw(st.text(max_size=24))


@settings(max_examples=400, deadline=None)
@given(data=st.data(), namespace=namespaces)
def test_authorize_succeeds_exactly_on_equality(data, namespace):
    acceptance = data.draw(st.one_of(st.just(namespace), near_misses(namespace)))
    assert accepts(namespace, acceptance) == (acceptance == namespace)


@pytest.mark.parametrize(
    ("namespace", "acceptance"),
    [("acme/models", "Acme/models"), ("acme/models", "acme/models "), ("acme/models", "acme/models\0"),
     ("acme/models", "acme/model"), ("acme/models", "acme/models/x"), ("acme/models", "\u0430cme/models"),
     ("café", unicodedata.normalize("NFD", "café")), ("ﬁne", "fine"), ("straße", "strasse")],
)
def test_near_misses_are_refused_with_both_strings_named(namespace, acceptance):
    with pytest.raises(NamespaceNotAccepted) as caught:
        authorize(content(namespace), acceptance)
    assert repr(acceptance) in str(caught.value) and repr(namespace) in str(caught.value)


def test_non_strings_are_refused():
    assert not accepts("acme", b"acme")
    assert not accepts("acme", None)
    assert accepts("acme", "acme")
