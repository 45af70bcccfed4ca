"""Checkpoint errors (preparation side, host): one class per kind of failure, each message naming
the file or config field concerned."""

from __future__ import annotations

from helios.errors import HeliosError


class CheckpointError(HeliosError):
    """The checkpoint directory cannot be read; the message names the file and what is wrong."""


class MissingCheckpointFile(CheckpointError):
    """A file the checkpoint must have is absent."""


class MalformedCheckpointFile(CheckpointError):
    """A checkpoint file exists but its contents break its format."""


class UnsupportedCheckpoint(HeliosError):
    """The checkpoint is readable but asks for something Helios does not implement.

    The message names the config field (e.g. `config.json: hidden_act = "gelu"`).
    """
