"""The `helios` command (host side): one argparse parser, one module per subcommand group.

Each module in COMMAND_MODULES exposes `register(subparsers)`, which adds its subcommands and sets
`func` on each; `func(args) -> int` is the exit status. Modules import heavy dependencies inside
their handlers, so `helios --help` stays fast and torch-free.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from helios.errors import HeliosError

COMMAND_MODULES = (
    "helios.cli.contract",
    "helios.cli.core",
    "helios.cli.prepare",
    "helios.cli.generate",
    "helios.cli.serve",
    "helios.cli.parse",
    "helios.cli.conform",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="helios",
        description=(
            "Helios serves prepared LLM cores: one signed file holding weights, captured programs, "
            "the typed serving contract, the tokenizer and the chat template."
        ),
        epilog="Run `helios COMMAND --help` for the options of one command.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as error:
            # NOTE: command groups land one issue at a time; a group whose module does not exist
            # yet is simply not offered. Any other import failure is a bug and propagates.
            if error.name == name:
                continue
            raise
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except HeliosError as error:
        print(f"helios {args.command}: {error}", file=sys.stderr)
        return error.exit_code
    except OSError as error:
        print(f"helios {args.command}: {error.strerror or error}: {error.filename or ''}".rstrip(": "), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"helios {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
