"""`helios contract`: check a prepared contract and print its human (JSON) form (host side)."""

from __future__ import annotations

import argparse
import sys


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "contract", help="check a serving contract, or print its JSON form",
        description="Work with a core's serving contract and execution manifest (a DeploymentBody) on its own, "
                    "in binary Protobuf or JSON form.")
    commands = parser.add_subparsers(dest="contract_command", metavar="SUBCOMMAND", required=True)

    check = commands.add_parser(
        "check", help="validate a contract against every rule; print ok or one line per error",
        description="Decode FILE (a DeploymentBody: binary Protobuf, or the Protobuf JSON mapping with unknown "
                    "fields rejected) as a PreparedContract and check every rule of the specification. Prints "
                    "`ok` and exits 0 when valid; otherwise prints one line per problem, `PATH: what is wrong`, "
                    "and exits 1.",
        epilog="example: helios contract check deployment.json")
    check.add_argument("file", metavar="FILE", help="DeploymentBody in binary or JSON form")
    check.set_defaults(func=_check)

    show = commands.add_parser(
        "json", help="print a contract in its JSON form",
        description="Print FILE (binary or JSON DeploymentBody) in the Protobuf JSON mapping, for reading and "
                    "editing; `helios contract check` accepts the result.")
    show.add_argument("file", metavar="FILE")
    show.set_defaults(func=_json)


def _check(args: argparse.Namespace) -> int:
    from helios.contract import ContractError, PreparedContract, load_deployment

    try:
        deployment = load_deployment(args.file)
    except ContractError as error:
        print(error)
        return 1
    problems = PreparedContract.check(deployment.contract, deployment.manifest)
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
