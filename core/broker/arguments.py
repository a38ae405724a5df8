"""Declare-time argument rules: which queue type, and when a redeclare is equivalent.

As RabbitMQ does, only the arguments the broker understands take part in the
equivalence check; unknown `x-` arguments are stored but never compared.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lavin import errors

if TYPE_CHECKING:
    from lavin.broker.exchange import Exchange
    from lavin.broker.queue import Queue

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
)
COMPARED_EXCHANGE_ARGUMENTS = ("alternate-exchange",)


def queue_type_name(arguments: dict[str, Any]) -> str:
    """`x-queue-type`, else `priority` when `x-max-priority` is set, else `classic`."""
    explicit = arguments.get("x-queue-type")
    if explicit is not None:
        return explicit.decode() if isinstance(explicit, bytes) else str(explicit)
    if arguments.get("x-max-priority") is not None:
        return "priority"
    return "classic"


def _describe(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "none" if value is None else str(value)


def _inequivalent(arg: str, kind: str, name: str, vhost: str, received: object, current: object) -> errors.PreconditionFailed:
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
    exchange: Exchange, vhost: str, type_name: str, durable: bool, auto_delete: bool, internal: bool,
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
    if isinstance(value, bool):
        kind = "bool"
    elif isinstance(value, int):
        kind = "signedint" if -(2**31) <= value < 2**31 else "long"
    elif isinstance(value, float):
        kind = "double"
    elif isinstance(value, dict):
        kind = "table"
    elif isinstance(value, list):
        kind = "array"
    else:
        kind = "longstr"
    return f"the value '{_describe(value)}' of type '{kind}'"


def _check_arguments(
    names: tuple[str, ...], kind: str, name: str, vhost: str, received: dict[str, Any], current: dict[str, Any]
) -> None:
    for arg in names:
        if received.get(arg) != current.get(arg):
            raise errors.PreconditionFailed(
                f"inequivalent arg '{arg}' for {kind} '{name}' in vhost '{vhost}': "
                f"received {_typed(received.get(arg))} but current is {_typed(current.get(arg))}"
            )
