"""`helios inspect --runtime`: a sealed core loaded on the production runtime (CPU, Triton interpreted)
prints its execution geometry: selected graphs, loaded buffer shapes, cache pages, startup phases and
the measured round costs."""

from __future__ import annotations

import json
import os

import pytest
import torch

from helios.cli import main
from helios.production.inspection import format_runtime_report

if not torch.cuda.is_available():  # the cost phase runs the plans: interpreted kernels (see tests/production/conftest.py)
    os.environ["TRITON_INTERPRET"] = "1"

CAPACITIES = ["--dtype", "fp32", "--page-tokens", "4", "--batch-capacities", "1,2", "--prefill-capacities", "8,16",
              "--context-tokens", "64"]


@pytest.fixture(scope="module")
def sealed(tiny_checkpoint, tmp_path_factory):
    root = tmp_path_factory.mktemp("inspect")
    key, core = root / "publisher.key", root / "model.hcore"
    assert main(["keys", "new", "--out", str(key)]) == 0
    assert main(["prepare", str(tiny_checkpoint("qwen3")), "--out", str(core), "--publisher", "acme/tests",
                 "--key", str(key), *CAPACITIES]) == 0
    return core, f"{key}.pub"


def test_json_geometry_of_the_loaded_core(sealed, capsys):
    core, public = sealed
    capsys.readouterr()
    assert main(["inspect", str(core), "--runtime", "--accept", "acme/tests", "--trust", public, "--device", "cpu",
                 "--max-concurrency", "1", "--pages", "12", "--served-rounds", "2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["device"] == "cpu" and report["ranks"] == 1
    # load-time selection to one request drops the batch-2 decode graph
    decode = [g for g in report["graphs"] if g["operation"] == "decode"]
    assert [g["batch_capacity"] for g in decode] == [1]
    assert report["max_concurrency"] == 1
    assert report["cache"] == {**report["cache"], "pages": 12, "page_tokens": 4, "token_capacity": 48}
    caches = [b for b in report["buffers"] if b["role"] == "cache"]
    assert caches and all(b["shape"][0] == 12 for b in caches)
    assert report["cache"]["bytes"] == sum(b["bytes"] for b in caches) > 0
    assert [p["phase"] for p in report["startup"]][:4] == ["verify", "weights", "tuning", "kernels"]
    assert report["weight_bytes"] > 0
    # the measured round cost of each DECODE graph (no draft: no SPECULATIVE graph), what adaptive
    # speculation would choose from
    assert [(c["operation"], c["lanes"], c["width"]) for c in report["round_costs"]] == [("decode", 1, 1)]
    assert all(c["seconds"] > 0 for c in report["round_costs"]) and "costs" in [p["phase"] for p in report["startup"]]
    # --served-rounds: the same graphs served through the batching scheduler, host work included
    served = report["served_round_costs"]
    assert [(c["graph"], c["operation"], c["lanes"], c["width"]) for c in served] == [
        (c["graph"], c["operation"], c["lanes"], c["width"]) for c in report["round_costs"]]
    assert all(c["rounds"] >= 2 and c["seconds"] > 0 for c in served), served  # a second frame may add one
    # as text: each graph's served rounds beside its measured cost
    text = format_runtime_report(report)
    header = next(line for line in text.splitlines() if line.startswith("round cost"))
    assert header.split() == ["round", "cost", "operation", "lanes", "width", "ms", "served", "ms", "served", "rounds"]
    rows = [row for line in text.splitlines() if line.startswith("decode_b") and len(row := line.split()) == 7]
    assert [(row[0], int(row[-1])) for row in rows] == [("decode_b1", served[0]["rounds"])]


def test_text_geometry_and_refusals(sealed, capsys):
    core, public = sealed
    capsys.readouterr()
    assert main(["inspect", str(core), "--runtime", "--accept", "acme/tests", "--trust", public, "--device", "cpu",
                 "--pages", "8"]) == 0
    text = capsys.readouterr().out
    assert "8 pages x 4 tokens = 32 tokens" in text
    assert "decode" in text and "prefill" in text and "startup" in text and "round cost" in text
    assert "served ms" not in text  # not probed without --served-rounds
    assert main(["inspect", str(core), "--runtime", "--accept", "acme/tests", "--trust", public, "--device", "cpu",
                 "--served-rounds", "-1"]) == 2
    assert "--served-rounds must be at least 0" in capsys.readouterr().err
    assert main(["inspect", str(core), "--runtime"]) == 2
    assert "needs --accept" in capsys.readouterr().err
    assert main(["inspect", str(core), "--runtime", "--accept", "someone/else", "--trust", public,
                 "--device", "cpu"]) != 0
    err = capsys.readouterr().err
    assert err.startswith("helios inspect:") and "Traceback" not in err
