"""`python -m tests.server.scripted_server PORT [MAX_ACTIVE QUEUE_CAPACITY]`: `helios.server.serve.serve`
as a real process (real signals, its own memory) over a scripted engine that yields one token every
10 ms for 5,000 tokens, and the tiny frontend. For the shutdown and body-size tests."""

from __future__ import annotations

import sys

from helios.engine.sequential import SequentialRuntime
from helios.frontend.preparation import Preparer
from helios.runtime.limits import AdmissionLimits
from helios.server.guard import GuardPolicy
from helios.server.serve import serve
from helios.server.state import ServerState
from tests.frontend import tinyfront
from tests.runtime.scripted import ScriptedEngine

CONTEXT = 8192


def main(argv: list[str]) -> None:
    port = int(argv[0])
    max_active, queue_capacity = (int(argv[1]), int(argv[2])) if len(argv) > 2 else (4, 4)
    bootstrap = tinyfront.make_bootstrap()
    engine = ScriptedEngine([5] * 5000 + [tinyfront.token_id("<|im_end|>")], delay_s=0.01)
    limits = AdmissionLimits(max_active=max_active, queue_capacity=queue_capacity)
    runtime = SequentialRuntime(engine, limits, context_tokens=CONTEXT, vocab_size=bootstrap.vocab_size)
    preparer = Preparer(bootstrap, served_id="tiny-chat", context_tokens=CONTEXT)
    state = ServerState(runtime=runtime, preparer=preparer, policy=GuardPolicy.for_address("127.0.0.1"))
    serve(state, host="127.0.0.1", port=port, runtime="scripted", on_shutdown=lambda: None)


if __name__ == "__main__":
    main(sys.argv[1:])
