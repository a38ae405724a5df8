"""The connection handshake on the wire: protocol header, start, login, tune, open and
heartbeats.

Expected codes and texts are RabbitMQ 3.x's (rabbit_reader.erl): negotiation failures
are 530 NOT_ALLOWED sent by `fail_negotiation/4`, unknown vhosts 530 from
`is_over_vhost_connection_limit/2`, failed logins 403 from `auth_fail/5`.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from broker_process import BrokerProcess
from lavin.client.wire import (
    PROTOCOL_HEADER,
    Address,
    Connection,
    Received,
    connect,
    heartbeat_frame,
)
from pamqp import commands, heartbeat

RABBITMQ_CAPABILITIES = (
    "publisher_confirms",
    "exchange_exchange_bindings",
    "basic.nack",
    "consumer_cancel_notify",
    "connection.blocked",
    "consumer_priorities",
    "authentication_failure_close",
    "per_consumer_qos",
    "direct_reply_to",
)


@pytest.mark.parametrize(
    "greeting",
    [
        pytest.param(b"AMQP\x00\x00\x09\x00", id="amqp-0-9-0"),
        pytest.param(b"AMQP\x01\x01\x00\x0a", id="amqp-0-10"),
        pytest.param(b"HTTP/1.1 200 OK\r\n\r\n", id="http-response"),
        pytest.param(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n", id="http-get"),
    ],
)
def test_unsupported_protocol_header_is_answered_with_0_9_1_and_closed(broker: BrokerProcess, greeting: bytes) -> None:
    with Connection(broker.url) as conn:
        conn.send_raw(greeting)
        assert conn.read_until_eof() == PROTOCOL_HEADER


def test_connection_start_describes_the_server(broker: BrokerProcess) -> None:
    with Connection(broker.url) as conn:
        conn.send_raw(PROTOCOL_HEADER)
        start = conn.expect(commands.Connection.Start)

    assert (start.version_major, start.version_minor) == (0, 9)
    assert {"PLAIN", "AMQPLAIN"} <= set(start.mechanisms.split())
    assert start.locales == "en_US"
    properties = start.server_properties
    for key in ("product", "version", "platform"):
        assert properties.get(key), f"server_properties lacks {key!r}: {properties}"
    capabilities = properties.get("capabilities")
    assert isinstance(capabilities, dict), f"no capabilities table: {properties}"
    assert {name: capabilities.get(name) for name in RABBITMQ_CAPABILITIES} == dict.fromkeys(
        RABBITMQ_CAPABILITIES, True
    )


def test_tune_proposes_rabbitmq_defaults(broker: BrokerProcess) -> None:
    with Connection(broker.url) as conn:
        conn.send_raw(PROTOCOL_HEADER)
        conn.start_ok()
        tune = conn.expect(commands.Connection.Tune)

    assert (tune.channel_max, tune.frame_max, tune.heartbeat) == (2047, 131072, 60)


@pytest.mark.parametrize("mechanism", ["PLAIN", "AMQPLAIN"])
def test_login_with_valid_credentials_opens_the_connection(broker: BrokerProcess, mechanism: str) -> None:
    with connect(broker.url, mechanism=mechanism, channels=(1,)) as conn:
        conn.send(commands.Queue.Declare(queue="", exclusive=True), 1)
        declared = conn.expect(commands.Queue.DeclareOk, channel=1)
        assert declared.queue.startswith("amq.gen-")


@pytest.mark.parametrize("mechanism", ["PLAIN", "AMQPLAIN"])
@pytest.mark.parametrize(("username", "password"), [("guest", "not-the-password"), ("nobody", "guest")])
def test_failed_login_is_closed_with_access_refused(
    broker: BrokerProcess, mechanism: str, username: str, password: str
) -> None:
    with Connection(Address("127.0.0.1", broker.port, username, password)) as conn:
        conn.send_raw(PROTOCOL_HEADER)
        conn.start_ok(mechanism)
        close = conn.expect_connection_close()
        conn.read_until_eof()

    assert close.reply_code == 403
    assert close.reply_text.startswith(
        f"ACCESS_REFUSED - Login was refused using authentication mechanism {mechanism}"
    ), close.reply_text


def test_failed_login_without_authentication_failure_close_just_drops_the_socket(
    broker: BrokerProcess,
) -> None:
    with Connection(Address("127.0.0.1", broker.port, password="not-the-password")) as conn:
        conn.send_raw(PROTOCOL_HEADER)
        conn.start_ok(capabilities={})
        frames = conn.frames_until_eof(timeout=10)

    assert not [f for f in frames if isinstance(f.frame, commands.Connection.Close)]


TuneOkFactory = Callable[[commands.Connection.Tune], commands.Connection.TuneOk]


@pytest.mark.parametrize(
    ("tune_ok", "expected_text"),
    [
        pytest.param(
            lambda tune: commands.Connection.TuneOk(tune.channel_max, 4095, 0),
            lambda tune: "negotiated frame_max = 4095 is lower than the minimum allowed value (4096)",
            id="frame_max-below-4096",
        ),
        pytest.param(
            lambda tune: commands.Connection.TuneOk(tune.channel_max, tune.frame_max + 1, 0),
            lambda tune: (
                f"negotiated frame_max = {tune.frame_max + 1} is higher than "
                f"the maximum allowed value ({tune.frame_max})"
            ),
            id="frame_max-above-server",
        ),
        pytest.param(
            lambda tune: commands.Connection.TuneOk(tune.channel_max + 1, tune.frame_max, 0),
            lambda tune: (
                f"negotiated channel_max = {tune.channel_max + 1} is higher than "
                f"the maximum allowed value ({tune.channel_max})"
            ),
            id="channel_max-above-server",
        ),
    ],
)
def test_out_of_range_tune_ok_is_refused_with_not_allowed(
    broker: BrokerProcess,
    tune_ok: TuneOkFactory,
    expected_text: Callable[[commands.Connection.Tune], str],
) -> None:
    with Connection(broker.url) as conn:
        conn.send_raw(PROTOCOL_HEADER)
        conn.start_ok()
        tune = conn.expect(commands.Connection.Tune)
        conn.send(tune_ok(tune))
        close = conn.expect_connection_close()

    assert close.reply_code == 530
    assert close.reply_text == f"NOT_ALLOWED - {expected_text(tune)}"
    assert (close.class_id, close.method_id) == (10, 30)  # connection.tune


def test_channels_beyond_negotiated_channel_max_are_refused(
    broker: BrokerProcess,
) -> None:
    with connect(broker.url, channel_max=2, channels=(1, 2)) as conn:
        conn.send(commands.Channel.Open(), 3)
        close = conn.expect_connection_close()

    assert close.reply_code == 530
    assert close.reply_text.startswith("NOT_ALLOWED - "), close.reply_text
    assert "channel_max" in close.reply_text


def test_open_of_unknown_vhost_is_refused(broker: BrokerProcess) -> None:
    with Connection(broker.url) as conn:
        conn.send_raw(PROTOCOL_HEADER)
        conn.start_ok()
        conn.tune_ok(vhost="no-such-vhost")
        close = conn.expect_connection_close()

    assert close.reply_code == 530
    assert close.reply_text == "NOT_ALLOWED - vhost no-such-vhost not found"
    assert (close.class_id, close.method_id) == (10, 40)  # connection.open


def test_silent_client_is_disconnected_after_two_missed_heartbeats(
    broker: BrokerProcess,
) -> None:
    with connect(broker.url, heartbeat=1) as conn:
        silent_since = time.monotonic()
        conn.read_until_eof(timeout=10)
        silent_for = time.monotonic() - silent_since

    assert 1.5 <= silent_for <= 5.0, f"disconnected after {silent_for:.1f}s of silence"


def test_broker_sends_heartbeats_on_an_idle_connection(broker: BrokerProcess) -> None:
    received: list[Received] = []
    with connect(broker.url, heartbeat=1) as conn:
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline and not received:
            conn.send_raw(heartbeat_frame())
            try:
                got = conn.recv_frame(timeout=0.5)
            except TimeoutError:
                continue
            assert got is not None, "broker closed a connection that kept sending heartbeats"
            received.append(got)

    assert received, "no frame from the broker within 3 s on a connection with heartbeat=1"
    assert isinstance(received[0].frame, heartbeat.Heartbeat), received[0]
    assert received[0].channel == 0
