"""The layers point one way (pyproject.toml [tool.importlinter], docs/architecture.md).

import-linter reads one package tree, while the sources of `lavin` live in core/, plugins/
and bench/; the tests lay them out as the wheel does, in a temporary directory, and run
`lint-imports` there: once on the sources as they are, once with a back-edge added.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
# Where each folder goes in the installed `lavin` package.
PACKAGE_LAYOUT = {"core": "lavin", "plugins": "lavin/plugins", "bench": "lavin/bench"}

pytestmark = pytest.mark.skipif(not LINT_IMPORTS.exists(), reason="import-linter is not installed")


def staged_package(root: Path) -> Path:
    for source, target in PACKAGE_LAYOUT.items():
        shutil.copytree(REPO_ROOT / source, root / target, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    return root


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    # The staged tree comes first on the path, ahead of the editable install's finder.
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(REPO_ROOT / "pyproject.toml"), "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_sources_keep_every_contract(tmp_path: Path) -> None:
    result = lint_imports(staged_package(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "BROKEN" not in result.stdout


@pytest.mark.parametrize(
    ("module", "back_edge", "contract"),
    [
        ("lavin/broker/queues/queue.py", "from lavin.amqp import codec", "one-way layers"),
        ("lavin/storage/segments/record.py", "from lavin.broker.queues import flow", "one-way layers"),
        ("lavin/api/queue.py", "from lavin.storage import disk", "lavin.api imports nothing of the core"),
        ("lavin/plugins/exchanges/direct.py", "from lavin.broker.queues import queue", "import only lavin.api"),
        ("lavin/management/routes/channels.py", "from lavin.amqp import channel", "not import the AMQP layer"),
        ("lavin/broker/runtime/stats.py", "from lavin.broker.broker import Broker", "inside lavin.broker"),
        ("lavin/broker/queues/queue.py", "from lavin.broker.routing.exchange import Exchange", "inside lavin.broker"),
        ("lavin/broker/policy/policies.py", "from lavin.broker.queues.queue import Queue", "inside lavin.broker"),
        ("lavin/amqp/output.py", "from lavin.amqp import connection", "write side imports nothing"),
    ],
)
def test_a_back_edge_breaks_a_contract(tmp_path: Path, module: str, back_edge: str, contract: str) -> None:
    root = staged_package(tmp_path)
    source = root / module
    # Behind TYPE_CHECKING too: a type-only import still points up a layer.
    source.write_text(source.read_text() + f"\nimport typing\n\nif typing.TYPE_CHECKING:\n    {back_edge}\n")
    result = lint_imports(root)
    assert result.returncode != 0
    broken = result.stdout.split("Broken contracts", 1)[-1]
    assert contract in broken, result.stdout
