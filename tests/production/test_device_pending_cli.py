"""`helios prepare` (device-owned pending tokens by default) through the command line: a two-frame core whose greedy
tokens through `helios generate` (reference and production runtimes, CPU: Triton interpreted, which
tests/production/conftest.py switches on before any kernel is imported) equal the host-fed core's."""

from __future__ import annotations


def test_helios_prepare_pending_token_device_end_to_end(tiny_checkpoint, tmp_path, capsys):
    import json

    from helios.cli import build_parser, main
    from helios.core import open_core

    assert "--pending-token" in build_parser()._subparsers._group_actions[0].choices["prepare"].format_help()
    key = tmp_path / "publisher.key"
    assert main(["keys", "new", "--out", str(key)]) == 0
    tokens = {}
    for owner in ("host", "device"):
        core = tmp_path / f"{owner}.hcore"
        assert main(["prepare", str(tiny_checkpoint("qwen3")), "--out", str(core), "--publisher", "acme/tests",
                     "--key", str(key), "--dtype", "fp32", "--page-tokens", "4", "--batch-capacities", "1,2",
                     "--prefill-capacities", "8", "--context-tokens", "32"]
                    + (["--pending-token", "host"] if owner == "host" else [])) == 0  # device: the default
        with open_core(core, trusted_keys=[f"{key}.pub"], accept="acme/tests") as opened:
            assert opened.manifest.transport.frames == (2 if owner == "device" else 1)
        for runtime in ("reference", "production") if owner == "device" else ("reference",):
            capsys.readouterr()
            assert main(["generate", str(core), "--accept", "acme/tests", "--trust", f"{key}.pub", "--prompt",
                         "The quick brown fox", "--max-tokens", "6", "--temperature", "0", "--json",
                         "--runtime", runtime]) == 0
            tokens[owner, runtime] = json.loads(capsys.readouterr().out)["token_ids"]
    assert tokens["device", "reference"] == tokens["host", "reference"]
    assert tokens["device", "production"] == tokens["host", "reference"]
