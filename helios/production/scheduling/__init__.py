"""The production scheduler (host side, no torch): continuous batching over the captured graphs.

`catalog.py` picks graph variants, `plan.py` holds the plain data that crosses the seam (requests in,
round plans out, a round's outcomes back), `sequence.py` a request's state and the lane it
contributes, `residency.py` intake, slots, pages and preemption, and `scheduler.py` forms cohorts,
submits rounds and retires completions.
"""

from __future__ import annotations

from helios.production.scheduling.catalog import GraphCatalog, GraphVariant
from helios.production.scheduling.plan import (
    LaneOutcome,
    RoundOutcomes,
    RoundPlan,
    SchedulerConfig,
    SchedulerRequest,
)
from helios.production.scheduling.scheduler import Scheduler

__all__ = ["GraphCatalog", "GraphVariant", "LaneOutcome", "RoundOutcomes", "RoundPlan", "Scheduler",
           "SchedulerConfig", "SchedulerRequest"]
