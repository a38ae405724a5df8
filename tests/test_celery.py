"""Celery (py-amqp transport, rpc:// results) runs a task through the broker."""

from __future__ import annotations

import uuid

from broker_process import BrokerProcess
from celery import Celery
from celery.contrib.testing.worker import start_worker


def test_celery_task_result_comes_back(broker: BrokerProcess) -> None:
    app = Celery(
        "lavin-celery-test",
        broker=f"pyamqp://guest:guest@127.0.0.1:{broker.port}//",
        backend="rpc://",
        set_as_current=False,
    )
    app.conf.update(
        task_default_queue=f"celery-{uuid.uuid4().hex[:12]}",
        broker_connection_retry_on_startup=False,
        worker_hijack_root_logger=False,
    )

    @app.task(name="lavin_tests.add")
    def add(x: int, y: int) -> int:
        return x + y

    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=20):
        result = add.delay(2, 3)
        assert result.get(timeout=20) == 5
