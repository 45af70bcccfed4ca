"""Regenerates helios/proto/*_pb2.py from proto/helios/v1/*.proto (host side, dev only).

Run as `python -m helios.proto.generate` (or `make proto`). `--check` compares instead of writing and
exits 1 when the committed code is stale. Needs grpcio-tools (the `dev` extra).
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROTO_ROOT = REPO / "proto"
PROTO_DIR = PROTO_ROOT / "helios" / "v1"
OUT_DIR = Path(__file__).resolve().parent


def generate() -> dict[str, str]:
    """Returns {file name: generated text} for every .proto under proto/helios/v1."""
    import grpc_tools
    from grpc_tools import protoc  # dev-only dependency

    include = Path(grpc_tools.__file__).parent / "_proto"
    sources = sorted(str(p.relative_to(PROTO_ROOT)) for p in PROTO_DIR.glob("*.proto"))
    with tempfile.TemporaryDirectory() as tmp:
        argv = ["protoc", f"-I{PROTO_ROOT}", f"-I{include}", f"--python_out={tmp}", f"--pyi_out={tmp}", *sources]
        if protoc.main(argv) != 0:
            raise SystemExit("protoc failed")
        generated = {}
        for path in sorted((Path(tmp) / "helios" / "v1").iterdir()):
            text = path.read_text()
            # NOTE: protoc writes imports for the proto package path (helios.v1); the generated
            # modules live in helios.proto, so the imports are rewritten to match.
            text = re.sub(r"^from helios\.v1 import", "from helios.proto import", text, flags=re.M)
            generated[path.name] = text
        return generated


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed code is stale")
    args = parser.parse_args(argv)
    generated = generate()
    stale = [name for name, text in generated.items() if not (OUT_DIR / name).exists() or (OUT_DIR / name).read_text() != text]
    if args.check:
        for name in stale:
            print(f"stale: helios/proto/{name} (run `make proto`)")
        return 1 if stale else 0
    for name in stale:
        (OUT_DIR / name).write_text(generated[name])
        print(f"wrote helios/proto/{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
