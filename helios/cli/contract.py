"""`helios contract`: check a prepared contract and print its human (JSON) form (host side)."""

from __future__ import annotations

import argparse
import sys

from helios.errors import HeliosError


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "contract", help="check a serving contract, or print its JSON form",
        description="Work with a core's serving contract and execution manifest (a DeploymentBody) on its own, "
                    "in binary Protobuf or JSON form.")
    commands = parser.add_subparsers(dest="contract_command", metavar="SUBCOMMAND", required=True)

    check = commands.add_parser(
        "check", help="validate a contract against every rule; print ok or one line per error",
        description="Decode FILE (a DeploymentBody: binary Protobuf, or the Protobuf JSON mapping with unknown "
                    "fields rejected; or a whole core, verified with --accept and --trust) as a PreparedContract "
                    "and check every rule of the specification. Prints `ok` and exits 0 when valid; otherwise "
                    "prints one line per problem, `PATH: what is wrong`, and exits 1.",
        epilog="examples:\n  helios contract check deployment.json\n"
               "  helios contract check model.hcore --accept acme/models --trust publisher.key.pub",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    check.add_argument("file", metavar="FILE", help="DeploymentBody in binary or JSON form, or a core file")
    check.add_argument("--accept", metavar="NAMESPACE", help="for a core: the publisher namespace you accept")
    check.add_argument("--trust", metavar="PUBKEY", action="append", default=[],
                       help="for a core: a trusted public key file or directory (repeatable)")
    check.set_defaults(func=_check)

    show = commands.add_parser(
        "json", help="print a contract in its JSON form",
        description="Print FILE (binary or JSON DeploymentBody) in the Protobuf JSON mapping, for reading and "
                    "editing; `helios contract check` accepts the result.")
    show.add_argument("file", metavar="FILE")
    show.set_defaults(func=_json)


class CoreNeedsTrust(HeliosError):
    """A core's contract is read only from a verified core."""


def _check(args: argparse.Namespace) -> int:
    from helios.contract import ContractError, PreparedContract, load_deployment

    if _is_core(args.file):
        if not args.accept or not args.trust:
            raise CoreNeedsTrust(f"{args.file} is a core: give --accept NAMESPACE and --trust PUBKEY to read its "
                                 "contract from the verified envelope")
        from helios.core import open_core

        with open_core(args.file, trusted_keys=args.trust, accept=args.accept) as core:
            serving, manifest = core.contract, core.manifest
    else:
        try:
            deployment = load_deployment(args.file)
        except ContractError as error:
            print(error)
            return 1
        serving, manifest = deployment.contract, deployment.manifest
    problems = PreparedContract.check(serving, manifest)
    if not problems:
        print("ok")
        return 0
    for problem in problems:
        print(problem)
    return 1


def _json(args: argparse.Namespace) -> int:
    from helios.contract import load_deployment, to_json

    sys.stdout.write(to_json(load_deployment(args.file)))
    return 0


def _is_core(path: str) -> bool:
    from helios.core.layout import MAGIC

    try:
        with open(path, "rb") as file:
            return file.read(len(MAGIC)) == MAGIC
    except OSError:
        return False
