"""Helpers for the queue-feature tests (TTL, dead-lettering, limits, delivery limits,
consumers): waiting for messages that arrive later, reading `x-death`, dead-letter targets
and the reply texts RabbitMQ uses for invalid arguments.

Built on `helpers`; everything talks to a real broker.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from helpers import (
    DEFAULT_TIMEOUT,
    Message,
    Session,
    get_message,
    message_count,
    resource,
    wait_until,
)
from pika.adapters.blocking_connection import BlockingChannel
from pika.exceptions import UnroutableError
from pika.spec import BasicProperties

# Per-message and per-queue TTLs used by the tests: short enough to keep tests fast, long
# enough that a publish and a round trip finish well before the message expires.
SHORT_TTL_MS = 150
# A TTL that never runs out while a test is running.
LONG_TTL_MS = 60_000


# --------------------------------------------------------------------------- reply texts


def invalid_arg_text(arg: str, queue: str, error: str) -> str:
    """RabbitMQ's reply to a queue.declare or basic.consume argument it refuses; `error` is
    the Erlang term it prints, e.g. `{value_negative,-1}` or `invalid_overflow`."""
    return f"PRECONDITION_FAILED - invalid arg '{arg}' for {resource('queue', queue)}: {error}"


# Errors RabbitMQ prints for a value of the wrong AMQP type.
NOT_AN_INTEGER = '"expected integer, got longstr"'


def unacceptable_type(field_type: str) -> str:
    return f"{{unacceptable_type,{field_type}}}"


# --------------------------------------------------------------------------- waiting


def wait_for_message(
    channel: BlockingChannel, queue: str, *, auto_ack: bool = True, timeout: float = DEFAULT_TIMEOUT
) -> Message:
    """Poll with basic.get until a message arrives in `queue` (e.g. a dead-lettered one)."""
    found: list[Message] = []

    def arrived() -> bool:
        message = get_message(channel, queue, auto_ack=auto_ack)
        if message is not None:
            found.append(message)
        return bool(found)

    wait_until(arrived, f"a message arrived in queue {queue!r}", timeout)
    return found[0]


def wait_for_count(channel: BlockingChannel, queue: str, count: int, timeout: float = DEFAULT_TIMEOUT) -> None:
    """Wait until queue.declare reports `count` ready messages, with nobody reading them."""
    wait_until(lambda: message_count(channel, queue) == count, f"queue {queue!r} holds {count} ready messages", timeout)


def holds_for(predicate: Callable[[], bool], seconds: float, what: str) -> None:
    """Check that `predicate()` stays true for a while: for what must NOT happen later."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert predicate(), f"no longer true: {what}"
        time.sleep(0.02)


def routable(confirm_channel: BlockingChannel, queue: str) -> bool:
    """Whether the default exchange still routes to `queue`, learnt by a mandatory publish on a
    channel in confirm mode. Unlike a passive declare or basic.get, a publish does not count as
    using the queue, so it does not renew an `x-expires` lease."""
    try:
        confirm_channel.basic_publish("", queue, b"probe", mandatory=True)
    except UnroutableError:
        return False
    return True


# --------------------------------------------------------------------------- dead-lettering


@dataclass(frozen=True)
class DeadLetterTarget:
    """A dead-letter exchange and a queue that collects what it routes."""

    exchange: str
    queue: str

    def arguments(self, routing_key: str | None = None, **extra: Any) -> dict[str, Any]:
        """Queue arguments that dead-letter into this target."""
        arguments: dict[str, Any] = {"x-dead-letter-exchange": self.exchange, **extra}
        if routing_key is not None:
            arguments["x-dead-letter-routing-key"] = routing_key
        return arguments


def dead_letter_target(amqp: Session, binding_keys: tuple[str, ...] = ()) -> DeadLetterTarget:
    """A fresh exchange plus a queue bound to it: a fanout exchange when no binding keys are
    given, else a direct exchange bound with each key."""
    exchange = amqp.declare_exchange("direct" if binding_keys else "fanout", prefix="dlx")
    queue = amqp.declare_queue("dlq")
    for key in binding_keys or ("",):
        amqp.channel.queue_bind(queue, exchange, key)
    return DeadLetterTarget(exchange, queue)


def x_death(message: Message) -> list[dict[str, Any]]:
    headers = message.properties.headers or {}
    deaths = headers.get("x-death")
    assert isinstance(deaths, list), f"no x-death array in headers {headers!r}"
    return deaths


def death(
    queue: str,
    reason: str,
    *,
    count: int = 1,
    exchange: str = "",
    routing_keys: list[str] | None = None,
    original_expiration: str | None = None,
) -> dict[str, Any]:
    """One x-death entry as RabbitMQ writes it, without its `time`. The routing keys default
    to the queue's own name, as for a message published to the default exchange."""
    entry: dict[str, Any] = {
        "count": count,
        "reason": reason,
        "queue": queue,
        "exchange": exchange,
        "routing-keys": routing_keys if routing_keys is not None else [queue],
    }
    if original_expiration is not None:
        entry["original-expiration"] = original_expiration
    return entry


def first_and_last_death(first: tuple[str, str, str], last: tuple[str, str, str] | None = None) -> dict[str, str]:
    """The x-first-death-* and x-last-death-* headers from (queue, reason, exchange) triples;
    `last` defaults to `first`, as after a single dead-lettering."""
    last = last or first
    return {
        "x-first-death-queue": first[0],
        "x-first-death-reason": first[1],
        "x-first-death-exchange": first[2],
        "x-last-death-queue": last[0],
        "x-last-death-reason": last[1],
        "x-last-death-exchange": last[2],
    }


def deaths_without_time(message: Message, since: datetime) -> list[dict[str, Any]]:
    """The x-death entries minus their `time`, after checking that each `time` is a
    timestamp no earlier than `since` (second precision) and not in the future."""
    now = datetime.now(UTC)
    entries = []
    for entry in x_death(message):
        stamp = entry.get("time")
        assert isinstance(stamp, datetime), f"x-death time is not a timestamp: {entry!r}"
        earliest = since.replace(microsecond=0) - timedelta(seconds=1)
        assert earliest <= stamp <= now + timedelta(seconds=1), f"x-death time {stamp} outside {since}..{now}"
        entries.append({key: value for key, value in entry.items() if key != "time"})
    return entries


def headers_without_x_death(message: Message) -> dict[str, Any]:
    headers = dict(message.properties.headers or {})
    headers.pop("x-death", None)
    return headers


def expiring(milliseconds: int | str, **properties: Any) -> BasicProperties:
    return BasicProperties(expiration=str(milliseconds), **properties)


def utc_now() -> datetime:
    return datetime.now(UTC)
