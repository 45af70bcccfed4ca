"""The human form of a contract (host side): DeploymentBody through the Protobuf JSON mapping.

Unknown fields, unknown enum names and duplicate keys are rejected (UnknownJsonField, naming where).
`load_deployment(path)` accepts the binary or the JSON form of a DeploymentBody.
"""

from __future__ import annotations

import re
from pathlib import Path

from google.protobuf import json_format
from google.protobuf.message import DecodeError

from helios.contract.errors import UnknownJsonField
from helios.errors import HeliosError
from helios.proto import core_pb2


class UnreadableContract(HeliosError):
    """The file is neither a binary nor a JSON DeploymentBody."""


def to_json(deployment: core_pb2.DeploymentBody) -> str:
    return json_format.MessageToJson(deployment, indent=2, sort_keys=False) + "\n"


def from_json(text: str) -> core_pb2.DeploymentBody:
    message = core_pb2.DeploymentBody()
    try:
        json_format.Parse(text, message, ignore_unknown_fields=False)
    except json_format.ParseError as error:
        path, reason = _describe(str(error))
        raise UnknownJsonField(path, reason) from None
    return message


def _describe(message: str) -> tuple[str, str]:
    """Turns protobuf's nested parse error into (snake_case field path, innermost reason)."""
    found = re.search(r'at "?(DeploymentBody[\w.\[\]]*)', message)
    path = found.group(1).rstrip(".") if found else "DeploymentBody"
    path = path.removeprefix("DeploymentBody").lstrip(".")
    path = re.sub(r"(?<=[a-z0-9])([A-Z])", lambda m: "_" + m.group(1).lower(), path) or "(root)"
    reason = re.sub(r"^((Failed to parse \w+ field|Failed to load JSON): )+", "", message.splitlines()[0])
    reason = re.sub(r' at "?DeploymentBody[\w.\[\]]*"?\.*$', "", reason).rstrip(".")
    return path, reason


def load_deployment(path: str | Path) -> core_pb2.DeploymentBody:
    data = Path(path).read_bytes()
    stripped = data.lstrip()
    if stripped.startswith(b"{"):
        try:
            return from_json(stripped.decode("utf-8"))
        except UnicodeDecodeError as error:
            raise UnreadableContract(f"{path}: JSON form is not UTF-8 ({error})") from None
    message = core_pb2.DeploymentBody()
    try:
        message.ParseFromString(data)
    except DecodeError as error:
        raise UnreadableContract(f"{path}: not a DeploymentBody in binary or JSON form ({error})") from None
    return message
