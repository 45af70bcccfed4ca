"""The server as a real process (`tests.server.scripted_server`: `helios.server.serve.serve` over a
scripted engine): SIGTERM and SIGINT with long streams and waiting JSON requests (finding 8), an
8 MB body (finding 3), and a port in use (finding 10)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.server.inprocess import free_port, wait_healthy

CHAT = "/v1/chat/completions"
LONG = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4000, "ignore_eos": True}


def start(tmp_path: Path, *limits: str) -> tuple[str, subprocess.Popen, Path]:
    port = free_port()
    log = tmp_path / f"server-{port}.log"
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root), "HF_HUB_OFFLINE": "1"}
    with open(log, "w") as sink:
        process = subprocess.Popen([sys.executable, "-m", "tests.server.scripted_server", str(port), *limits],
                                   stdout=sink, stderr=subprocess.STDOUT, env=env, cwd=root)  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    wait_healthy(base, process, log, timeout_s=60, what="the server")
    return base, process, log


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_ends_long_streams_and_waiting_requests_then_exits_0(tmp_path, stop) -> None:
    base, process, log = start(tmp_path, "4", "4")
    streams: list[list[str]] = [[] for _ in range(3)]
    answers: list[httpx.Response] = []

    def read_stream(lines: list[str]) -> None:
        with httpx.stream("POST", base + CHAT, json={**LONG, "stream": True}, timeout=30) as response:
            lines.extend(line for line in response.iter_lines() if line.startswith("data: "))

    def wait_json() -> None:
        answers.append(httpx.post(base + CHAT, json=LONG, timeout=30))

    threads = [threading.Thread(target=read_stream, args=(lines,)) for lines in streams]
    threads.append(threading.Thread(target=wait_json))
    try:
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 20
        while not all(len(lines) >= 3 for lines in streams):  # every stream is generating
            assert time.monotonic() < deadline, "the streams did not start"
            time.sleep(0.05)
        process.send_signal(stop)
        began = time.monotonic()
        code = process.wait(timeout=15)
        elapsed = time.monotonic() - began
        for thread in threads:
            thread.join(10)
    finally:
        if process.poll() is None:
            process.kill()
    assert code == 0 and elapsed < 6, (code, elapsed)
    for lines in streams:  # each stream ends with its terminal error event, never [DONE]
        last = json.loads(lines[-1][6:])
        assert last["error"]["code"] == "shutting_down" and not any("[DONE]" in line for line in lines)
    assert len(answers) == 1 and answers[0].status_code == 503
    assert answers[0].json()["error"]["code"] == "shutting_down"
    text = log.read_text()
    assert "Traceback" not in text and text.rstrip().endswith("stopped") and text.count("stopped") == 1
    assert "Cancel" not in text  # uvicorn never had to cancel a task


def test_an_8_mb_body_is_413_at_once_and_memory_stays_flat(tmp_path) -> None:
    base, process, _ = start(tmp_path)
    try:
        with httpx.Client(base_url=base, timeout=30) as client:
            small = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
            assert client.post(CHAT, json=small).status_code == 200
            before = rss_mib(process.pid)
            body = json.dumps({"messages": [{"role": "user", "content": "x" * (8 * 1024 * 1024)}]}).encode()
            for _ in range(3):
                began = time.monotonic()
                try:
                    response = client.post(CHAT, content=body, headers={"Content-Type": "application/json"})
                except httpx.HTTPError:  # the server may close before the upload ends; ask again on a new one
                    response = None
                elapsed = time.monotonic() - began
                if response is not None:
                    assert response.status_code == 413 and response.json()["error"]["param"] == "body"
                assert elapsed < 1.0, elapsed
            after = rss_mib(process.pid)
            assert after - before < 50, (before, after)
            assert httpx.get(base + "/health", timeout=5).status_code == 200
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0


def test_a_port_in_use_is_one_line_and_says_nothing_about_serving(tmp_path) -> None:
    import socket

    from helios.server.serve import ListenFailed, listen

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(ListenFailed) as error:
            listen("127.0.0.1", port)
    assert f"127.0.0.1:{port}" in str(error.value) and "OSError" in str(error.value) or "Error" in str(error.value)
    assert ListenFailed.exit_code == 1
