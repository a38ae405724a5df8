"""Declare-time argument rules: which queue type, which arguments are valid, and when a
redeclare is equivalent. The arguments themselves are rows of
`lavin.broker.policy.queue_arguments` (and `EXCHANGE_ARGUMENTS` below).

As RabbitMQ does, only the arguments the broker understands take part in the
equivalence check; unknown `x-` arguments are stored but never compared.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from lavin.api import errors
from lavin.api.arguments import InvalidArgument, field_type
from lavin.broker.policy.argument_rows import Argument, Precedence, Text
from lavin.broker.policy.queue_arguments import QUEUE_ARGUMENTS

if TYPE_CHECKING:
    from lavin.broker.policy.declared import DeclaredExchange, DeclaredQueue

# The exchange arguments the broker knows, as rows like the queues' (`queue_arguments`).
EXCHANGE_ARGUMENTS: Final = (
    Argument(
        "alternate-exchange",
        Text(),
        compared=True,
        policy_key="alternate-exchange",
        policy_reason="is not a valid alternate exchange name",
        precedence=Precedence.ARGUMENT,
    ),
)
COMPARED_QUEUE_ARGUMENTS: Final = tuple(row.name for row in QUEUE_ARGUMENTS if row.compared)
COMPARED_EXCHANGE_ARGUMENTS: Final = tuple(row.name for row in EXCHANGE_ARGUMENTS if row.compared)


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
    queue: DeclaredQueue, vhost: str, durable: bool, exclusive: bool, auto_delete: bool, arguments: dict[str, Any]
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
    exchange: DeclaredExchange,
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


# A quorum queue counts every message's deliveries (for `x-delivery-count`) also without
# `x-delivery-limit`: an unreachable limit does that (counts are 32-bit).
UNLIMITED_DELIVERIES = 2**32
# Checked first at declare, in this order, then the other rows in table order: the order
# these checks have always run in, so that a declare with several invalid arguments is
# refused naming the same one. A new row needs no entry here.
CHECKED_FIRST: Final = (
    "x-overflow",
    "x-dead-letter-routing-key",
    "x-dead-letter-exchange",
    "x-single-active-consumer",
    "x-delivery-limit",
    "x-max-priority",
    "x-queue-mode",
)


def _declare_check_order() -> tuple[Argument, ...]:
    by_name = {row.name: row for row in QUEUE_ARGUMENTS}
    first = tuple(by_name[name] for name in CHECKED_FIRST)
    return first + tuple(row for row in QUEUE_ARGUMENTS if row not in first)


DECLARE_CHECK_ORDER: Final = _declare_check_order()


@dataclass(frozen=True)
class QueueSettings:
    """The queue arguments the core acts on, validated once at declare time; each field is
    the `setting` of one row of `queue_arguments`."""

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
    """Check the arguments the core acts on and those the queue's type refuses, with
    RabbitMQ's texts (406)."""
    resource = f"queue '{queue}' in vhost '{vhost}'"
    type_name = queue_type_name(arguments)
    values: dict[str, Any] = {}
    for row in DECLARE_CHECK_ORDER:
        if type_name in row.refused_by:
            if arguments.get(row.name) is not None:  # no reason given, as in RabbitMQ 3.10
                raise errors.PreconditionFailed(f"invalid arg '{row.name}' for {resource}")
        elif row.setting is not None:
            try:
                value = values[row.setting] = row.kind.parse(arguments, row.name)
                if row.requires is not None and value is not None and arguments.get(row.requires.argument) is None:
                    raise InvalidArgument(row.name, row.requires.reason)
            except InvalidArgument as exc:
                raise errors.PreconditionFailed(f"invalid arg '{exc.argument}' for {resource}: {exc.reason}") from None
    if type_name == "quorum":
        # RabbitMQ 3.10 logs a warning and uses its default for reject-publish-dlx.
        if values["overflow"] == "reject-publish-dlx":
            values["overflow"] = "drop-head"
        if values["delivery_limit"] is None:
            values["delivery_limit"] = UNLIMITED_DELIVERIES
    return QueueSettings(**values)


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
