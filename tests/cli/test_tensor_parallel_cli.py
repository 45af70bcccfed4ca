"""`helios prepare --tp` through the command line: the sealed core's ranks in `helios inspect` (their
programs, and with --trust and --accept their weight catalogs and bytes), generation through the
reference runtime and through production ranks equal to the one-rank core's, one-line refusals (`--tp 3`
on heads the ranks cannot split, peers started for another world size)."""

from __future__ import annotations

import json
import os

import pytest
import torch

from helios.cli import main

if not torch.cuda.is_available():  # production ranks run the kernels interpreted (tests/production/conftest.py)
    os.environ["TRITON_INTERPRET"] = "1"

CAPACITIES = ["--dtype", "fp32", "--page-tokens", "4", "--batch-capacities", "1,2", "--prefill-capacities", "8",
              "--context-tokens", "32"]


@pytest.fixture(scope="module")
def signed(tiny_checkpoint, tmp_path_factory):
    """(one-rank core, two-rank core, public key) of the tiny Qwen3 checkpoint."""
    directory = tmp_path_factory.mktemp("tp-cli")
    key = directory / "publisher.key"
    assert main(["keys", "new", "--out", str(key)]) == 0
    cores = []
    for ranks in (1, 2):
        core = directory / f"tp{ranks}.hcore"
        assert main(["prepare", str(tiny_checkpoint("qwen3")), "--out", str(core), "--publisher", "acme/tests",
                     "--key", str(key), "--tp", str(ranks), *CAPACITIES]) == 0
        cores.append(core)
    return cores[0], cores[1], f"{key}.pub"


def test_inspect_shows_each_rank_its_programs_catalog_and_bytes(signed, capsys):
    _, core, public = signed
    capsys.readouterr()
    assert main(["inspect", str(core)]) == 0
    out = capsys.readouterr().out
    from helios.core import open_core

    with open_core(core, trusted_keys=[public], accept="acme/tests") as opened:
        graphs = len(opened.manifest.graphs)  # one program a graph on every rank
    assert "ranks             2" in out and f"  rank 1  programs {graphs} (" in out
    assert "weights per rank: read from the weight catalogs with --trust PUBKEY --accept NAMESPACE" in out
    assert main(["inspect", str(core), "--trust", public, "--accept", "acme/tests", "--json"]) == 0
    ranks = json.loads(capsys.readouterr().out)["ranks"]
    assert [r["catalog"] for r in ranks] == ["weight_catalog/rank0", "weight_catalog/rank1"]
    # qwen3 (untied head): every rank holds 3 layers x 11 tensors, the final norm, the embedding and head slices
    assert [r["weights"] for r in ranks] == [3 * 11 + 3] * 2
    assert ranks[0]["weight_nbytes"] == ranks[1]["weight_nbytes"] > 0


def test_generate_on_two_ranks_equals_one_rank_on_both_runtimes(signed, capsys):
    """The reference's lockstep ranks, and production ranks: rank 0 here, rank 1 a spawned peer
    process joined over gloo on loopback (--rank-peers threads, the default)."""
    one, two, public = signed
    results = []
    for core, runtime in ((one, "reference"), (two, "reference"), (two, "production")):
        capsys.readouterr()
        assert main(["generate", str(core), "--accept", "acme/tests", "--trust", public, "--prompt", "Hello there",
                     "--max-tokens", "6", "--temperature", "0", "--json", "--runtime", runtime]) == 0
        results.append(json.loads(capsys.readouterr().out)["token_ids"])
    assert results[0] == results[1] == results[2] and len(results[0]) >= 1


def test_processes_peers_of_another_world_size_fail_startup_in_one_line(signed, capsys):
    """A peer started for a world of 3 against a core of 2 ranks: rank 0 refuses at the rendezvous."""
    import subprocess
    import sys

    from helios.production.ranks.spawn import free_loopback_port

    _, two, public = signed
    master = f"127.0.0.1:{free_loopback_port()}"
    peer = subprocess.Popen([sys.executable, "-m", "helios.production.ranks", str(two), "--accept", "acme/tests",
                             "--trust", public, "--master", master, "--world", "3", "--rank", "1", "--device", "cpu"],
                            stderr=subprocess.PIPE, text=True)
    try:
        capsys.readouterr()
        assert main(["generate", str(two), "--accept", "acme/tests", "--trust", public, "--prompt", "Hello",
                     "--max-tokens", "2", "--runtime", "production", "--rank-peers", "processes",
                     "--master", master]) == 1
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1
        assert "peer rank 1 was started with a world size of 3, but the core has manifest.ranks = 2" in err
        assert peer.wait(timeout=60) == 1
        said = peer.stderr.read().strip().splitlines()
        assert said[-1].endswith("rank 0 refused the ranks: peer rank 1 was started with a world size of 3, "
                                 "but the core has manifest.ranks = 2")
    finally:
        peer.kill()
        peer.wait()


def test_tp_3_on_four_heads_is_one_line_naming_the_field(tiny_checkpoint, tmp_path, capsys):
    key, checkpoint = tmp_path / "k", tiny_checkpoint("llama")
    assert main(["keys", "new", "--out", str(key)]) == 0
    capsys.readouterr()
    assert main(["prepare", str(checkpoint), "--out", str(tmp_path / "m.hcore"), "--publisher", "acme",
                 "--key", str(key), "--tp", "3"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--tp 3: config.json: num_attention_heads = 4 is not divisible by 3" in err
    assert not (tmp_path / "m.hcore").exists()


def test_inspect_runtime_loads_every_rank_and_shows_each_ranks_weights(signed, capsys):
    _, two, public = signed
    capsys.readouterr()
    assert main(["inspect", str(two), "--runtime", "--accept", "acme/tests", "--trust", public, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ranks"] == 2 and report["cache"]["pages"] > 0
    per_rank = report["weight_bytes_per_rank"]
    assert len(per_rank) == 2 and per_rank[0] == per_rank[1] == report["weight_bytes"] > 0
