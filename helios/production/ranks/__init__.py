"""Production tensor-parallel ranks (device side): one process per rank over torch.distributed.

docs/ranks.md is the design. The modules, one concept each:

- `group.py`: the rendezvous at rank 0's master address and the ranks' process groups (gloo on a
  CPU, NCCL on a GPU for the programs' collectives; gloo for rank 0's commands);
- `executor.py`: `RankZeroExecutor`, rank 0's executor seam: each round plan to every peer, then
  its own round; failure detection and `failure()` for health;
- `agreement.py`: every rank validates each completion; a rejection or a record unlike rank 0's
  fails the round on every rank (`RankDisagreement`);
- `peer.py`: `serve_peer`, a peer rank executing rank 0's plans on its own buffers;
- `spawn.py`: `RankPeers.THREADS`, the serving host's peers spawned by rank 0;
- `rank_zero.py`: rank 0's load (peers spawned or awaited, then its own rank);
- `__main__.py`: a peer started on its own (`torchrun ... -m helios.production.ranks CORE`).
"""
