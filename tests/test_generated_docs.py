"""The docs' tables made from the code (lavin.reference) show the code as it is: each page
holds its table as rendered now, `python -m lavin.reference` repairs a stale one, and a page
without the markers is refused rather than written half."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from lavin.reference import TABLES, GeneratedTable

REPO_ROOT = Path(__file__).resolve().parent.parent
BY_NAME = {table.name: table for table in TABLES}


@pytest.mark.parametrize("table", TABLES, ids=lambda table: table.name)
def test_the_page_shows_the_table_the_code_makes(table: GeneratedTable) -> None:
    document = (REPO_ROOT / table.page).read_text(encoding="utf-8")
    assert document.count(table.begin) == 1 and document.count(table.end) == 1, table.page
    assert document == table.redrawn(document), f"redraw it: python -m lavin.reference (in {REPO_ROOT})"


@pytest.mark.parametrize(
    ("name", "line", "stale_line"),
    [
        ("settings", "| `[amqp]` | `port` |", "| `[amqp]` | `prot` |"),
        ("queue-arguments", "| `x-message-ttl` |", "| `x-message-tll` |"),
        ("ctl-commands", "| `reload_tls` |", "| `reload_tsl` |"),
    ],
)
def test_the_command_redraws_a_stale_table(tmp_path: Path, name: str, line: str, stale_line: str) -> None:
    for table in TABLES:
        (tmp_path / table.page).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO_ROOT / table.page, tmp_path / table.page)
    page = tmp_path / BY_NAME[name].page
    current = page.read_text(encoding="utf-8")
    assert line in current
    page.write_text(current.replace(line, stale_line, 1), encoding="utf-8")
    subprocess.run([sys.executable, "-m", "lavin.reference", str(tmp_path)], check=True, timeout=60)
    assert page.read_text(encoding="utf-8") == current


@pytest.mark.parametrize("table", TABLES, ids=lambda table: table.name)
def test_a_page_without_the_markers_is_refused(table: GeneratedTable) -> None:
    with pytest.raises(ValueError, match=f"lacks the {table.name} table's markers"):
        table.redrawn("# A page\n")
