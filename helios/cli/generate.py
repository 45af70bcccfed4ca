"""`helios generate` (host side): one prompt through a signed core, text (or JSON) out.

Opens and authorizes the core, loads its frontend (`Bootstrap`: tokenizer, chat template, EOS ids,
sampling defaults) and a runtime, renders the prompt (`--chat` applies the chat template), generates
and prints. Request values win over the core's sampling defaults. Heavy imports stay in the handler.
"""

from __future__ import annotations

import argparse
import json

from helios.cli.rank import add_rank_arguments
from helios.errors import HeliosError

RUNTIMES = ("reference", "production")
DEFAULT_MAX_TOKENS = 128


class CoreUnreadable(HeliosError):
    """The core file cannot be opened (missing, unreadable)."""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "generate", help="generate text from a prompt with a signed core",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Generate from one prompt. The core is verified against --trust and --accept before anything\n"
            "runs. The prompt is tokenized as given, or with --chat rendered as one user message through\n"
            "the core's chat template. Generation stops after an EOS id of the core or at --max-tokens.\n"
            "Sampling settings not given come from the core's declared defaults; --temperature 0 is greedy.\n"
            "--json prints {\"prompt_token_ids\", \"token_ids\", \"text\", \"finish_reason\"} on one line."
        ),
        epilog=(
            "example:\n"
            "  helios generate qwen3.hcore --accept acme/models --trust publisher.key.pub \\\n"
            "      --prompt 'Why is the sky blue?' --chat --max-tokens 64 --temperature 0 --json"
        ),
    )
    parser.add_argument("core", metavar="MODEL.hcore", help="the core to run")
    parser.add_argument("--accept", required=True, metavar="NAMESPACE",
                        help="the publisher namespace you accept; must equal the signed one exactly")
    parser.add_argument("--trust", required=True, action="append", metavar="PUBKEY",
                        help="a trusted public key file or a directory of .pub files (repeatable)")
    parser.add_argument("--prompt", required=True, metavar="TEXT", help="the prompt text")
    parser.add_argument("--chat", action="store_true", help="render the prompt as a user message with the template")
    parser.add_argument("--image", action="append", default=[], metavar="FILE",
                        help="a PNG, JPEG or WebP image for a vision core (repeatable); with --chat the images "
                             "precede the prompt in the user message, else the prompt holds the core's image "
                             "placeholder once per image")
    parser.add_argument("--max-tokens", type=int, metavar="N",
                        help=f"output limit, EOS included (default: the core's, else {DEFAULT_MAX_TOKENS})")
    parser.add_argument("--temperature", type=float, metavar="T", help="0 is greedy (default: the core's, else 1)")
    parser.add_argument("--top-p", type=float, metavar="P", help="nucleus mass in (0, 1] (default: the core's, else 1)")
    parser.add_argument("--top-k", type=int, metavar="K", help="0 disables (default: the core's, else 0)")
    parser.add_argument("--seed", type=int, default=0, metavar="S", help="Philox seed (default: 0)")
    parser.add_argument("--speculative-width", metavar="W|auto",
                        help="on a core prepared with --draft: W decodes with its speculative programs of width W; "
                             "auto (the default) chooses, each round, plain decoding or the width of the highest "
                             "expected tokens per second, from the round costs measured at startup and the "
                             "proposal acceptance observed so far")
    parser.add_argument("--no-speculation", action="store_true",
                        help="on a core prepared with --draft: decode plainly, one token a round")
    parser.add_argument("--history-drafting", action="store_true",
                        help="with learned speculation on: also propose, each speculative round, the tokens "
                             "that followed the latest earlier occurrence of the request's last tokens in its "
                             "own prompt and output (n-gram matching); the same programs verify them, so the "
                             "tokens are those of plain decoding")
    parser.add_argument("--runtime", choices=RUNTIMES, default="reference",
                        help="which runtime executes the programs: reference (NumPy) or production (Triton "
                             "kernels and the batching scheduler; GPU, else interpreted on the CPU) "
                             "(default: reference)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the text")
    add_rank_arguments(parser)
    parser.set_defaults(func=_generate)


def _sampling(args, defaults):
    from helios.runtime.request import SamplingParams

    def pick(given, name: str, fallback):
        if given is not None:
            return given
        return getattr(defaults, name) if defaults.HasField(name) else fallback

    return SamplingParams(
        temperature=pick(args.temperature, "temperature", 1.0),
        top_p=pick(args.top_p, "top_p", 1.0),
        top_k=pick(args.top_k, "top_k", 0),
        min_p=pick(None, "min_p", 0.0),
        repetition_penalty=pick(None, "repetition_penalty", 1.0),
        presence_penalty=pick(None, "presence_penalty", 0.0),
        frequency_penalty=pick(None, "frequency_penalty", 0.0),
        seed=args.seed,
    )


class ImageUnreadable(HeliosError):
    """An --image file cannot be read."""


def _image_url(path: str) -> str:
    """The file as a base64 data: URL of its media type (by its leading bytes; the preparation
    refuses bytes that are not a PNG, JPEG or WebP image)."""
    import base64

    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as error:
        raise ImageUnreadable(f"--image {path}: cannot read: {error.strerror}") from None
    media = ("image/png" if data.startswith(b"\x89PNG") else "image/webp" if data[8:12] == b"WEBP"
             else "image/jpeg")
    return f"data:{media};base64," + base64.b64encode(data).decode()


def _generate(args) -> int:
    from helios.cli.compose import load_runtime, rank_options
    from helios.core import open_core
    from helios.engine.oneshot import generate_tokens
    from helios.frontend.bootstrap import Bootstrap
    from helios.frontend.request_images import ImagePart, RequestImages
    from helios.runtime.limits import AdmissionLimits
    from helios.runtime.options import RuntimeOptions, speculation_choice
    from helios.runtime.request import GenerationRequest

    try:
        core_context = open_core(args.core, trusted_keys=args.trust, accept=args.accept)
    except OSError as error:
        raise CoreUnreadable(f"{args.core}: cannot read: {error.strerror}") from None
    with core_context as core:
        bootstrap = Bootstrap.from_core(core)
        runtime = load_runtime(core, args.runtime, RuntimeOptions(AdmissionLimits(max_active=1, queue_capacity=1),
                                                                  **speculation_choice(args.speculative_width,
                                                                                       args.no_speculation),
                                                                  history_drafting=args.history_drafting,
                                                                  ranks=rank_options(args.core, args.trust, args.accept,
                                                                                     args.rank_peers, args.master,
                                                                                     args.rank_timeout,
                                                                                     args.runtime)))
        defaults = core.contract.defaults
        images = RequestImages(bootstrap.frontend, core.contract.model.vision)
        prepared = images.prepare([ImagePart(f"--image {path}", _image_url(path)) for path in args.image])
        content = ([{"type": "image"}] * len(prepared) + [{"type": "text", "text": args.prompt}] if prepared
                   else args.prompt)
        text = bootstrap.render_chat([{"role": "user", "content": content}]) if args.chat else args.prompt
        prompt_ids, request_images = images.lay_out(bootstrap.encode(text), prepared, "--prompt")
        prompt_ids = list(prompt_ids)
        max_tokens = args.max_tokens
        if max_tokens is None:
            max_tokens = defaults.max_output_tokens if defaults.HasField("max_output_tokens") else DEFAULT_MAX_TOKENS
        eos = tuple(bootstrap.eos_token_ids)
        request = GenerationRequest(tuple(prompt_ids), max_tokens=max_tokens, sampling=_sampling(args, defaults.sampling),
                                    eos_token_ids=eos, images=request_images)
        token_ids = generate_tokens(runtime, request)
    finish_reason = "stop" if token_ids and token_ids[-1] in eos else "length"
    visible = token_ids[:-1] if finish_reason == "stop" else token_ids
    output = bootstrap.decode(visible)
    if args.json:
        print(json.dumps({"prompt_token_ids": prompt_ids, "token_ids": token_ids, "text": output,
                          "finish_reason": finish_reason}, ensure_ascii=False))
    else:
        print(output)
    return 0
