"""Workloads (host side): the request sets of `cases/workloads.json`, readable and extendable as data.

A workload is a name, production's scheduling limits (`max_active`, `queue_capacity`, `pages`: the
cache pages production's page cache may use, few enough to force eviction and preemption;
`host_pages`: the pages of production's host tier of evicted checkpoints on a core of one rank,
absent for the runtime's default size) and a list
of requests, each an OpenAI body plus an optional `name`: a `/v1/completions` body (a `prompt`), or a
`/v1/chat/completions` body (`messages`: `response_format`, `tools` and `tool_choice` work there).
Bodies go through the server's own parsing and preparation (`parse_completion_request` or
`parse_chat_request`, then `Preparer`), so a case means what the same body means over HTTP. Sampled
requests must carry a seed: both runtimes must draw the same Philox stream.

Two more keys are the workload's, not the body's: `after` (the name of an earlier request: this one
is submitted once that one has finished and production released it: its last round's fence has
passed, so it sees what the first published, e.g. its prompt pages or its partial last page) and `output_filter` (false: the request runs without an output filter, its sampled ids
observed only, as a token-observed request over HTTP; no string stops then).

Without `--workloads`, conform derives its workloads from the core's geometry (`generate.py`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from helios.errors import HeliosError

CASES = Path(__file__).resolve().parent / "cases"
WORKLOADS = CASES / "workloads.json"
OPERATOR_CASES = CASES / "operators.json"


class InvalidWorkload(HeliosError):
    """A workload file or request is malformed; the message names the workload and the request."""


WORKLOAD_KEYS = ("name", "after", "output_filter")  # a request object's keys that are not body fields


@dataclass(frozen=True, slots=True)
class WorkloadRequest:
    name: str
    body: Mapping[str, Any]  # an OpenAI /v1/completions body, or a /v1/chat/completions body (`messages`)
    after: str | None = None  # submit once this earlier request of the workload has finished
    output_filter: bool = True  # False: no output filter (sampled ids observed only)

    def __post_init__(self) -> None:
        if not self.name:
            raise InvalidWorkload("a workload request needs a non-empty name")
        sampled = self.body.get("temperature", 1.0) != 0
        if sampled and self.body.get("seed") is None:
            raise InvalidWorkload(f"request {self.name}: a sampled request needs a seed (both runtimes must "
                                  "draw the same Philox stream)")
        if not self.output_filter and (self.body.get("stop") or self.chat):
            raise InvalidWorkload(f"request {self.name}: a request without an output filter takes no string "
                                  "stops and no chat body (both need the filter's text)")

    @property
    def chat(self) -> bool:
        """A chat completions body (it has `messages`), else a completions body."""
        return "messages" in self.body


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    requests: tuple[WorkloadRequest, ...]
    max_active: int = 2  # production's request slots
    queue_capacity: int = 8  # production's pending deque bound
    pages: int | None = None  # the cache pages production's page cache may use (None: all it has)
    description: str = ""
    host_pages: int | None = None  # production's host tier in pages (None: the runtime's default size)

    def __post_init__(self) -> None:
        if not self.name or not self.requests:
            raise InvalidWorkload(f"workload {self.name!r}: needs a name and at least one request")
        names = [r.name for r in self.requests]
        if len(set(names)) != len(names):
            raise InvalidWorkload(f"workload {self.name}: request names repeat: {names}")
        if (self.max_active < 1 or self.queue_capacity < 0 or (self.pages is not None and self.pages < 1)
                or (self.host_pages is not None and self.host_pages < 0)):
            raise InvalidWorkload(f"workload {self.name}: max_active >= 1, queue_capacity >= 0, pages >= 1, "
                                  "host_pages >= 0")
        for index, request in enumerate(self.requests):
            if request.after is not None and request.after not in names[:index]:
                raise InvalidWorkload(f"workload {self.name}: request {request.name} comes after {request.after!r}, "
                                      "which is not an earlier request of the workload")

    def with_requests(self, requests: Sequence[WorkloadRequest]) -> Workload:
        return replace(self, requests=tuple(requests))


def workload_from_json(data: Mapping[str, Any]) -> Workload:
    try:
        runtime = data.get("runtime", {})
        requests = tuple(request_from_json(body, i) for i, body in enumerate(data["requests"]))
        return Workload(str(data["name"]), requests, max_active=int(runtime.get("max_active", 2)),
                        queue_capacity=int(runtime.get("queue_capacity", 8)),
                        pages=None if runtime.get("pages") is None else int(runtime["pages"]),
                        description=str(data.get("description", "")),
                        host_pages=None if runtime.get("host_pages") is None else int(runtime["host_pages"]))
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise InvalidWorkload(f"workload {data.get('name', '?')!r}: malformed ({error})") from None


def request_from_json(body: Mapping[str, Any], index: int = 0) -> WorkloadRequest:
    """A request object: an OpenAI body plus the workload keys (`name`, `after`, `output_filter`)."""
    after = body.get("after")
    output_filter = body.get("output_filter", True)
    if not isinstance(output_filter, bool):
        raise InvalidWorkload(f"request {body.get('name', index)}: output_filter must be true or false")
    return WorkloadRequest(str(body.get("name", f"r{index}")), {k: v for k, v in body.items() if k not in WORKLOAD_KEYS},
                           after=None if after is None else str(after), output_filter=output_filter)


def load_workloads(path: str | Path = WORKLOADS, names: Sequence[str] | None = None) -> tuple[Workload, ...]:
    """The workloads of a JSON file (`{"workloads": [...]}` or one workload object), optionally by name."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise InvalidWorkload(f"{path}: not JSON ({error.msg}, line {error.lineno})") from None
    items = data["workloads"] if "workloads" in data else [data]
    workloads = tuple(workload_from_json(item) for item in items)
    if names:
        unknown = sorted(set(names) - {w.name for w in workloads})
        if unknown:
            raise InvalidWorkload(f"{path}: no workload named {unknown}; it has {[w.name for w in workloads]}")
        workloads = tuple(w for w in workloads if w.name in names)
    return workloads


def load_operator_cases(path: str | Path = OPERATOR_CASES) -> dict:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise InvalidWorkload(f"{path}: not JSON ({error.msg}, line {error.lineno})") from None
