"""The host serving engine (host side, no torch): everything between the `ModelRuntime` interface
and an executor.

`config.py` holds the scheduler's limits and its view of a request, `catalog.py` picks graph
variants, `sequence.py` holds a request's state and the lane it contributes, `page_cache.py` the
pages and the prefix index, `residency.py` intake, slots, pages and preemption, `scheduler.py` forms
cohorts, plans rounds (`helios.runtime.rounds.RoundPlan`) and retires completions, `outcomes.py` a
round's retired lanes, `progress.py` what each validated token of a request does (written once for
both workers), `delivery.py` and `worker.py` the batching `BatchingRuntime`, and `sequential.py` the
sequential `SequentialRuntime` over a token engine. Nothing here knows which executor runs a round.
"""

from __future__ import annotations
