"""The llama.cpp peer of the decode and prefill benches (bench/peer.py): its table read, its runs
driven and refused, on a stand-in binary that prints what llama-batched-bench prints."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from bench import decode, prefill
from bench.peer import PeerFailed, batched_bench, parse_batched_bench, ratio_line

TABLE = """
main: n_kv_max = 300000, n_batch = 2048, n_ubatch = 512, flash_attn = 1, is_pp_shared = 0, n_gpu_layers = 99

|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s |
|-------|--------|------|--------|----------|----------|----------|----------|----------|----------|
|   512 |    128 |    1 |    640 |    0.116 |  4402.31 |    0.221 |   578.12 |    0.337 |  1898.63 |
|   512 |    128 |    8 |   5120 |    0.207 | 19787.44 |    0.356 |  2880.90 |    0.563 |  9094.14 |
"""


def test_the_table_rows_are_read_and_the_rest_skipped():
    rows = parse_batched_bench(TABLE)
    assert [(r.prompt, r.generated, r.batch) for r in rows] == [(512, 128, 1), (512, 128, 8)]
    assert rows[0].prefill_tokens_per_second == pytest.approx(4402.31)
    assert rows[1].decode_tokens_per_second == pytest.approx(2880.90)
    assert parse_batched_bench("no table here\n| PP | TG |\n") == []


def _stand_in(directory: Path, *, exit_code: int = 0) -> Path:
    """A llama-batched-bench that prints one row per -npl batch for its -npp and -ntg, and its argv."""
    script = directory / "llama-batched-bench"
    script.write_text(f"""#!{sys.executable}
import sys
args = sys.argv[1:]
value = lambda flag: args[args.index(flag) + 1]
pp, tg = int(value("-npp")), int(value("-ntg"))
print("argv", " ".join(args), file=sys.stderr)
print("|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s |")
for b in value("-npl").split(","):
    b = int(b)
    print(f"| {{pp}} | {{tg}} | {{b}} | {{b * (pp + tg)}} | 0.1 | {{1000.0 * b}} | 0.2 | {{100.0 * b}} | 0.3 | 1.0 |")
sys.exit({exit_code})
""")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def test_a_run_returns_each_batch_rates(tmp_path):
    _stand_in(tmp_path)
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    rates = batched_bench(tmp_path, model, prompt=2048, generated=1, batches=[1, 8])
    assert sorted(rates) == [1, 8]
    assert rates[8].prefill_tokens_per_second == 8000.0 and rates[1].decode_tokens_per_second == 100.0
    assert (rates[8].prompt, rates[8].generated) == (2048, 1)


def test_a_missing_binary_model_or_row_is_refused_naming_it(tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    with pytest.raises(PeerFailed, match="llama-batched-bench: no such file"):
        batched_bench(tmp_path, model, prompt=512, generated=128, batches=[1])
    _stand_in(tmp_path, exit_code=3)
    with pytest.raises(PeerFailed, match="exited 3"):
        batched_bench(tmp_path, model, prompt=512, generated=128, batches=[1])
    with pytest.raises(PeerFailed, match="missing.gguf: no such file"):
        batched_bench(tmp_path, tmp_path / "missing.gguf", prompt=512, generated=128, batches=[1])


def test_the_ratio_line():
    assert ratio_line("decode, batch 8", 5400.0, 2700.0) == (
        "decode, batch 8: Helios 5,400 tok/s, llama.cpp 2,700 tok/s -> 2.00x")


@pytest.mark.parametrize("bench", [decode, prefill])
def test_the_benches_want_one_model_a_shape(bench, tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        bench.main(["--shapes", "qwen3-0.6b", "llama-8b", "--llamacpp", str(tmp_path),
                    "--llamacpp-model", str(tmp_path / "a.gguf")])
    assert exited.value.code == 2
    assert "one --llamacpp-model GGUF for each of --shapes" in capsys.readouterr().err
