"""The sampler's rank stage on the GPU: the sampler's own form (no sort) against the torch sort.

    python bench/sampling.py                               # rows 1 8 64 256, vocabularies 3072 8192 32000 151936
    python bench/sampling.py --rows 1 8 --vocab 3072 --json sampling.json
    python bench/sampling.py --top-k 0 --top-p 0.9         # top-p alone (Llama's recommended sampling)
    python bench/sampling.py --top-k 0 --logit-scale 0.5   # flat rows: past 8,192 ids, streamed

What runs. `Sampler` (helios/production/kernels/sampling.py) over random logits (standard normal
times `--logit-scale`, 4: peaked rows, as a model's; small scales make rows flat, whose top-p the
chunked form streams) with every row sampled at temperature 0.7 and `--top-k` 20, `--top-p` 0.9 (the demo core's
recommended sampling), captured into one CUDA graph per (rows, vocabulary, form), replayed
`--replays` times; microseconds a replay (median of 5 timings). Three forms of each shape:

  plain    the rank stage off (what a round without rank-filtered lanes runs): the floor;
  own      the sampler's default rank form: `fused` (`_rank_kernel`, one launch, vocabularies up to
           FUSED_RANK_VOCAB) or `chunked` (`_chunk_rank_kernel` and `_merge_rank_kernel`, larger ones);
  sort     the torch sort and the filters as torch operations (`rank_form="sort"`).

Before timing, every shape's own and sort forms draw the same tokens and keep the same weights
(checked on the device; a mismatch stops the bench). Printed per shape: the form, the three times
and sort / own, the speed-up of the sampler's form.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", nargs="*", type=int, default=[1, 8, 64, 256])
    parser.add_argument("--vocab", nargs="*", type=int, default=[3072, 8192, 32000, 151936])
    parser.add_argument("--top-k", type=int, default=20, help="every row's top-k (0: none; default %(default)s)")
    parser.add_argument("--top-p", type=float, default=0.9, help="every row's top-p (default %(default)s)")
    parser.add_argument("--logit-scale", type=float, default=4.0,
                        help="the random logits' standard deviation (default %(default)s)")
    parser.add_argument("--replays", type=int, default=200, help="graph replays a timing (default %(default)s)")
    parser.add_argument("--json", type=Path, default=None, help="also write every figure to this file")
    args = parser.parse_args(argv)
    import torch

    from helios.production.kernels.sampling import Sampler

    if not torch.cuda.is_available():
        parser.error("this bench times CUDA graphs: it needs a GPU")
    device = torch.device("cuda")
    print(f"device: {torch.cuda.get_device_name()}; microseconds a graph replay (median of 5)")
    print(f"top-k {args.top_k}, top-p {args.top_p}, temperature 0.7, logits scaled by {args.logit_scale}")
    print(f"{'rows':>5} {'vocab':>6} {'form':>8} {'plain':>8} {'own':>8} {'sort':>8} {'sort/own':>9}")
    figures = []
    for vocab in args.vocab:
        for rows in args.rows:
            generator = torch.Generator(device=device).manual_seed(rows * 7919 + vocab)
            logits = torch.randn((rows, vocab), device=device, generator=generator) * args.logit_scale
            params = torch.tensor([0.7, args.top_p, float(args.top_k), 0.0, 1.0, 0.0, 0.0], device=device).repeat(rows, 1)
            histogram = torch.zeros((rows, 1), dtype=torch.int32, device=device)
            mask = torch.full((rows, (vocab + 31) // 32), -1, dtype=torch.int32, device=device)
            seed = torch.arange(rows, dtype=torch.int64, device=device)
            positions = torch.arange(rows, dtype=torch.int32, device=device)
            own = Sampler(1, vocab, "meta").rank_form
            forms = {"plain": (False, None), "own": (True, own), "sort": (True, "sort")}  # plain: the stage off
            times, kept = {}, {}
            for name, (rank_stage, form) in forms.items():
                sampler = Sampler(rows, vocab, device, rank_form=form)
                sampler.rank_filters.form = "own" if rank_stage else "off"
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
            if not (torch.equal(kept["own"][0], kept["sort"][0]) and torch.equal(kept["own"][1], kept["sort"][1])):
                raise SystemExit(f"rows {rows}, vocabulary {vocab}: the {own} rank stage differs from the torch sort")
            ratio = times["sort"] / times["own"]
            print(f"{rows:>5} {vocab:>6} {own:>8} {times['plain']:>8.1f} {times['own']:>8.1f} {times['sort']:>8.1f} "
                  f"{ratio:>9.2f}")
            figures.append({"rows": rows, "vocab": vocab, "form": own, "top_k": args.top_k, "top_p": args.top_p,
                            "microseconds": times, "sort_over_own": ratio})
            if args.json:
                args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
