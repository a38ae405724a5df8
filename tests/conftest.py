"""Fixtures that start real brokers on free loopback ports.

`broker` is shared by the whole session: use it only in tests that neither restart it nor
leave state that other tests could trip over (use unique queue names). Tests that restart,
kill or configure a broker take `fresh_broker` or `broker_factory`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest
from broker_process import BrokerFactory, BrokerProcess, stop_quietly


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("shared-broker") / "data")
    process.start()
    yield process
    stop_quietly(process)


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[BrokerFactory]:
    """Start brokers with extra CLI args or env; all of them are stopped after the test.

    `env` replaces the environment (extend `broker_process.hermetic_env()`).
    Each broker gets its own data dir unless `data_dir` is given.
    """
    started: list[BrokerProcess] = []

    def start(
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        data_dir: Path | None = None,
    ) -> BrokerProcess:
        directory = data_dir if data_dir is not None else tmp_path / f"data-{len(started)}"
        process = BrokerProcess(directory, extra_args=extra_args, env=env)
        started.append(process)
        process.start()
        return process

    yield start
    for process in started:
        stop_quietly(process)


@pytest.fixture
def fresh_broker(broker_factory: BrokerFactory) -> BrokerProcess:
    return broker_factory()
