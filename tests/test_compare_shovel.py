"""bench/compare's shovel rows: the measuring window's arithmetic, a run against a real Lavin
that leaves nothing behind, and both rows in a comparison (a second Lavin started for the
broker to broker row; a broker whose shovels the comparison cannot set shows n/a)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pytest
import requests
from broker_process import BrokerProcess
from lavin.bench.brokers import Broker, LavinShovels
from lavin.bench.comparison import Measured, ShovelScenario, run_shovel_rows
from lavin.bench.shovel import (
    DESTINATION_QUEUE,
    SOURCE_QUEUE,
    Sample,
    figures,
    moving_window,
    run_shovel,
    shovel_definition,
)
from test_compare_peers import compare, table

AUTH = ("guest", "guest")


def test_the_window_runs_from_the_last_empty_look_to_the_first_full_one() -> None:
    samples = [Sample(0.0, 0, 1.0), Sample(0.5, 0, 1.1), Sample(1.0, 40, 1.5), Sample(2.0, 100, 2.0),
               Sample(2.5, 100, 2.1)]  # fmt: skip
    assert moving_window(samples, 100) == (samples[1], samples[3])


def test_no_window_before_every_message_arrived_or_without_an_empty_look() -> None:
    assert moving_window([Sample(0.0, 0, None), Sample(1.0, 99, None)], 100) is None
    assert moving_window([Sample(0.0, 5, None), Sample(1.0, 100, None)], 100) is None
    assert moving_window([], 100) is None


def test_figures_are_messages_per_second_and_broker_cpu_per_message() -> None:
    moved = figures(Sample(1.0, 0, 10.0), Sample(3.0, 1000, 10.5), 1000)
    assert moved.rate == pytest.approx(500.0)
    assert moved.cpu_us_per_message == pytest.approx(500.0)
    assert figures(Sample(1.0, 0, None), Sample(3.0, 1000, None), 1000).cpu_us_per_message is None


def test_the_definition_uses_keys_both_brokers_read() -> None:
    definition = shovel_definition("amqp://")
    assert definition == {
        "src-uri": "amqp://", "src-queue": SOURCE_QUEUE, "src-prefetch-count": 1000,
        "dest-uri": "amqp://", "dest-queue": DESTINATION_QUEUE, "ack-mode": "on-confirm",
    }  # fmt: skip


def test_a_shovel_run_moves_the_backlog_and_leaves_nothing_behind(fresh_broker: BrokerProcess) -> None:
    broker = Broker("Lavin", fresh_broker.url, fresh_broker.pid, shovels=LavinShovels(fresh_broker.http_url))
    moved = run_shovel(broker, None, 300, 100)
    assert moved.rate > 0
    assert moved.cpu_us_per_message is not None  # read in clock ticks: 0 for a run this short
    shovels = requests.get(f"{fresh_broker.http_url}/api/parameters/shovel", auth=AUTH, timeout=10)
    assert shovels.json() == []
    queues = requests.get(f"{fresh_broker.http_url}/api/queues/%2F", auth=AUTH, timeout=10).json()
    assert not {queue["name"] for queue in queues} & {SOURCE_QUEUE, DESTINATION_QUEUE}


def test_a_shovel_the_broker_refuses_fails_the_run_and_is_cleaned_up(fresh_broker: BrokerProcess) -> None:
    class Refused(LavinShovels):
        def set(self, name: str, value: Mapping[str, Any]) -> None:
            super().set(name, {**shovel_definition("amqp://"), "ack-mode": "sometimes"})

    broker = Broker("Lavin", fresh_broker.url, fresh_broker.pid, shovels=Refused(fresh_broker.http_url))
    with pytest.raises(RuntimeError, match="setting the shovel failed: HTTP Error 400"):
        run_shovel(broker, None, 10, 100)
    queues = requests.get(f"{fresh_broker.http_url}/api/queues/%2F", auth=AUTH, timeout=10).json()
    assert not {queue["name"] for queue in queues} & {SOURCE_QUEUE, DESTINATION_QUEUE}


def test_compare_runs_both_shovel_rows(fresh_broker: BrokerProcess) -> None:
    done = compare("--only", "shovel", "--rounds", "1", "--shovel-messages", "300",
                   "--peer", f"running={fresh_broker.url}")  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = table(done.stdout)
    shape = "300 x 100 B, transient, on-confirm"
    for label in (f"shovel, queue to queue on one broker ({shape})", f"shovel, broker to broker ({shape})"):
        unit, lavin, running, ratio, lavin_cpu, running_cpu = rows[label]
        assert unit == "msg/s"
        assert float(lavin.replace(",", "")) > 0 and float(lavin_cpu.replace(",", "")) >= 0
        assert (running, ratio, running_cpu) == ("n/a", "n/a", "n/a")


def test_a_second_broker_that_does_not_start_shows_n_a_and_the_table_goes_on() -> None:
    @contextmanager
    def not_starting(instance: str) -> Iterator[Broker]:
        raise RuntimeError(f"Lavin{instance} did not start listening")
        yield  # a generator, as the real starters are

    scenario = ShovelScenario("shovel, broker to broker", 10, remote=True)
    lavin = Broker("Lavin", "amqp://guest:guest@127.0.0.1:1/%2F", None, shovels=LavinShovels("http://127.0.0.1:1"))
    _, runs = run_shovel_rows(scenario, [lavin], [not_starting], rounds=2)
    assert runs == [[Measured(None, None), Measured(None, None)]]
