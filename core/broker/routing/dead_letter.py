"""Dead-lettering: republish a message to the queue's dead-letter exchange with x-death.

The x-death table follows RabbitMQ: one entry per (queue, reason), newest first, with a
count; x-first-death-* and x-last-death-* headers; the per-message expiration moves to
`original-expiration`. A message that would loop back into a queue without a client
rejecting it somewhere on the way is dropped for that queue, as RabbitMQ does.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from lavin.api import Message
from lavin.api.message import encode_properties
from lavin.api.printable import printable
from lavin.broker.routing.sender_selected import routing_keys_of

if TYPE_CHECKING:
    from lavin.broker.queues.queue import Queue
    from lavin.broker.routing.exchange import Exchange, Reached

log = logging.getLogger(__name__)


def dead_letter(exchanges: Mapping[str, Exchange], queue: Queue, message: Message, reason: str) -> None:
    """Route a copy of `message` to the queue's dead-letter exchange, one of `exchanges` (its
    vhost's), if it has one."""
    settings = queue.settings
    if settings.dead_letter_exchange is None:
        return
    exchange = exchanges.get(settings.dead_letter_exchange)
    if exchange is None:
        log.debug(
            "queue %s: dead-letter exchange %s is missing, message dropped",
            printable(queue.name),
            printable(settings.dead_letter_exchange),
        )
        return
    try:
        props = dict(message.props)
    except ValueError:
        return  # unreadable properties were refused at publish; nothing sane to forward
    headers = dict(props.get("headers") or {})
    routing_keys = routing_keys_of(message)  # BCC was stripped at publish: key and CC keys
    deaths = _record_death(queue.name, reason, message, props, headers, routing_keys)
    headers["x-death"] = deaths
    for field, value in (("reason", reason), ("queue", queue.name), ("exchange", message.exchange)):
        headers.setdefault(f"x-first-death-{field}", value)
        headers[f"x-last-death-{field}"] = value
    new_keys = routing_keys
    if settings.dead_letter_routing_key is not None:
        new_keys = [settings.dead_letter_routing_key]
        headers.pop("CC", None)
    props.pop("expiration", None)
    props["headers"] = headers
    copy = Message(exchange.name, new_keys[0], encode_properties(props), message.body, int(time.time() * 1000))
    targets: set[Reached] = set()
    exchange.route(new_keys, copy, targets)
    for target in targets:
        if _is_cycle(target.name, deaths):
            log.warning(
                "message dropped: dead-letter cycle from queue '%s' to '%s' (reason %s)",
                printable(queue.name),
                printable(target.name),
                reason,
            )
            continue
        target.publish(copy)


def _record_death(
    queue: str, reason: str, message: Message, props: dict[str, Any], headers: dict[str, Any], routing_keys: list[str]
) -> list[dict[str, Any]]:
    deaths = [dict(d) for d in headers.get("x-death") or [] if isinstance(d, dict)]
    for index, death in enumerate(deaths):
        if death.get("queue") == queue and death.get("reason") == reason:
            death["count"] = int(death.get("count", 0)) + 1  # `time` stays that of the first death
            deaths.insert(0, deaths.pop(index))
            return deaths
    new_death: dict[str, Any] = {
        "count": 1,
        "reason": reason,
        "queue": queue,
        "time": _now(),
        "exchange": message.exchange,
        "routing-keys": routing_keys,
    }
    if props.get("expiration") is not None:
        new_death["original-expiration"] = props["expiration"]
    return [new_death, *deaths]


def _is_cycle(target: str, deaths: list[dict[str, Any]]) -> bool:
    """Reaching `target` again is a cycle unless a client rejected it on the way."""
    for death in deaths:
        if death.get("reason") == "rejected":
            return False
        if death.get("queue") == target:
            return True
    return False


def _now() -> datetime:
    return datetime.fromtimestamp(int(time.time()), tz=UTC)
