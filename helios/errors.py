"""The root of every error Helios raises for bad input (host side).

Each violated invariant has its own subclass in the module that owns the invariant; the CLI prints
`str(error)` as one line and exits with `exit_code`, never a traceback.
"""


class HeliosError(Exception):
    """A user-facing failure: bad input, an invalid core, an unsupported checkpoint."""

    exit_code = 2
