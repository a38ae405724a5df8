"""Lavin: an AMQP 0-9-1 message broker."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("lavin")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0"
