"""Fixtures for tests that need a real broker, registered with pytest by the `pytest11`
entry point of the lavin distribution: installing lavin is all it takes to use them.

- `lavin_broker`: a broker of the test's own, with an empty data dir (a `LavinBroker`).
- `lavin_url`: its AMQP URL, `amqp://guest:guest@127.0.0.1:PORT/%2F`.
- `lavin_broker_session`: one broker for the whole session, for tests that use names of
  their own and can share it.
- `lavin_plugins`: the names the brokers enable, as `lavin serve --plugin NAME` does;
  none unless a conftest overrides it (keep the override session-scoped, or use only
  `lavin_broker`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from lavin.testing.broker import LavinBroker

# Detailed assertion messages from the kits. pytest rewrites the modules of a regular
# install by itself, but an editable install hides them from that scan.
pytest.register_assert_rewrite("lavin.testing.exchange_kit", "lavin.testing.queue_kit")


@pytest.fixture(scope="session")
def lavin_plugins() -> Sequence[str]:
    """The plugin names the broker fixtures enable: override it to enable some."""
    return ()


def _broker(tmp_path_factory: pytest.TempPathFactory, plugins: Sequence[str]) -> Iterator[LavinBroker]:
    from lavin.testing.broker import running_broker  # here, so runs without a broker never import one

    with running_broker(tmp_path_factory.mktemp("lavin-data"), plugins) as broker:
        yield broker


@pytest.fixture
def lavin_broker(tmp_path_factory: pytest.TempPathFactory, lavin_plugins: Sequence[str]) -> Iterator[LavinBroker]:
    """A broker for this test alone, stopped when the test ends."""
    yield from _broker(tmp_path_factory, lavin_plugins)


@pytest.fixture(scope="session")
def lavin_broker_session(
    tmp_path_factory: pytest.TempPathFactory, lavin_plugins: Sequence[str]
) -> Iterator[LavinBroker]:
    """One broker shared by every test of the session that asks for it."""
    yield from _broker(tmp_path_factory, lavin_plugins)


@pytest.fixture
def lavin_url(lavin_broker: LavinBroker) -> str:
    """The AMQP URL of `lavin_broker`."""
    return lavin_broker.url
