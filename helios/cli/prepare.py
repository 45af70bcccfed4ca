"""`helios prepare` (host side): a Hugging Face checkpoint directory in, a signed core out.

The handler reads the checkpoint, runs the family recipe, converts weights (with a progress bar on
stderr), validates the contract and seals the core. Heavy imports stay inside the handler.
"""

from __future__ import annotations

import argparse
import sys

from helios.cli.progress import ProgressBar


def _int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one integer")
    return values


def register(subparsers) -> None:
    from helios.ignition.recipes.catalog import FAMILY_DESCRIPTION, RECIPE_MODULES

    parser = subparsers.add_parser(
        "prepare", help="prepare a Hugging Face checkpoint into a signed core",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Prepare CHECKPOINT (a Hugging Face directory: config.json, *.safetensors, tokenizer.json,\n"
            "tokenizer_config.json or chat_template.jinja, generation_config.json) into one signed core:\n"
            "weights converted to --dtype, one captured program per operation and capacity\n"
            "(INITIALIZATION, PREFILL per --prefill-capacities, DECODE per --batch-capacities, MIXED),\n"
            "the typed serving contract, the tokenizer and the chat template.\n\n"
            f"Supported: {FAMILY_DESCRIPTION} checkpoints (config.json model_type in\n"
            f"{', '.join(sorted(RECIPE_MODULES))}). An unsupported one (mixture-of-experts, another activation,\n"
            "an unknown rope type) fails with one line naming the config field. The same inputs give a\n"
            "byte-identical core."
        ),
        epilog=(
            "example:\n"
            "  helios keys new --out publisher.key\n"
            "  helios prepare ./Qwen3-0.6B --out qwen3.hcore --publisher acme/models --key publisher.key\n"
            "  helios verify qwen3.hcore --accept acme/models --trust publisher.key.pub"
        ),
    )
    parser.add_argument("checkpoint", metavar="CHECKPOINT", help="Hugging Face checkpoint directory")
    parser.add_argument("--out", required=True, metavar="MODEL.hcore", help="core file to write")
    parser.add_argument("--publisher", required=True, metavar="NAMESPACE",
                        help="publisher namespace to sign; readers must accept exactly this string")
    parser.add_argument("--key", required=True, metavar="KEY", help="Ed25519 private key (from `helios keys new`)")
    parser.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16",
                        help="weight and cache dtype (default: bf16)")
    parser.add_argument("--served-id", metavar="ID", help="model name clients address (default: the directory name)")
    parser.add_argument("--page-tokens", type=int, default=16, metavar="N", help="tokens per cache page (default: 16)")
    parser.add_argument("--batch-capacities", type=_int_list, default=(1, 2, 4, 8), metavar="B,B,...",
                        help="DECODE batch capacities; the largest is the request slot count (default: 1,2,4,8)")
    parser.add_argument("--prefill-capacities", type=_int_list, default=(16, 64, 256), metavar="P,P,...",
                        help="PREFILL token capacities; also the MIXED prefill chunks (default: 16,64,256)")
    parser.add_argument("--context-tokens", type=int, metavar="N",
                        help="largest prompt + output (default: min(max_position_embeddings, 4096))")
    parser.add_argument("--pending-token", choices=("device", "host"), default="device",
                        help="who holds each request's last sampled token between rounds: 'device' keeps it in "
                             "a state buffer the programs read and write, so decode rounds may keep two "
                             "execution frames in flight (default); choose 'host' only for a runtime that "
                             "must feed every token from the host (a PENDING_TOKEN binding, one frame, "
                             "one round at a time)")
    parser.add_argument("--tp", type=int, default=1, metavar="N",
                        help="tensor-parallel ranks: one program per rank for every graph and one weight catalog "
                             "per rank, with query and key/value heads, MLP features and the vocabulary split "
                             "across them (key/value heads replicated where N exceeds them); not with --draft "
                             "(default: 1)")
    parser.add_argument("--draft", metavar="DRAFT",
                        help="a second checkpoint (any supported family, the target's tokenizer and vocabulary) "
                             "whose weights and history join the core for learned speculation: SPECULATIVE "
                             "programs are captured at every batch capacity and --speculative-widths width")
    parser.add_argument("--speculative-widths", type=_int_list, default=(2, 4), metavar="W,W,...",
                        help="with --draft: target rows per request of each speculative program, the pending "
                             "token included (W - 1 proposals; default: 2,4)")
    parser.add_argument("--speculative-budget", type=int, metavar="P",
                        help="with --draft: capture confidence programs instead of rectangular ones, which "
                             "allocate at most P target rows a round on the device by the proposals' survival "
                             "probability (default: rectangular programs, P = B * W)")
    parser.add_argument("--prompt-score-top", type=int, default=20, metavar="K",
                        help="capture SCORED_PREFILL programs at every prefill capacity that score each prompt "
                             "token and its K most likely alternatives (echo with logprobs, prompt_logprobs; "
                             "default: 20; 0 captures none)")
    parser.add_argument("--image-feature-slots", type=int, default=1, metavar="N",
                        help="a vision checkpoint (LLaVA): the images one request may carry; the feature store "
                             "holds N images' features for every request slot (default: 1)")
    parser.add_argument("--snapshot-capacity", type=int, default=None, metavar="ROWS",
                        help="continuation storage rows (one partial page of every cache plane a row) and "
                             "RESTORATION programs at every batch capacity, so a preempted request resumes "
                             "without recomputation (default: one row per request slot; 0 captures none)")
    parser.set_defaults(func=_prepare)


def _prepare(args) -> int:
    from helios.core.envelope import check_namespace
    from helios.ignition.prepare import PreparationOptions, prepare_checkpoint
    from helios.ignition.seal import seal
    from helios.proto import core_pb2

    check_namespace(args.publisher)  # before the preparation, not at sealing

    options = PreparationOptions(dtype=args.dtype, served_id=args.served_id, page_tokens=args.page_tokens,
                                 batch_capacities=args.batch_capacities, prefill_capacities=args.prefill_capacities,
                                 context_tokens=args.context_tokens, pending_token=args.pending_token,
                                 draft=args.draft, speculative_widths=args.speculative_widths,
                                 speculative_budget=args.speculative_budget, tensor_parallel=args.tp,
                                 prompt_score_top=args.prompt_score_top, snapshot_capacity=args.snapshot_capacity,
                                 image_feature_slots=args.image_feature_slots)
    prepared = prepare_checkpoint(args.checkpoint, options)
    seal(prepared, args.out, publisher=args.publisher, signing_key=args.key,
         progress=ProgressBar("converting weights", sys.stderr))
    graphs = len(prepared.manifest.graphs)
    weights = sum(1 for r in prepared.resources if r.kind == core_pb2.RESOURCE_KIND_WEIGHT)
    ranks = f", {prepared.manifest.ranks} ranks" if prepared.manifest.ranks > 1 else ""
    print(f"wrote {args.out}: {prepared.contract.served_id!r}, {graphs} graphs, {weights} weights{ranks}, "
          f"{args.dtype}, publisher {args.publisher!r}")
    return 0
