"""`helios serve` (host side): an OpenAI-compatible HTTP server over one signed core.

Heavy imports (FastAPI, uvicorn, the runtime) stay inside the handler.
"""

from __future__ import annotations

import argparse

from helios.cli.rank import add_rank_arguments
from helios.server.guard import DEFAULT_MAX_REQUEST_BYTES


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="serve a signed core over an OpenAI-compatible HTTP API",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Serve MODEL.hcore over HTTP: POST /v1/chat/completions (JSON and SSE streaming, reasoning,\n"
            "tool calls, stops, token observation), POST /v1/completions, GET /v1/models, GET /health and\n"
            "GET /metrics (Prometheus). The core is verified against --trust and --accept before anything\n"
            "runs. Admission: at most queue_capacity + max_active requests are held (429 past that);\n"
            "limits not given here come from the core's defaults. One log line per request.\n"
            "Security: bound to loopback, only Host headers naming the bound address or localhost are\n"
            "answered (--allowed-host adds names); --api-key or --api-key-file requires\n"
            "`Authorization: Bearer KEY` on every endpoint but /health; POST bodies must be\n"
            "application/json of at most --max-request-bytes.\n"
            "Stop with SIGTERM or Ctrl-C: admission stops at once, running requests get five seconds,\n"
            "then every open response ends with its error event; the process exits 0."
        ),
        epilog=(
            "example:\n"
            "  helios serve qwen3.hcore --accept acme/models --trust publisher.key.pub --port 8000\n"
            "  curl http://127.0.0.1:8000/v1/chat/completions -H 'Content-Type: application/json' \\\n"
            '      -d \'{"model": "qwen3", "messages": [{"role": "user", "content": "Hi"}]}\''
        ),
    )
    parser.add_argument("core", metavar="MODEL.hcore", help="the core to serve")
    parser.add_argument("--accept", required=True, metavar="NAMESPACE",
                        help="the publisher namespace you accept; must equal the signed one exactly")  # fmt: skip
    parser.add_argument("--trust", required=True, action="append", metavar="PUBKEY",
                        help="a trusted public key file or a directory of .pub files (repeatable)")  # fmt: skip
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    parser.add_argument(
        "--port", type=int, default=8000, help="port to listen on (default: 8000)"
    )
    parser.add_argument("--runtime", choices=("reference", "production"), default="reference",
                        help="reference: NumPy, any machine; production: GPU graphs (default: reference)")  # fmt: skip
    parser.add_argument("--max-active", type=int, metavar="N",
                        help="requests generating at once (default: the core's, capped by its concurrency)")  # fmt: skip
    parser.add_argument("--queue-capacity", type=int, metavar="N",
                        help="requests waiting for a model slot (default: the core's)")  # fmt: skip
    parser.add_argument("--frontend-workers", type=int, metavar="N",
                        help="CPU threads rendering and tokenizing prompts (default: the core's)")  # fmt: skip
    parser.add_argument("--trace", metavar="FILE",
                        help="with --runtime production: record every submission (graph, lanes, packed transport "
                             "rows, completion rows) to FILE; check it with `helios conform MODEL --audit FILE`")  # fmt: skip
    parser.add_argument("--gpu-memory-fraction", type=float, metavar="F",
                        help="with --runtime production: share of the GPU's memory Helios may hold, weights, "
                             "graphs and cache together; the cache gets what is left (default 0.9)")  # fmt: skip
    parser.add_argument("--host-cache-gib", type=float, metavar="GIB",
                        help="with --runtime production: host memory (GiB; pinned on a GPU) holding evicted prefix "
                             "cache pages, readmitted on a hit; 0 disables it (default: a quarter of the memory "
                             "available at startup, at most 4 GiB and at most twice the device cache)")  # fmt: skip
    parser.add_argument("--speculative-width", metavar="W|auto",
                        help="on a core prepared with --draft: W decodes with its speculative programs of width W; "
                             "auto (the default) chooses, each round, plain decoding or the width of the highest "
                             "expected tokens per second, from the round costs measured at startup and the "
                             "proposal acceptance observed so far")  # fmt: skip
    parser.add_argument("--no-speculation", action="store_true",
                        help="on a core prepared with --draft: decode plainly, one token a round")  # fmt: skip
    parser.add_argument("--history-drafting", action="store_true",
                        help="with learned speculation on: also propose, each speculative round, the tokens "
                             "that followed the latest earlier occurrence of the request's last tokens in its "
                             "own prompt and output (n-gram matching); the same programs verify them, so the "
                             "tokens are those of plain decoding")  # fmt: skip
    parser.add_argument("--max-request-bytes", type=int, default=DEFAULT_MAX_REQUEST_BYTES, metavar="N",
                        help=f"largest POST body accepted; larger ones get 413 before they are read "
                             f"(default: {DEFAULT_MAX_REQUEST_BYTES})")  # fmt: skip
    parser.add_argument("--api-key", metavar="KEY",
                        help="require `Authorization: Bearer KEY` on every endpoint but /health "
                             "(visible to other local users in the process list: prefer --api-key-file)")  # fmt: skip
    parser.add_argument("--api-key-file", metavar="FILE", help="the API key, read from the first line of FILE")
    parser.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                        help="a Host header name to answer (repeatable); default: the bound address and "
                             "localhost when bound to loopback, any name otherwise")  # fmt: skip
    parser.add_argument("--public-metrics", action="store_true", help="serve /metrics without the API key")
    parser.add_argument("--allow-remote-images", action="store_true",
                        help="on a vision core: fetch http(s) image URLs of chat image_url parts (default: only "
                             "base64 data: URLs are accepted, a remote URL is a 400)")
    add_rank_arguments(parser)
    parser.set_defaults(func=_serve)


def _serve(args) -> int:
    from pathlib import Path

    from helios.cli.compose import ServeOptions, load_state
    from helios.runtime.options import speculation_choice
    from helios.server.serve import serve

    options = ServeOptions(
        core=Path(args.core),
        accept=args.accept,
        trust=tuple(args.trust),
        host=args.host,
        port=args.port,
        runtime=args.runtime,
        max_active=args.max_active,
        queue_capacity=args.queue_capacity,
        **speculation_choice(args.speculative_width, args.no_speculation),
        history_drafting=args.history_drafting,
        frontend_workers=args.frontend_workers,
        trace=None if args.trace is None else Path(args.trace),
        gpu_memory_fraction=args.gpu_memory_fraction,
        host_cache_gib=args.host_cache_gib,
        max_request_bytes=args.max_request_bytes,
        api_key=args.api_key,
        api_key_file=None if args.api_key_file is None else Path(args.api_key_file),
        allowed_hosts=tuple(args.allowed_host),
        public_metrics=args.public_metrics,
        allow_remote_images=args.allow_remote_images,
        rank_peers=args.rank_peers,
        master=args.master,
        rank_timeout=args.rank_timeout,
    )
    state, core = load_state(options)
    serve(state, host=options.host, port=options.port, runtime=options.runtime, on_shutdown=core.close)
    return 0
