"""Names and texts a client sends are logged with their control characters escaped: a
newline cannot start a forged log line, nor an escape sequence reach the operator's
terminal."""

from __future__ import annotations

import struct

from broker_process import BrokerProcess
from lavin.client.wire import (
    FRAME_METHOD,
    PROTOCOL_HEADER,
    Address,
    Connection,
    connect,
    content_body_frame,
    content_header_frame,
    raw_frame,
)
from pamqp import commands

FORGED_USER = "x\nFORGED user line"
FORGED_EXCHANGE = "x\nFORGED exchange line\x1b[2J"


def test_a_user_name_with_a_newline_does_not_forge_a_log_line(broker: BrokerProcess) -> None:
    with Connection(Address("127.0.0.1", broker.port, FORGED_USER, "guest")) as connection:
        connection.send_raw(PROTOCOL_HEADER)
        connection.start_ok()
        assert connection.expect_connection_close().reply_code == 403
    assert not [line for line in broker.output.splitlines() if line.startswith("FORGED")]
    assert "login of unknown user 'x\\nFORGED user line'" in broker.output


def test_an_exchange_name_in_a_logged_error_is_escaped(broker: BrokerProcess) -> None:
    name = FORGED_EXCHANGE.encode()
    # Built by hand: client libraries refuse such a name, RabbitMQ takes any bytes.
    publish = struct.pack(">HHHB", 60, 40, 0, len(name)) + name + b"\x00\x00"
    with connect(broker.url) as connection:
        connection.send_raw(
            raw_frame(FRAME_METHOD, 1, publish) + content_header_frame(1, 1) + content_body_frame(1, b"x")
        )
        assert connection.expect(commands.Channel.Close, channel=1).reply_code == 404
    log = broker.output
    assert not [line for line in log.splitlines() if line.startswith("FORGED")]
    assert "\x1b" not in log
    assert "no exchange 'x\\nFORGED exchange line\\x1b[2J'" in log
