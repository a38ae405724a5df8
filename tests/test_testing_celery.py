"""The Celery example of docs/testing.md, as it stands there: an application's Celery app
tested against the lavin_broker_session fixture, with an in-process worker."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from celery import Celery
from celery.contrib.testing.worker import start_worker
from lavin.testing import LavinBroker

# The application: its Celery app and a task, written with no broker in mind.
app = Celery("shop", set_as_current=False)
app.conf.update(result_backend="rpc://", worker_hijack_root_logger=False)


@app.task(name="shop.total")
def total(prices: list[int]) -> int:
    return sum(prices)


# Its tests.
@pytest.fixture(scope="session")
def celery_worker(lavin_broker_session: LavinBroker) -> Iterator[None]:
    # Without broker heartbeats the worker's loop wakes up every second, so it notices at
    # once that the test session asks it to stop; with them, it may sleep for 10 s.
    app.conf.update(broker_url=lavin_broker_session.url, broker_heartbeat=0)
    with start_worker(app, pool="solo", perform_ping_check=False):
        yield


def test_total_runs_on_a_worker(celery_worker: None) -> None:
    assert total.delay([3, 4, 5]).get(timeout=10) == 12
