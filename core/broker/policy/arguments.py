"""Declare-time argument rules: which queue type, and when a redeclare is equivalent.

As RabbitMQ does, only the arguments the broker understands take part in the
equivalence check; unknown `x-` arguments are stored but never compared.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lavin.api import errors
from lavin.api.arguments import field_type

if TYPE_CHECKING:
    from lavin.broker.queues.queue import Queue
    from lavin.broker.routing.exchange import Exchange

COMPARED_QUEUE_ARGUMENTS = (
    "x-queue-type",
    "x-message-ttl",
    "x-expires",
    "x-max-length",
    "x-max-length-bytes",
    "x-max-priority",
    "x-overflow",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-single-active-consumer",
    "x-delivery-limit",
    "x-queue-mode",
    "x-consumer-timeout",
)
COMPARED_EXCHANGE_ARGUMENTS = ("alternate-exchange",)


def queue_type_name(arguments: dict[str, Any]) -> str:
    """`x-queue-type` (default `classic`); a classic queue with `x-max-priority` is `priority`."""
    explicit = arguments.get("x-queue-type")
    if explicit is None:
        name = "classic"
    elif isinstance(explicit, bytes):  # not UTF-8: names no queue type, shown by its bytes in the 406
        name = explicit.decode("utf-8", "backslashreplace")
    else:
        name = str(explicit)
    # In RabbitMQ a classic queue with x-max-priority is a priority queue.
    if name == "classic" and arguments.get("x-max-priority") is not None:
        return "priority"
    return name


def _describe(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "none" if value is None else str(value)


def _inequivalent(
    arg: str, kind: str, name: str, vhost: str, received: object, current: object
) -> errors.PreconditionFailed:
    return errors.PreconditionFailed(
        f"inequivalent arg '{arg}' for {kind} '{name}' in vhost '{vhost}': "
        f"received '{_describe(received)}' but current is '{_describe(current)}'"
    )


def check_queue_equivalence(
    queue: Queue, vhost: str, durable: bool, exclusive: bool, auto_delete: bool, arguments: dict[str, Any]
) -> None:
    flags = (
        ("durable", durable, queue.durable),
        ("exclusive", exclusive, queue.exclusive_owner is not None),
        ("auto_delete", auto_delete, queue.auto_delete),
    )
    for arg, received, current in flags:
        if received != current:
            raise _inequivalent(arg, "queue", queue.name, vhost, received, current)
    _check_arguments(COMPARED_QUEUE_ARGUMENTS, "queue", queue.name, vhost, arguments, queue.arguments)


def check_exchange_equivalence(
    exchange: Exchange,
    vhost: str,
    type_name: str,
    durable: bool,
    auto_delete: bool,
    internal: bool,
    arguments: dict[str, Any],
) -> None:
    flags = (
        ("type", type_name, exchange.type_name),
        ("durable", durable, exchange.durable),
        ("auto_delete", auto_delete, exchange.auto_delete),
        ("internal", internal, exchange.internal),
    )
    for arg, received, current in flags:
        if received != current:
            raise _inequivalent(arg, "exchange", exchange.name, vhost, received, current)
    _check_arguments(COMPARED_EXCHANGE_ARGUMENTS, "exchange", exchange.name, vhost, arguments, exchange.arguments)


def _typed(value: object) -> str:
    """An argument as RabbitMQ names it in errors: the value and its AMQP field type."""
    if value is None:
        return "none"
    return f"the value '{_describe(value)}' of type '{field_type(value)}'"


def _check_arguments(
    names: tuple[str, ...], kind: str, name: str, vhost: str, received: dict[str, Any], current: dict[str, Any]
) -> None:
    for arg in names:
        if received.get(arg) != current.get(arg):
            raise errors.PreconditionFailed(
                f"inequivalent arg '{arg}' for {kind} '{name}' in vhost '{vhost}': "
                f"received {_typed(received.get(arg))} but current is {_typed(current.get(arg))}"
            )


OVERFLOW_MODES = ("drop-head", "reject-publish", "reject-publish-dlx")

# Arguments a queue type refuses outright, by type name, with RabbitMQ's text and no
# reason: "invalid arg 'x-max-priority' for queue 'q' in vhost '/'" (quorum, as in 3.10).
REFUSED_QUEUE_ARGUMENTS: dict[str, tuple[str, ...]] = {"quorum": ("x-max-priority", "x-queue-mode")}
# A quorum queue counts every message's deliveries (for `x-delivery-count`) also without
# `x-delivery-limit`: an unreachable limit does that (counts are 32-bit).
UNLIMITED_DELIVERIES = 2**32


@dataclass(frozen=True)
class QueueSettings:
    """The queue arguments the core acts on, validated once at declare time."""

    message_ttl: int | None = None  # ms
    expires: int | None = None  # ms
    max_length: int | None = None
    max_length_bytes: int | None = None
    overflow: str = "drop-head"
    dead_letter_exchange: str | None = None
    dead_letter_routing_key: str | None = None
    delivery_limit: int | None = None
    single_active_consumer: bool = False
    consumer_timeout: int | None = None  # ms; None: the broker's consumer_timeout, 0: none


def parse_queue_settings(queue: str, vhost: str, arguments: dict[str, Any]) -> QueueSettings:
    """Validate the arguments RabbitMQ validates, with its error texts (406)."""

    def invalid(arg: str, reason: str) -> errors.PreconditionFailed:
        return errors.PreconditionFailed(f"invalid arg '{arg}' for queue '{queue}' in vhost '{vhost}': {reason}")

    def integer(arg: str, minimum: int) -> int | None:
        value = arguments.get(arg)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise invalid(arg, f'"expected integer, got {field_type(value)}"')
        if value < minimum:
            raise invalid(arg, f"{{value_negative,{value}}}" if value < 0 else f"{{value_zero,{value}}}")
        return value

    def text(arg: str) -> str | None:
        value = arguments.get(arg)
        if value is None:
            return None
        if isinstance(value, bytes):  # a long string that is not UTF-8
            raise invalid(arg, "invalid_utf8")
        if not isinstance(value, str):
            raise invalid(arg, f"{{unacceptable_type,{field_type(value)}}}")
        return value

    overflow = text("x-overflow") or "drop-head"
    if overflow not in OVERFLOW_MODES:
        raise invalid("x-overflow", "invalid_overflow")
    routing_key = text("x-dead-letter-routing-key")
    exchange = text("x-dead-letter-exchange")
    if routing_key is not None and exchange is None:
        raise invalid("x-dead-letter-routing-key", "routing_key_but_no_dlx_defined")
    single_active = arguments.get("x-single-active-consumer", False)
    if not isinstance(single_active, bool):
        raise invalid("x-single-active-consumer", f"{{unacceptable_type,{field_type(single_active)}}}")
    delivery_limit = integer("x-delivery-limit", 0)
    type_name = queue_type_name(arguments)
    for refused in REFUSED_QUEUE_ARGUMENTS.get(type_name, ()):
        if arguments.get(refused) is not None:
            raise errors.PreconditionFailed(f"invalid arg '{refused}' for queue '{queue}' in vhost '{vhost}'")
    if type_name == "quorum":
        # RabbitMQ 3.10 logs a warning and uses its default for reject-publish-dlx.
        overflow = "drop-head" if overflow == "reject-publish-dlx" else overflow
        if delivery_limit is None:
            delivery_limit = UNLIMITED_DELIVERIES
    return QueueSettings(
        message_ttl=integer("x-message-ttl", 0),
        expires=integer("x-expires", 1),
        max_length=integer("x-max-length", 0),
        max_length_bytes=integer("x-max-length-bytes", 0),
        overflow=overflow,
        dead_letter_exchange=exchange,
        dead_letter_routing_key=routing_key,
        delivery_limit=delivery_limit,
        single_active_consumer=single_active,
        consumer_timeout=integer("x-consumer-timeout", 0),
    )


def parse_consumer_priority(queue: str, vhost: str, arguments: dict[str, Any]) -> int:
    """basic.consume arguments RabbitMQ checks: `x-priority` (int) and
    `x-cancel-on-ha-failover` (bool, accepted and otherwise ignored)."""

    def invalid(arg: str, reason: str) -> errors.PreconditionFailed:
        return errors.PreconditionFailed(f"invalid arg '{arg}' for queue '{queue}' in vhost '{vhost}': {reason}")

    priority = arguments.get("x-priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise invalid("x-priority", f'"expected integer, got {field_type(priority)}"')
    failover = arguments.get("x-cancel-on-ha-failover", False)
    if not isinstance(failover, bool):
        raise invalid("x-cancel-on-ha-failover", f"{{unacceptable_type,{field_type(failover)}}}")
    return priority


def check_durable_declaration(name: str, vhost: str, *, durable: bool, exclusive: bool, auto_delete: bool) -> None:
    """406 for a queue of a durable-only type (stream, quorum) declared as something else,
    with RabbitMQ's texts and in its order."""
    refused_properties = ((auto_delete, "auto-delete"), (exclusive, "exclusive-owner"), (not durable, "non-durable"))
    for refused, property_name in refused_properties:
        if refused:
            raise errors.PreconditionFailed(f"invalid property '{property_name}' for queue '{name}' in vhost '{vhost}'")
