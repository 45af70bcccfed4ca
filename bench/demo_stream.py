"""Streaming speed of the served demo on the reference runtime (NumPy), as a client sees it.

    python bench/demo_stream.py [--workdir .demo-bench] [--port 8011] [--json out.json]

Runs `python -m helios.demo` (prepare if needed, then serve on the reference runtime) as a separate
process, waits for `/health`, and sends a few greedy chat requests with `stream: true` and
`stream_options.include_usage`, one at a time: an arithmetic question, a tool call over four
offered tools (a long prompt) and a small-talk question. For each it prints the prompt and completion
tokens (the server's usage), the time to the first streamed text (reasoning, content or a tool call:
prefill included), and the decode rate: completion tokens after the first over the time from the
first streamed text to the last. Also prints the time from
starting the demo to a healthy server (the core prepared beforehand, so this is serving startup).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from helios.demo import __main__ as demo  # noqa: E402
from helios.demo.tasks import TaskKind, held_out_examples  # noqa: E402


def _requests() -> list[tuple[str, dict]]:
    examples = held_out_examples(1, 60)
    chosen = []
    for kind in (TaskKind.ADDITION, TaskKind.TOOL_CALL, TaskKind.SMALL_TALK):
        example = next(e for e in examples if e.kind is kind and (kind is not TaskKind.TOOL_CALL or len(e.tools) == 4))
        body = {"model": demo.SERVED_ID, "messages": list(example.messages), "temperature": 0, "max_tokens": 160,
                "stream": True, "stream_options": {"include_usage": True}}
        if example.tools:
            body["tools"] = list(example.tools)
        chosen.append((str(kind), body))
    return chosen


def _stream(client: httpx.Client, base: str, body: dict) -> dict[str, float]:
    started = time.perf_counter()
    first = last = None
    usage = None
    with client.stream("POST", base + "/v1/chat/completions", json=body, timeout=300) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[len("data: "):])
            if chunk.get("usage"):
                usage = chunk["usage"]
            delta = chunk["choices"][0].get("delta", {}) if chunk.get("choices") else {}
            if any(delta.get(key) for key in ("content", "reasoning_content", "tool_calls")):
                now = time.perf_counter()
                first = first or now
                last = now
    tokens = usage["completion_tokens"]
    return {"prompt_tokens": usage["prompt_tokens"], "completion_tokens": tokens,
            "first_text_s": round(first - started, 3),
            "decode_tokens_per_s": round((tokens - 1) / (last - first), 1) if last > first else 0.0}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, default=Path(".demo-bench"))
    parser.add_argument("--port", type=int, default=8011)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--no-speculation", action="store_true", help="serve without the drafter's speculation")
    args = parser.parse_args()
    demo.prepare_demo(args.workdir)
    base = f"http://127.0.0.1:{args.port}"
    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "helios.demo", "--workdir", str(args.workdir),
                                *(["--no-speculation"] if args.no_speculation else []), "--port",
                                str(args.port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env={**os.environ, "HF_HUB_OFFLINE": "1"})
    results: dict[str, object] = {}
    try:
        with httpx.Client() as client:
            while True:
                try:
                    if client.get(base + "/health", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if process.poll() is not None:
                    raise SystemExit("the demo server exited before it was healthy")
                time.sleep(0.1)
            results["startup_s"] = round(time.perf_counter() - started, 2)
            print(f"serving startup (core prepared): {results['startup_s']} s")
            for name, body in _requests():
                measured = _stream(client, base, body)
                results[name] = measured
                print(f"{name:12s} prompt {measured['prompt_tokens']:4d} tokens, completion "
                      f"{measured['completion_tokens']:3d}, first text {measured['first_text_s']:.2f} s, "
                      f"decode {measured['decode_tokens_per_s']:.1f} tokens/s")
    finally:
        process.terminate()
        process.wait(timeout=30)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
