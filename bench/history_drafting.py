"""Tokens a speculative round emits with history drafting, replayed offline on the demo pair: no
history drafting against copied proposals from each shortest n-gram, with the copies-or-draft choice
and with copies always taken.

    python bench/history_drafting.py [--requests 24] [--width 8] [--min-ngrams 1 2 3] [--json out.json]

Greedy and deterministic, so no GPU is needed: HF transformers on the CPU (fp32) gives the target's
greedy completion of each request (the prefill's first token, then rounds) and the drafter's greedy
proposals. Each round of width W offers the lane's pending token and W - 1 proposals: the run
`HistoryIndex.propose` copies from the request's own tokens (prompt and output so far), then the
drafter's continuation past it, exactly as the SPECULATIVE program builds them; under `choice` the
request takes its copied run only while `CopiedChoice` (the schedulers' own object, fed the same
observations) says its copies accept at least as well as its draft. Verification keeps the proposals
up to the first that differs from the target's token, and the round emits them and one more. Printed
per workload (the speculative_serving bench's: the copying workload and the held-out chat prompts)
and mode: rounds, emitted tokens (the prefill's first token counts as a round of one), tokens a
round, and the ratio to no history drafting. The runtimes serve unconstrained requests as "min
n-gram 2, choice" (`DRAFTED_MIN_NGRAM`); grammar-constrained ones copy from single tokens on. A
round's device cost does not depend on where its proposals came from, so at a fixed round cost the
ratio is the speed-up of the rounds; the host's n-gram lookups are measured apart
(`bench/host_round.py --history-drafting`).
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from speculative_serving import MAX_TOKENS, held_out_bodies, repetitive_bodies  # noqa: E402


def replay(prompt: list[int], out: list[int], width: int, propose, choose, draft) -> tuple[int, int]:
    """(rounds, emitted) of one request whose greedy completion is `out`: the prefill's first token,
    then rounds of `width` until the completion is emitted. `propose(known, n)` is the copied run (or
    None without history drafting), `choose` a callable (copied run) -> run taken, and observer."""
    rounds, emitted, pos = 1, 1, 1
    while pos < len(out):
        known = prompt + out[:pos]
        limit = min(width, len(out) - pos)  # the pending row and the proposals the room allows
        copied = propose(known, limit - 1) if propose is not None else ()
        copied, observe = choose(copied)
        rest = limit - 1 - len(copied)
        proposals = list(copied) + (list(draft(tuple(known + list(copied)), rest)) if rest > 0 else [])
        kept = 0
        while kept < limit - 1 and proposals[kept] == out[pos + kept]:
            kept += 1
        observe(copied, limit, kept)
        rounds, emitted, pos = rounds + 1, emitted + kept + 1, pos + kept + 1
    return rounds, emitted


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=24, help="requests of each workload (default %(default)s)")
    parser.add_argument("--width", type=int, default=8, help="W: the pending row and W - 1 proposals (default 8)")
    parser.add_argument("--min-ngrams", nargs="*", type=int, default=[1, 2, 3],
                        help="shortest n-gram a copied run may follow (default 1 2 3)")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--json", type=Path, default=None, help="also write every figure to this file")
    args = parser.parse_args(argv)
    import torch

    from helios.demo import CHECKPOINT_DIR, DRAFTER_DIR
    from helios.demo.evaluation import greedy_continuations_of, load_checkpoint
    from helios.demo.template import default_template
    from helios.engine.program_choice import CopiedChoice, ProposalSources
    from helios.runtime.history_drafting import HistoryIndex, copied_outcome

    if args.threads:
        torch.set_num_threads(args.threads)
    target, tokenizer = load_checkpoint(CHECKPOINT_DIR)
    drafter, _ = load_checkpoint(DRAFTER_DIR)
    template = default_template()

    @functools.cache
    @torch.no_grad()
    def draft(prefix: tuple[int, ...], n: int) -> tuple[int, ...]:
        ids, cache, out = torch.tensor([prefix]), None, []
        for _ in range(n):
            step = drafter(input_ids=ids, past_key_values=cache, use_cache=True)
            cache = step.past_key_values
            out.append(int(step.logits[0, -1].argmax()))
            ids = torch.tensor([[out[-1]]])
        return tuple(out)

    modes = [("no history drafting", None, None)] + [
        (f"min n-gram {n}, {policy}", n, policy) for n in args.min_ngrams for policy in ("choice", "always")]
    figures = []
    print(f"{'workload':>10}  {'mode':<28} {'rounds':>7} {'tokens':>7} {'a round':>8} {'ratio':>6}")
    for workload, bodies in (("repetitive", repetitive_bodies(args.requests)),
                             ("held_out", held_out_bodies(args.requests))):
        prompts = [template.render(b["messages"], tuple(b.get("tools", ())), add_generation_prompt=True)
                   for b in bodies]
        completions = [c.completion for c in greedy_continuations_of(target, tokenizer, prompts,
                                                                      max_new_tokens=MAX_TOKENS)]
        encoded = [tokenizer.encode(p).ids for p in prompts]
        baseline = None
        for label, min_ngram, policy in modes:
            copied_choice = CopiedChoice()
            rounds = emitted = 0
            for prompt, out in zip(encoded, completions, strict=True):
                index = HistoryIndex(min_ngram=min_ngram) if min_ngram else None
                sources = ProposalSources()

                def choose(copied, sources=sources, policy=policy, copied_choice=copied_choice):
                    if copied and policy == "choice" and not copied_choice.copies(sources):
                        copied_choice.skipped()
                        copied = ()

                    def observe(run, limit, kept, sources=sources, copied_choice=copied_choice):
                        offered, accepted = copied_outcome(run, limit, kept)
                        copied_choice.observe(sources, offered, accepted, limit - 1 - offered,
                                              kept - accepted if accepted == offered else 0)
                    return copied, observe

                r, e = replay(prompt, list(out), args.width, index.propose if index else None, choose, draft)
                rounds, emitted = rounds + r, emitted + e
            rate = emitted / rounds
            baseline = baseline or rate
            figures.append({"workload": workload, "mode": label, "rounds": rounds, "tokens": emitted,
                            "tokens_per_round": rate, "ratio": rate / baseline})
            print(f"{workload:>10}  {label:<28} {rounds:>7} {emitted:>7} {rate:>8.2f} {rate / baseline:>6.2f}",
                  flush=True)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
