"""The error the broker cannot start with."""

from __future__ import annotations


class StartupError(Exception):
    """A setting, plugin or data directory the broker cannot start with.

    The CLI prints the message and exits non-zero, without a traceback.
    """
