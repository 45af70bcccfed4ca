"""The whole path through the command line: `helios prepare` -> `helios verify` -> `helios generate
--json`, for each Llama-family variant, with greedy tokens equal to HF transformers'."""

from __future__ import annotations

import json

import numpy as np
import pytest

from helios.cli import main
from helios.core import open_core
from helios.reference.engine import ReferenceEngine
from helios.runtime.request import GenerationRequest, SamplingParams
from tests.fixtures.checkpoints import FAMILIES
from tests.fixtures.hf_oracle import hf_greedy, hf_teacher_forced_logits

CAPACITIES = ["--dtype", "fp32", "--page-tokens", "4", "--batch-capacities", "1,2", "--prefill-capacities", "8,32"]


@pytest.fixture(scope="module")
def key(tmp_path_factory):
    path = tmp_path_factory.mktemp("keys") / "publisher.key"
    assert main(["keys", "new", "--out", str(path)]) == 0
    return path


@pytest.mark.parametrize("family", FAMILIES)
def test_prepare_verify_generate_json(family, tiny_checkpoint, hf_model, key, tmp_path, capsys):
    core = tmp_path / "model.hcore"
    assert main(["prepare", str(tiny_checkpoint(family)), "--out", str(core), "--publisher", "acme/tests",
                 "--key", str(key), *CAPACITIES]) == 0
    progress = capsys.readouterr().err.splitlines()
    conversion = [line for line in progress if line.startswith("converting weights: ")]
    assert conversion and conversion[-1].endswith("(100%)") and "\r" not in "".join(progress)
    assert len(conversion) <= 11  # a line at each tenth off a terminal
    assert main(["verify", str(core), "--accept", "acme/tests", "--trust", f"{key}.pub"]) == 0
    capsys.readouterr()
    assert main(["generate", str(core), "--accept", "acme/tests", "--trust", f"{key}.pub", "--prompt",
                 "The quick brown fox", "--max-tokens", "32", "--temperature", "0", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result) == {"prompt_token_ids", "token_ids", "text", "finish_reason"}
    expected = hf_greedy(hf_model(family), result["prompt_token_ids"], 32)
    eos = {int(i) for i in json.loads((tiny_checkpoint(family) / "generation_config.json").read_text())["eos_token_id"]}
    stop = next((i for i, t in enumerate(expected) if t in eos), None)
    if stop is None:
        assert result["token_ids"] == expected and result["finish_reason"] == "length"
    else:
        assert result["token_ids"] == expected[: stop + 1] and result["finish_reason"] == "stop"
    # The sealed core's logits (prompt + 16 decode steps) still match transformers within 1e-4.
    with open_core(core, trusted_keys=[f"{key}.pub"], accept="acme/tests") as opened:
        engine = ReferenceEngine.load(opened, keep=("logits",))
        request = GenerationRequest(tuple(result["prompt_token_ids"]), max_tokens=17,
                                    sampling=SamplingParams(temperature=0.0), ignore_eos=True)
        tokens = list(engine.generate(request))
    ours = np.stack([kept["logits"][0] for kept, graph in zip(engine.kept, engine.kept_graphs, strict=True)
                     if graph != "initialization"])
    reference = hf_teacher_forced_logits(hf_model(family), result["prompt_token_ids"], tokens[:16])
    assert np.abs(ours - reference).max() / np.abs(reference).max() < 1e-4


def test_prepare_is_byte_identical_twice(tiny_checkpoint, key, tmp_path, capsys):
    paths = [tmp_path / "a.hcore", tmp_path / "b.hcore"]
    for path in paths:
        assert main(["prepare", str(tiny_checkpoint("llama")), "--out", str(path), "--publisher", "acme/tests",
                     "--key", str(key)]) == 0
    assert paths[0].read_bytes() == paths[1].read_bytes()


def test_chat_prompt_renders_the_template(tiny_checkpoint, key, tmp_path, capsys):
    core = tmp_path / "chat.hcore"
    assert main(["prepare", str(tiny_checkpoint("qwen2")), "--out", str(core), "--publisher", "acme/tests",
                 "--key", str(key), *CAPACITIES]) == 0
    capsys.readouterr()
    assert main(["generate", str(core), "--accept", "acme/tests", "--trust", f"{key}.pub", "--prompt", "hi",
                 "--chat", "--max-tokens", "3", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    # <|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n, byte tokens in between
    assert result["prompt_token_ids"][0] == 257 and 258 in result["prompt_token_ids"]
    assert 1 <= len(result["token_ids"]) <= 3


def test_unsupported_checkpoint_fails_with_one_line(tiny_checkpoint, key, tmp_path, capsys):
    import shutil

    broken = tmp_path / "moe"
    shutil.copytree(tiny_checkpoint("mistral"), broken)
    capsys.readouterr()  # NOTE: building the fixture checkpoint writes a progress bar to stderr
    config = json.loads((broken / "config.json").read_text())
    config["num_local_experts"] = 8
    (broken / "config.json").write_text(json.dumps(config))
    assert main(["prepare", str(broken), "--out", str(tmp_path / "x.hcore"), "--publisher", "a", "--key",
                 str(key)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "num_local_experts" in err


def test_the_progress_bar_redraws_in_place_only_on_a_terminal():
    import io

    from helios.cli.progress import ProgressBar

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal, log = Terminal(), io.StringIO()
    for stream in (terminal, log):
        bar = ProgressBar("converting weights", stream)
        for done in range(1, 77):
            bar(done, 76, f"w{done}")
    assert terminal.getvalue().count("\r") == 76 and terminal.getvalue().endswith("] 76/76\n")
    lines = log.getvalue().splitlines()
    assert lines[0] == "converting weights: 1/76 (1%)" and lines[-1] == "converting weights: 76/76 (100%)"
    assert len(lines) == 11 and "\r" not in log.getvalue()
