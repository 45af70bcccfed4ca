"""The sampler's rank stage on the GPU: the fused rank kernel against the torch sort it replaces.

    python bench/sampling.py                               # rows 1 8 64 256, vocabularies 3072 8192 32000
    python bench/sampling.py --rows 1 8 --vocab 3072 --json sampling.json

What runs. `Sampler` (helios/production/kernels/sampling.py) over random logits with every row
sampled at temperature 0.7 and top-k 20, top-p 0.9 (the demo core's recommended sampling), captured
into one CUDA graph per (rows, vocabulary, rank stage), replayed `--replays` times; microseconds a
replay (median of 5 timings). Three forms of each shape:

  plain    the rank stage off (what a round without rank-filtered lanes runs): the floor;
  fused    `_rank_kernel`, one launch finding each row's cutoffs by bisection in registers
           (vocabularies up to FUSED_RANK_VOCAB);
  torch    the torch sort and the filters as torch operations (every vocabulary).

Before timing, every shape's fused and torch forms draw the same tokens and keep the same weights
(checked on the device; a mismatch stops the bench). Printed per shape: the three times and
torch / fused, the speed-up of the fused form.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", nargs="*", type=int, default=[1, 8, 64, 256])
    parser.add_argument("--vocab", nargs="*", type=int, default=[3072, 8192, 32000])
    parser.add_argument("--replays", type=int, default=200, help="graph replays a timing (default %(default)s)")
    parser.add_argument("--json", type=Path, default=None, help="also write every figure to this file")
    args = parser.parse_args(argv)
    import torch

    from helios.production.kernels.sampling import FUSED_RANK_VOCAB, Sampler

    if not torch.cuda.is_available():
        parser.error("this bench times CUDA graphs: it needs a GPU")
    device = torch.device("cuda")
    print(f"device: {torch.cuda.get_device_name()}; microseconds a graph replay (median of 5)")
    print(f"{'rows':>5} {'vocab':>6} {'plain':>8} {'fused':>8} {'torch':>8} {'torch/fused':>11}")
    figures = []
    for vocab in args.vocab:
        for rows in args.rows:
            generator = torch.Generator(device=device).manual_seed(rows * 7919 + vocab)
            logits = torch.randn((rows, vocab), device=device, generator=generator) * 4
            params = torch.tensor([0.7, 0.9, 20.0, 0.0, 1.0, 0.0, 0.0], device=device).repeat(rows, 1)
            histogram = torch.zeros((rows, 1), dtype=torch.int32, device=device)
            mask = torch.full((rows, (vocab + 31) // 32), -1, dtype=torch.int32, device=device)
            seed = torch.arange(rows, dtype=torch.int64, device=device)
            positions = torch.arange(rows, dtype=torch.int32, device=device)
            forms = {"plain": (False, None), "torch": (True, False)}  # plain: the stage skipped, either form
            if vocab <= FUSED_RANK_VOCAB:
                forms["fused"] = (True, True)
            times, kept = {}, {}
            for name, (rank_stage, fused) in forms.items():
                sampler = Sampler(rows, vocab, device, fused_rank=fused)
                sampler.rank_filters.enabled = rank_stage
                out = torch.empty(rows, dtype=torch.int32, device=device)

                inputs = (logits, seed, positions, params, histogram, mask, out)

                def run(sampler=sampler, inputs=inputs) -> None:
                    sampler(*inputs)

                run()  # compiles
                torch.cuda.synchronize()
                kept[name] = (sampler.kept.clone() if rank_stage else None, out.clone())
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    run()
                samples = []
                for _ in range(5):
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    for _ in range(args.replays):
                        graph.replay()
                    end.record()
                    end.synchronize()
                    samples.append(start.elapsed_time(end) * 1e3 / args.replays)
                times[name] = statistics.median(samples)
            if "fused" in kept and not (torch.equal(kept["fused"][0], kept["torch"][0])
                                        and torch.equal(kept["fused"][1], kept["torch"][1])):
                raise SystemExit(f"rows {rows}, vocabulary {vocab}: the fused rank stage differs from the torch sort")
            ratio = times["torch"] / times["fused"] if "fused" in times else None
            print(f"{rows:>5} {vocab:>6} {times['plain']:>8.1f} {times.get('fused', float('nan')):>8.1f} "
                  f"{times['torch']:>8.1f} {ratio if ratio is not None else float('nan'):>11.2f}")
            figures.append({"rows": rows, "vocab": vocab, "microseconds": times, "torch_over_fused": ratio})
            if args.json:
                args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
