"""ServerState (host side): what the routes of one server share.

The runtime it serves, the request preparer, HTTP admission, the counters behind `/metrics`, the
frontend thread pool and the preparation slots, the request guard's policy (API key, allowed hosts,
body limit) and the shutdown drain. `app.create_app` builds the routes on it and
`responses.Responder` records into it; neither module is imported here.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from helios.frontend.preparation import Preparer
from helios.runtime.interface import ModelRuntime
from helios.server.admission import HttpAdmission
from helios.server.drain import Drain
from helios.server.guard import GuardPolicy
from helios.server.metrics import ServerCounters


@dataclass(slots=True)
class ServerState:
    runtime: ModelRuntime
    preparer: Preparer
    policy: GuardPolicy = field(default_factory=GuardPolicy)
    admission: HttpAdmission = field(init=False)
    counters: ServerCounters = field(default_factory=ServerCounters)
    executor: ThreadPoolExecutor = field(init=False)
    preparation_slots: asyncio.Semaphore | None = None  # created on the serving loop
    drain: Drain = field(default_factory=Drain)

    def __post_init__(self) -> None:
        limits = self.runtime.limits
        self.admission = HttpAdmission(limits.http_capacity)
        self.executor = ThreadPoolExecutor(limits.frontend_workers, thread_name_prefix="helios-frontend")
