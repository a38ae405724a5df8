"""A refused login is answered late, so that guessing passwords is slow, without slowing
down anyone else's login."""

from __future__ import annotations

import time

from broker_process import BrokerProcess
from lavin.amqp.handshake import HANDSHAKE_TIMEOUT, LOGIN_REFUSAL_DELAY
from lavin.client.wire import PROTOCOL_HEADER, Address, Connection, connect
from pamqp import commands

GUESSES = 3
PARALLEL_GUESSES = 20
# The event loop's clock is read once per iteration: a timer may fire a few ms early.
EARLIEST = LOGIN_REFUSAL_DELAY - 0.05


def start_guess(broker: BrokerProcess) -> tuple[Connection, float]:
    """A connection that has sent a wrong password, and when it did; the refusal is still to come."""
    connection = Connection(Address("127.0.0.1", broker.port, "guest", "not-the-password"))
    connection.send_raw(PROTOCOL_HEADER)
    connection.start_ok()
    return connection, time.monotonic()


def seconds_to_refusal(guess: tuple[Connection, float]) -> float:
    connection, guessed_at = guess
    with connection:
        close = connection.expect_connection_close()
        refused_at = time.monotonic()
        connection.read_until_eof()
    assert close.reply_code == 403, close.reply_text
    return refused_at - guessed_at


def test_each_refused_login_takes_the_delay_and_no_longer(broker: BrokerProcess) -> None:
    """The delay bounds guessing without letting a refused client hold its socket: it is
    closed one delay later, well within the handshake's deadline."""
    started = time.monotonic()
    for _ in range(GUESSES):
        assert EARLIEST <= seconds_to_refusal(start_guess(broker)) < LOGIN_REFUSAL_DELAY + 0.5 < HANDSHAKE_TIMEOUT
    assert time.monotonic() - started >= GUESSES * EARLIEST


def test_logins_that_wait_for_their_refusal_do_not_hold_up_a_good_one(broker: BrokerProcess) -> None:
    guesses = [start_guess(broker) for _ in range(PARALLEL_GUESSES)]
    started = time.monotonic()
    with connect(broker.url) as good:
        good.call(commands.Exchange.Declare(exchange="amq.direct", passive=True), commands.Exchange.DeclareOk, 1)
    assert time.monotonic() - started < LOGIN_REFUSAL_DELAY / 2
    for guess in guesses:
        assert seconds_to_refusal(guess) >= EARLIEST
