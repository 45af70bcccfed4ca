"""PreparedContract: the decoded, validated, typed serving contract and execution manifest (host side).

Every rejection rule of the specification lives in validate.py as its own ContractError subclass
(errors.py), each naming the field path it concerns.
"""

from helios.contract.errors import *  # noqa: F403 (the error classes are part of the public API)
from helios.contract.errors import ContractError
from helios.contract.jsonform import from_json, load_deployment, to_json
from helios.contract.prepared import PreparedContract
from helios.contract.selection import Selection, StartupOptions

__all__ = ["ContractError", "PreparedContract", "Selection", "StartupOptions", "from_json", "load_deployment",
           "to_json"]
