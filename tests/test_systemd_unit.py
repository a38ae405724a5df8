"""contrib/systemd/lavin.service: systemd accepts it, and it runs the broker as
docs/security.md ("Running Lavin as its own user") says to. That the broker speaks the
notify protocol its Type=notify relies on is tests/test_readiness.py's."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
UNIT = REPO_ROOT / "contrib" / "systemd" / "lavin.service"


def directives(text: str) -> set[str]:
    return {line.strip() for line in text.splitlines() if re.match(r"^[A-Z][A-Za-z]+=", line.strip())}


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here (Debian's systemd)")
def test_systemd_analyze_verifies_the_unit(tmp_path: Path) -> None:
    # verify checks that ExecStart's program exists: point it at this run's `lavin`.
    unit = tmp_path / "lavin.service"
    lavin = Path(sys.executable).parent / "lavin"
    unit.write_text(UNIT.read_text().replace("/usr/local/bin/lavin", str(lavin)))
    result = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
    # A misspelt directive or value is only a warning: any output is a finding.
    assert (result.returncode, result.stdout + result.stderr) == (0, ""), result


def test_the_unit_is_a_notify_service_as_docs_security_md_runs_it() -> None:
    unit = directives(UNIT.read_text())
    assert "Type=notify" in unit
    security = (REPO_ROOT / "docs" / "security.md").read_text()
    section = security.split("## Running Lavin as its own user", 1)[1].split("\n## ", 1)[0]
    [example] = re.findall(r"```ini\n(.*?)```", section, re.DOTALL)
    assert directives(example) - unit == set(), "keep the unit and docs/security.md's example in step"
