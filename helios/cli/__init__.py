"""The `helios` command (host side): one argparse parser, one module per subcommand group.

Each module in COMMAND_MODULES exposes `register(subparsers)`, which adds its subcommands and sets
`func` on each; `func(args) -> int` is the exit status. Modules import heavy dependencies inside
their handlers, so `helios --help` stays fast and torch-free.

Every failure is one line on standard error, `helios COMMAND: FILE: ErrorClass: cause` (FILE: the
file the error concerns, else the command's input), never a traceback, and the exit status is one
of EXIT_CODES (the README lists them).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from helios.errors import HeliosError

EXIT_CODES = {
    0: "success",
    1: "the command ran and found a failure (contract violations, a conformance divergence, a runtime "
       "that refused the core at load, a server that cannot listen)",
    2: "usage: invalid options or arguments, an input file that cannot be read or is not supported",
    3: "verification: the core failed verification (signature, trust, namespace, format, resources)",
    4: "conformance incomplete: a mechanism the core supports was not reached",
    130: "interrupted (Ctrl-C)",
}
INPUT_ARGUMENTS = ("core", "file", "checkpoint")  # the attribute naming a command's input file, if any

COMMAND_MODULES = (
    "helios.cli.contract",
    "helios.cli.core",
    "helios.cli.prepare",
    "helios.cli.generate",
    "helios.cli.serve",
    "helios.cli.parse",
    "helios.cli.conform",
    "helios.cli.rank",
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
        print(_line(args, None, error, str(error)), file=sys.stderr)
        return error.exit_code
    except OSError as error:
        print(_line(args, error.filename, error, error.strerror or str(error)), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"helios {args.command}: interrupted", file=sys.stderr)
        return 130


def _line(args: argparse.Namespace, filename: object, error: BaseException, cause: str) -> str:
    """`helios COMMAND: FILE: ErrorClass: cause`, one line (FILE left out when the message starts
    with it already, or when the command has no input file)."""
    subject = filename if filename is not None else next(
        (getattr(args, name) for name in INPUT_ARGUMENTS if isinstance(getattr(args, name, None), str)), None)  # fmt: skip
    cause = " ".join(cause.split())  # one line
    prefix = f"{subject}: " if subject is not None and not cause.startswith((str(subject), repr(str(subject)))) else ""
    return f"helios {args.command}: {prefix}{type(error).__name__}: {cause}"


if __name__ == "__main__":
    sys.exit(main())
