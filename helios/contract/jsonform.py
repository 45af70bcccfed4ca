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
        raise UnknownJsonField(_json_path(str(error)), str(error)) from None
    return message


def _json_path(message: str) -> str:
    """Pulls the field path out of protobuf's parse error ('... at "DeploymentBody.contract.model"')."""
    found = re.search(r'at "([^"]+)"', message)
    path = found.group(1) if found else "DeploymentBody"
    return path.removeprefix("DeploymentBody.").removeprefix("DeploymentBody") or "(root)"


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
