"""`helios rank` (host side): run one peer rank of a tensor-parallel core, joining rank 0's `--master`.

    helios serve MODEL.hcore --runtime production --rank-peers processes --master 10.0.0.1:29500 ...
    helios rank MODEL.hcore --accept NS --trust KEY.pub --master 10.0.0.1:29500 --world 4 --rank 2
    torchrun --nproc-per-node 2 -m helios.production.ranks MODEL.hcore --accept NS --trust KEY.pub \\
        --master 10.0.0.1:29500 --world 4 --first-rank 2      # ranks 2 and 3, one GPU each

Under torchrun the rank is `--first-rank` plus torchrun's RANK and the device is `cuda:LOCAL_RANK`.
The peer opens its own copy of the core (the same served model rank 0 serves), loads its rank with
the load parameters rank 0 publishes, and runs until rank 0 stops or is lost. `add_rank_arguments`
holds the options `helios serve` and `helios generate` take for the ranks of such a core.
"""

from __future__ import annotations

import os


def add_rank_arguments(parser) -> None:
    """`--rank-peers`, `--master`, `--rank-timeout` (serve, generate)."""
    parser.add_argument("--rank-peers", choices=("threads", "processes"), default="threads",
                        help="a core of several tensor-parallel ranks (production): threads spawns the peers on "
                             "this host; processes waits for peers started elsewhere (helios rank, torchrun) "
                             "(default: threads)")
    parser.add_argument("--master", metavar="ADDR:PORT",
                        help="where rank 0 listens for its peers (processes: required; threads: a free loopback port)")
    parser.add_argument("--rank-timeout", type=float, metavar="S",
                        help="seconds a collective waits for a peer before the ranks fail (default: 30)")


def register(subparsers) -> None:
    parser = subparsers.add_parser("rank", help="run one peer rank of a tensor-parallel core (joins rank 0)",
                                   description=__doc__.split("\n\n")[0])
    parser.add_argument("core", metavar="MODEL.hcore", help="the core rank 0 serves (this host's copy)")
    parser.add_argument("--accept", required=True, metavar="NAMESPACE", help="publisher namespace to accept")
    parser.add_argument("--trust", required=True, action="append", metavar="PUBKEY", help="trusted publisher key")
    parser.add_argument("--master", required=True, metavar="ADDR:PORT", help="rank 0's address for its peers")
    parser.add_argument("--world", type=int, required=True, metavar="N", help="ranks in all (the core's manifest.ranks)")
    parser.add_argument("--rank", type=int, metavar="R", help="this peer's rank (default: --first-rank + $RANK)")
    parser.add_argument("--first-rank", type=int, default=1, metavar="R",
                        help="under torchrun: the rank of torchrun's RANK 0 (default: 1)")
    parser.add_argument("--device", metavar="DEV", help="cpu or cuda:N (default: cuda:$LOCAL_RANK when a GPU is present)")
    parser.add_argument("--rank-timeout", type=float, default=30.0, metavar="S",
                        help="seconds a collective waits for another rank (default: 30)")
    parser.set_defaults(func=_rank)


def _rank(args) -> int:
    from helios.core import open_core
    from helios.runtime.options import InvalidRuntimeOptions

    rank = args.rank if args.rank is not None else args.first_rank + int(os.environ.get("RANK", "0"))
    if rank < 1:
        raise InvalidRuntimeOptions(f"--rank {rank}: a peer's rank is 1 or more (rank 0 is helios serve)")
    device = args.device
    import torch  # the device half starts here

    if device is None:
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from helios.production.ranks.peer import serve_peer

    with open_core(args.core, trusted_keys=args.trust, accept=args.accept) as core:
        serve_peer(core, master=args.master, rank=rank, size=args.world, device=device, timeout=args.rank_timeout)
    return 0
