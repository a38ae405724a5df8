"""A private etcd for each clustering test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from lavin.testing.etcd_server import MISSING_REASON, EtcdServer


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EtcdServer]:
    """A running single-member etcd on loopback; skips when Debian's etcd is not installed."""
    if not EtcdServer.available():
        pytest.skip(MISSING_REASON)
    server = EtcdServer(tmp_path / "etcd-server")
    server.start()
    yield server
    server.kill()
