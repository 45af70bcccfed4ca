"""`make demo` / `python -m helios.demo`: prepare the embedded demo checkpoint and serve it (host side).

Everything lands in `.demo/` under the current directory: a signing key made for the demo alone
(trusted by this command only), the prepared core, and nothing else. The core is prepared again
whenever the committed checkpoint or drafter is newer than it. The drafter joins the core
(`helios prepare --draft`), so `helios serve` decodes with speculation (lossless: the same tokens
as plain decoding) on 127.0.0.1 until Ctrl-C.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from helios.demo import CHECKPOINT_DIR, DRAFTER_DIR

PUBLISHER = "helios/demo"
SERVED_ID = "helios-demo"


def prepare_demo(workdir: Path) -> tuple[Path, Path]:
    """Returns (core path, trusted public key path), preparing the core if it is missing or stale."""
    from helios.cli import main as helios

    workdir.mkdir(parents=True, exist_ok=True)
    key = workdir / "demo.key"
    if not key.exists():
        if helios(["keys", "new", "--out", str(key)]) != 0:
            raise SystemExit("helios demo: could not create the demo signing key")
    core = workdir / "demo.hcore"
    newest_input = max(p.stat().st_mtime for d in (CHECKPOINT_DIR, DRAFTER_DIR) for p in d.iterdir())
    if not core.exists() or core.stat().st_mtime < newest_input:
        print(f"helios demo: preparing {CHECKPOINT_DIR.name}/ into {core}", file=sys.stderr)
        status = helios(["prepare", str(CHECKPOINT_DIR), "--out", str(core), "--publisher", PUBLISHER,
                         "--key", str(key), "--dtype", "fp32", "--served-id", SERVED_ID,
                         "--draft", str(DRAFTER_DIR)])
        if status != 0:
            raise SystemExit("helios demo: preparation failed")
    return core, Path(f"{key}.pub")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m helios.demo",
        description="Prepare the embedded demo model (a tiny chat model Helios trains itself: arithmetic with "
                    "<think> reasoning, unit conversions, JSON answers, tool calls) and serve it with the "
                    "reference runtime.")
    parser.add_argument("--workdir", type=Path, default=Path(".demo"), help="where the key and core go (.demo)")
    parser.add_argument("--port", type=int, default=8000, help="port on 127.0.0.1 (default 8000)")
    parser.add_argument("--prepare-only", action="store_true", help="prepare the core and exit")
    parser.add_argument("--no-speculation", action="store_true",
                        help="decode one token a round (default: speculation with the committed drafter)")
    args = parser.parse_args(argv)
    core, public_key = prepare_demo(args.workdir)
    if args.prepare_only:
        print(core)
        return 0
    print(f"""
helios demo: serving {SERVED_ID} on http://127.0.0.1:{args.port}  (Ctrl-C stops)
try:
  curl -s http://127.0.0.1:{args.port}/v1/chat/completions -H 'Content-Type: application/json' \\
    -d '{{"model": "{SERVED_ID}", "messages": [{{"role": "user", "content": "What is 27 + 15?"}}], "temperature": 0}}'
""", file=sys.stderr)
    from helios.cli import main as helios

    return helios(["serve", str(core), "--accept", PUBLISHER, "--trust", str(public_key),
                   "--host", "127.0.0.1", "--port", str(args.port),
                   *(["--no-speculation"] if args.no_speculation else [])])


if __name__ == "__main__":
    sys.exit(main())
