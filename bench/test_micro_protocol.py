"""Micro-benchmarks of the protocol hot path: frames in, publishes assembled, deliveries out.

Batched benchmarks handle 1,000 items per call, so a call's time in ms is the time per item
in µs. Run with `make bench`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lavin.amqp import codec
from lavin.amqp.connection import Connection
from lavin.api.message import encode_properties
from lavin.broker.broker import Broker
from lavin.client.wire import encode_publish
from lavin.config import Config
from lavin.plugin_registry import load_registry
from pamqp import commands, decode, encode, frame
from pamqp.common import FieldTable
from pytest_benchmark.fixture import BenchmarkFixture

BATCH = 1000
FRAME_MAX = Config().frame_max


class DiscardingTransport:
    """Just enough of asyncio.Transport for a Connection that is never read back."""

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def write(self, data: bytes) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


def handshake(config: Config) -> bytes:
    """Everything a client sends up to an open channel 1, in one buffer."""
    methods = [
        (0, commands.Connection.StartOk(client_properties={}, mechanism="PLAIN", response="\0guest\0guest")),
        (0, commands.Connection.TuneOk(channel_max=config.channel_max, frame_max=config.frame_max, heartbeat=0)),
        (0, commands.Connection.Open(virtual_host="/")),
        (1, commands.Channel.Open()),
    ]
    return codec.PROTOCOL_HEADER + b"".join(frame.marshal(method, channel) for channel, method in methods)


@pytest.fixture
def connection(tmp_path: Path) -> Iterator[Connection]:
    """An open connection with channel 1 on an in-process broker; nothing runs its loop."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    config = Config(data_dir=tmp_path / "data")
    broker = Broker(config, load_registry())
    loop.run_until_complete(broker.start())
    connection = Connection(broker)
    connection.connection_made(DiscardingTransport())  # type: ignore[arg-type]
    connection.data_received(handshake(config))
    assert 1 in connection.channels, "the handshake did not open channel 1"
    yield connection
    loop.run_until_complete(broker.shutdown())
    asyncio.set_event_loop(None)
    loop.close()


def test_frame_loop_1000_heartbeats(benchmark: BenchmarkFixture, connection: Connection) -> None:
    """The frame parser alone: heartbeats are dispatched to nothing."""
    frames = codec.HEARTBEAT_FRAME * BATCH
    benchmark(connection.data_received, frames)


def test_publish_assembly_1000_unroutable(benchmark: BenchmarkFixture, connection: Connection) -> None:
    """basic.publish + content header + body to a finished Message, routed to no queue."""
    publishes = encode_publish(1, "amq.direct", "no-such-binding", b"x" * 16, None, FRAME_MAX).data * BATCH
    benchmark(connection.data_received, publishes)


def test_delivery_encoding(benchmark: BenchmarkFixture) -> None:
    """basic.deliver + content header + body frames for one 16-byte message."""
    consumer_tag = codec.shortstr("amq.ctag-benchmark")
    properties = encode_properties({"delivery_mode": 2, "content_type": "application/json"})
    arguments = (1, consumer_tag, 123456, False, "amq.direct", "orders.created", properties, b"x" * 16, FRAME_MAX)
    benchmark(codec.deliver_frames, *arguments)


def test_field_table_decode(benchmark: BenchmarkFixture) -> None:
    """A headers table such as a dead-lettered, retried message carries."""
    table: FieldTable = {
        "x-death": [{"count": 2, "reason": "expired", "queue": "orders", "exchange": "", "routing-keys": ["orders"]}],
        "x-first-death-reason": "expired",
        "x-first-death-queue": "orders",
        "app": "billing",
        "retry": 3,
        "traced": True,
    }
    encoded = encode.field_table(table)
    benchmark(decode.field_table, encoded)
