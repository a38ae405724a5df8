"""Compiles the hot-path modules with mypyc when a wheel is built (a regular `pip install`).

Everything else, and every module in an editable install, stays pure Python: the same
sources run either way, and `LAVIN_PURE_PYTHON=1` skips compilation altogether (for a
machine without a C compiler). See docs/benchmarks.md, "Compiled modules".
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

# Modules of the `lavin` package (core/, and plugins/ as `plugins/`) that carry every message.
HOT_MODULES = (
    "amqp/authorization.py",
    "amqp/codec.py",
    "amqp/channel.py",
    "amqp/confirms.py",
    "amqp/connection.py",
    "amqp/consumer.py",
    "amqp/consumer_timeout.py",
    "amqp/output.py",
    "api/field_table.py",
    "api/message.py",
    "broker/queues/consumer.py",
    "broker/queues/delivery_counts.py",
    "broker/routing/exchange.py",
    "broker/queues/expiry.py",
    "broker/queues/flow.py",
    "broker/runtime/group_commit.py",
    "broker/runtime/message_sizes.py",
    "broker/queues/host.py",
    "broker/routing/host.py",
    "broker/queues/queue.py",
    "broker/vhost.py",
    "storage/segments/decoded_window.py",
    "storage/segments/open_files.py",
    "storage/segments/record.py",
    "storage/segments/segment_files.py",
    "storage/segments/segment_store.py",
)
STAGE = Path("build") / "mypyc-src"  # the sources under their import names, for mypy
BUILDING_WHEEL = {"bdist_wheel", "build_ext", "build", "install"}


def compiled_extensions() -> list:
    if os.environ.get("LAVIN_PURE_PYTHON") or not BUILDING_WHEEL.intersection(sys.argv[1:]):
        return []
    from mypyc.build import mypycify

    # core/ is installed as `lavin` and plugins/ as `lavin.plugins`: mypyc names modules after
    # their paths, so it reads a copy laid out the way the package is imported.
    shutil.rmtree(STAGE, ignore_errors=True)
    skip = shutil.ignore_patterns("__pycache__", "*.so")
    shutil.copytree("core", STAGE / "lavin", ignore=skip)
    shutil.copytree("plugins", STAGE / "lavin" / "plugins", ignore=skip)
    paths = [str(STAGE / "lavin" / module) for module in HOT_MODULES]
    # `--config-file=` keeps pyproject's [tool.mypy] out of the compile: its strictness is for
    # `make lint` (a lint finding must not stop an install), and its mypy_path would have mypy
    # read `lavin` from build/typecheck instead of this copy.
    return mypycify(["--config-file=", "--ignore-missing-imports", *paths], opt_level="3")


class BuildExtOrPurePython(build_ext):
    """A module that fails to compile costs speed, not the install: the pure-Python
    sources are always installed too, and they are imported when no extension is there."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 - a missing or failing compiler raises several types
            for extension in self.extensions:
                Path(self.get_ext_fullpath(extension.name)).unlink(missing_ok=True)
            print(f"warning: compiling with mypyc failed ({exc}); installing pure Python", file=sys.stderr)


setup(ext_modules=compiled_extensions(), cmdclass={"build_ext": BuildExtOrPurePython})
