"""A private etcd for each clustering test, or for each module of tests that share one
cluster."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from lavin.testing.etcd_server import MISSING_REASON, EtcdServer


def running_etcd(directory: Path) -> Iterator[EtcdServer]:
    """A running single-member etcd on loopback; skips when Debian's etcd is not installed."""
    if not EtcdServer.available():
        pytest.skip(MISSING_REASON)
    server = EtcdServer(directory)
    server.start()
    yield server
    server.kill()


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EtcdServer]:
    yield from running_etcd(tmp_path / "etcd-server")


@pytest.fixture(scope="module")
def module_etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    yield from running_etcd(tmp_path_factory.mktemp("etcd-server"))
