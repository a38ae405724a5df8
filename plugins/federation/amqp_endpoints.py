"""The `amqp` and `amqps` shovel endpoints, with RabbitMQ's dynamic shovel keys (protocol
`amqp091`).

A source consumes `src-queue` (declared durable if missing, as RabbitMQ does, unless
`src-predeclared`), or a server-named exclusive queue bound to `src-exchange` with
`src-exchange-key`. A destination publishes to `dest-queue` through the default exchange
(declared the same way), or to `dest-exchange` with `dest-exchange-key` or the message's
own routing key. A URI with no host is the broker the link runs in.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from lavin.api import (
    AckMode,
    EncodedProperties,
    EndpointFailure,
    EndpointSettings,
    InvalidEndpoint,
    Settle,
    ShovelDestination,
    ShovelMessage,
    ShovelSource,
    encode_properties,
)
from lavin.api.message import PROPERTY_FIELDS
from lavin.plugins.federation.amqp_client import AmqpClosed, AmqpConnection, Delivery, connect
from lavin.plugins.federation.amqp_uri import AmqpUri, parse_uri

NOT_FOUND = 404
DEFAULT_PREFETCH = 1000
PROPERTY_NAMES = frozenset(name for _bit, name, _kind in PROPERTY_FIELDS)
MAX_PREFETCH = 65535  # basic.qos carries it in 16 bits
PROTOCOL = "amqp091"
# The definition's keys that RabbitMQ copies into the x-shovelled header.
FORWARDED_KEYS = ("src-queue", "src-exchange", "src-exchange-key", "dest-queue", "dest-exchange", "dest-exchange-key")


# -- the definition's keys ----------------------------------------------------------------


@dataclass(frozen=True)
class SourceKeys:
    queue: str | None
    exchange: str | None
    exchange_key: str
    prefetch_count: int
    delete_after: int | str  # "never", "queue-length" or a count
    predeclared: bool
    queue_arguments: Mapping[str, Any]
    # Exchange federation: the upstream exchange `bind` binds `src-queue` to.
    binding_exchange: str | None

    @classmethod
    def read(cls, definition: Mapping[str, Any]) -> SourceKeys:
        queue, exchange = _text(definition, "src-queue"), _text(definition, "src-exchange")
        if queue is not None and exchange is not None:
            raise InvalidEndpoint("Cannot specify both 'src-queue' and 'src-exchange'")
        if queue is None and exchange is None:
            raise InvalidEndpoint("Must specify 'src-queue' or 'src-exchange'")
        prefetch = _first(definition, "src-prefetch-count", "prefetch-count", DEFAULT_PREFETCH)
        if not _is_count(prefetch) or prefetch > MAX_PREFETCH:
            raise InvalidEndpoint(
                f"src-prefetch-count should be a number between 0 and {MAX_PREFETCH} (0: no limit), not {prefetch!r}"
            )
        delete_after = _first(definition, "src-delete-after", "delete-after", "never")
        if delete_after not in ("never", "queue-length") and not _is_count(delete_after):
            raise InvalidEndpoint(
                "src-delete-after should be a number greater than or equal to 0 or one of: never, queue-length; "
                f"not {delete_after!r}"
            )
        return cls(
            queue=queue,
            exchange=exchange,
            exchange_key=_text(definition, "src-exchange-key") or "#",
            prefetch_count=prefetch,
            delete_after=delete_after,
            predeclared=_flag(definition, "src-predeclared"),
            queue_arguments=_table(definition, "src-queue-args"),
            binding_exchange=_text(definition, "src-binding-exchange"),
        )


@dataclass(frozen=True)
class DestinationKeys:
    queue: str | None
    exchange: str | None
    exchange_key: str | None  # None: the message's own routing key
    add_forward_headers: bool
    add_timestamp_header: bool
    publish_properties: Mapping[str, Any]
    predeclared: bool
    queue_arguments: Mapping[str, Any]

    @classmethod
    def read(cls, definition: Mapping[str, Any]) -> DestinationKeys:
        queue, exchange = _text(definition, "dest-queue"), _text(definition, "dest-exchange")
        if queue is not None and exchange is not None:
            raise InvalidEndpoint("Cannot specify both 'dest-queue' and 'dest-exchange'")
        exchange_key = _text(definition, "dest-exchange-key")
        properties = _table(definition, "dest-publish-properties")
        try:
            encode_properties(dict(properties))
        except (ValueError, TypeError, AttributeError) as error:
            raise InvalidEndpoint(f"dest-publish-properties cannot be encoded: {error}") from None
        unknown = sorted(set(properties) - PROPERTY_NAMES)
        if unknown:
            raise InvalidEndpoint(f"dest-publish-properties has unknown properties: {', '.join(unknown)}")
        return cls(
            queue=queue,
            exchange=exchange,
            exchange_key=exchange_key,
            add_forward_headers=_flag(definition, "dest-add-forward-headers")
            or _flag(definition, "add-forward-headers"),
            add_timestamp_header=_flag(definition, "dest-add-timestamp-header"),
            publish_properties=properties,
            predeclared=_flag(definition, "dest-predeclared"),
            queue_arguments=_table(definition, "dest-queue-args"),
        )


def _text(definition: Mapping[str, Any], key: str) -> str | None:
    value = definition.get(key)
    if value is not None and not isinstance(value, str):
        raise InvalidEndpoint(f"{key} should be a string, not {value!r}")
    return value


def _table(definition: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = definition.get(key, {})
    if not isinstance(value, Mapping) or not all(isinstance(name, str) for name in value):
        raise InvalidEndpoint(f"{key} should be an object, not {value!r}")
    return value


def _flag(definition: Mapping[str, Any], key: str) -> bool:
    value = definition.get(key, False)
    if not isinstance(value, bool):
        raise InvalidEndpoint(f"{key} should be a boolean, not {value!r}")
    return value


def _first(definition: Mapping[str, Any], key: str, legacy_key: str, default: Any) -> Any:
    """`key`, else the key older RabbitMQ versions wrote, else the default."""
    return definition.get(key, definition.get(legacy_key, default))


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _uri(scheme: str, uri: str, vhost: str = "/") -> AmqpUri:
    parsed = parse_uri(uri, vhost)
    if parsed.scheme != scheme:
        raise InvalidEndpoint(f"the {scheme} endpoint cannot serve {parsed.scheme}:// URIs")
    return parsed


def _redacted(uri: object, vhost: str) -> str:
    """A URI (or the first of a list) without its password, for status and headers."""
    first = uri[0] if isinstance(uri, list) and uri else uri
    try:
        return parse_uri(first, vhost).redacted()
    except InvalidEndpoint:
        return ""


async def _ensure_queue(
    connection: AmqpConnection, queue: str, arguments: Mapping[str, Any], *, predeclared: bool
) -> int:
    """The queue's message count; a missing queue is declared durable unless predeclared, as
    RabbitMQ's shovel does."""
    try:
        return (await connection.queue_declare(queue, passive=True)).message_count or 0
    except AmqpClosed as closed:
        if closed.reply_code != NOT_FOUND or predeclared:
            raise
    await connection.open_channel()
    return (await connection.queue_declare(queue, durable=True, arguments=dict(arguments))).message_count or 0


# -- the source ---------------------------------------------------------------------------


class AmqpSource(ShovelSource):
    name: ClassVar[str] = "amqp"

    def __init__(self, settings: EndpointSettings) -> None:
        super().__init__(settings)
        self.keys = SourceKeys.read(settings.definition)
        self._connection: AmqpConnection | None = None
        self._queue = ""
        self._remaining: int | None = None  # messages left before src-delete-after ends the source
        self._unsettled = 0
        self._all_settled = asyncio.Event()
        self._all_settled.set()
        self._paused = False
        self._resumed = asyncio.Event()
        self._consuming = False

    @classmethod
    def validate(cls, uri: str, definition: Mapping[str, Any]) -> None:
        _uri(cls.name, uri)
        SourceKeys.read(definition)

    async def open(self) -> None:
        settings, keys = self.settings, self.keys
        connection = self._connection = await connect(_uri(self.name, settings.uri, settings.vhost), settings.local)
        await connection.qos(keys.prefetch_count)
        if keys.binding_exchange is not None:
            await connection.exchange_exists(keys.binding_exchange)
        if keys.queue is not None:
            self._queue = keys.queue
            count = await _ensure_queue(connection, keys.queue, keys.queue_arguments, predeclared=keys.predeclared)
        else:
            assert keys.exchange is not None  # SourceKeys.read checked one of them is given
            declared = await connection.queue_declare("", exclusive=True)
            self._queue, count = declared.queue or "", 0
            await connection.queue_bind(self._queue, keys.exchange, keys.exchange_key)
        if keys.delete_after == "queue-length":
            self._remaining = count
        elif isinstance(keys.delete_after, int):
            self._remaining = keys.delete_after

    async def messages(self) -> AsyncIterator[tuple[ShovelMessage, Settle]]:
        connection = self._connection
        if connection is None:
            raise EndpointFailure("the source is not open")
        if self._remaining != 0:
            await self._consume(connection)
        while self._remaining is None or self._remaining > 0:
            delivery = await connection.deliveries.next()
            if self._remaining is not None:
                self._remaining -= 1
            yield _message(delivery), self._settler(connection, delivery.delivery_tag)
        await connection.watch(self._all_settled.wait())  # src-delete-after reached: end once all are settled

    def _settler(self, connection: AmqpConnection, delivery_tag: int) -> Settle:
        if self.settings.ack_mode is AckMode.NO_ACK:
            return _settled_already
        self._unsettled += 1
        self._all_settled.clear()
        settled = False

        def settle(ok: bool) -> None:
            nonlocal settled
            if settled:
                return
            settled = True
            if ok:
                connection.ack(delivery_tag)
            else:
                connection.nack(delivery_tag, requeue=True)
            self._unsettled -= 1
            if self._unsettled == 0:
                self._all_settled.set()

        return settle

    async def bind(self, routing_key: str, arguments: Mapping[str, Any]) -> None:
        await self._binding_call(routing_key, arguments, unbind=False)

    async def unbind(self, routing_key: str, arguments: Mapping[str, Any]) -> None:
        await self._binding_call(routing_key, arguments, unbind=True)

    async def _binding_call(self, routing_key: str, arguments: Mapping[str, Any], *, unbind: bool) -> None:
        exchange, connection = self.keys.binding_exchange, self._connection
        if exchange is None or connection is None:
            raise EndpointFailure("this source follows no exchange's bindings (no src-binding-exchange)")
        await connection.queue_bind(self._queue, exchange, routing_key, dict(arguments), unbind=unbind)

    async def _consume(self, connection: AmqpConnection) -> None:
        """Start the consumer once `messages` is asked for, and not while paused: queue
        federation pauses a source before it takes anything."""
        while self._paused:
            await connection.watch(self._resumed.wait())
        no_ack = self.settings.ack_mode is AckMode.NO_ACK
        await connection.consume(self._queue, prefetch_count=self.keys.prefetch_count, no_ack=no_ack)
        self._consuming = True

    async def pause(self) -> None:
        self._paused = True
        self._resumed.clear()
        if self._connection is not None and self._consuming:
            self._consuming = False
            await self._connection.cancel()

    async def resume(self) -> None:
        self._paused = False
        self._resumed.set()
        if self._connection is not None and self._connection.consuming_started and not self._consuming:
            self._consuming = True
            await self._connection.consume_again(self._queue, no_ack=self.settings.ack_mode is AckMode.NO_ACK)

    async def close(self) -> None:
        if self._connection is not None:
            await self._connection.close()

    def details(self) -> Mapping[str, Any]:
        keys = self.keys
        shown: dict[str, Any] = {"src_uri": _redacted(self.settings.uri, self.settings.vhost), "src_protocol": PROTOCOL}
        if keys.queue is not None:
            shown["src_queue"] = keys.queue
        else:
            shown["src_exchange"] = keys.exchange
            shown["src_exchange_key"] = keys.exchange_key
        return shown


class AmqpsSource(AmqpSource):
    name: ClassVar[str] = "amqps"


def _settled_already(ok: bool) -> None:
    """In no-ack mode the broker forgot the message when it sent it."""


def _message(delivery: Delivery) -> ShovelMessage:
    return ShovelMessage(
        body=delivery.body,
        routing_key=delivery.routing_key,
        exchange=delivery.exchange,
        properties=delivery.properties,
        redelivered=delivery.redelivered,
        encoded=EncodedProperties(delivery.properties, delivery.raw_properties),
    )


# -- the destination ------------------------------------------------------------------------


class AmqpDestination(ShovelDestination):
    name: ClassVar[str] = "amqp"

    def __init__(self, settings: EndpointSettings) -> None:
        super().__init__(settings)
        self.keys = DestinationKeys.read(settings.definition)
        self._connection: AmqpConnection | None = None
        self._forward_table = self._forward_headers() if self.keys.add_forward_headers else None

    @classmethod
    def validate(cls, uri: str, definition: Mapping[str, Any]) -> None:
        _uri(cls.name, uri)
        DestinationKeys.read(definition)

    async def open(self) -> None:
        settings, keys = self.settings, self.keys
        connection = self._connection = await connect(_uri(self.name, settings.uri, settings.vhost), settings.local)
        if settings.ack_mode is AckMode.ON_CONFIRM:
            await connection.confirm_select()
        if keys.queue is not None:
            await _ensure_queue(connection, keys.queue, keys.queue_arguments, predeclared=keys.predeclared)
        elif keys.exchange:  # the default exchange always exists
            await connection.exchange_exists(keys.exchange)

    async def send(self, message: ShovelMessage) -> asyncio.Future[None]:
        connection = self._connection
        if connection is None:
            raise EndpointFailure("the destination is not open")
        keys = self.keys
        if keys.queue is not None:
            exchange, routing_key = "", keys.queue
        elif keys.exchange is not None:
            exchange = keys.exchange
            routing_key = message.routing_key if keys.exchange_key is None else keys.exchange_key
        else:  # neither: where the message was published at the source
            exchange, routing_key = message.exchange, message.routing_key
        try:
            return await connection.publish(exchange, routing_key, message.body, self._properties(message))
        except (ValueError, TypeError) as error:  # properties from a source that did not decode them from AMQP
            raise EndpointFailure(f"the message's properties cannot be encoded: {error}") from None

    def _properties(self, message: ShovelMessage) -> bytes:
        """The message's properties encoded, as they came when this destination adds nothing."""
        keys = self.keys
        adds_nothing = not keys.publish_properties and self._forward_table is None and not keys.add_timestamp_header
        raw = message.raw_properties() if adds_nothing else None
        return raw if raw is not None else encode_properties(self._changed_properties(message))

    def _changed_properties(self, message: ShovelMessage) -> dict[str, Any]:
        keys = self.keys
        properties = {**message.properties, **keys.publish_properties}
        if self._forward_table is None and not keys.add_timestamp_header:
            return properties
        headers = dict(properties.get("headers") or {})
        if self._forward_table is not None:
            earlier = headers.get("x-shovelled")
            headers["x-shovelled"] = [self._forward_table, *(earlier if isinstance(earlier, list) else [])]
        if keys.add_timestamp_header:
            headers["x-shovelled-timestamp"] = int(time.time())
        properties["headers"] = headers
        return properties

    def _forward_headers(self) -> dict[str, Any]:
        """RabbitMQ's `x-shovelled` entry: which shovel moved the message, from where to where."""
        settings, definition = self.settings, self.settings.definition
        table: dict[str, Any] = {
            "shovel-type": "dynamic",
            "shovel-name": settings.link_name,
            "shovel-vhost": settings.vhost,
            "src-uri": _redacted(definition.get("src-uri"), settings.vhost),
            "dest-uri": _redacted(settings.uri, settings.vhost),
        }
        for key in FORWARDED_KEYS:
            if isinstance(definition.get(key), str):
                table[key] = definition[key]
        return table

    async def close(self) -> None:
        if self._connection is not None:
            await self._connection.close()

    def details(self) -> Mapping[str, Any]:
        keys = self.keys
        shown: dict[str, Any] = {
            "dest_uri": _redacted(self.settings.uri, self.settings.vhost),
            "dest_protocol": PROTOCOL,
        }
        if keys.queue is not None:
            shown["dest_queue"] = keys.queue
        if keys.exchange is not None:
            shown["dest_exchange"] = keys.exchange
        if keys.exchange_key is not None:
            shown["dest_exchange_key"] = keys.exchange_key
        return shown


class AmqpsDestination(AmqpDestination):
    name: ClassVar[str] = "amqps"
