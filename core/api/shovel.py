"""Shovel endpoints: where a shovel or a federation link takes messages from, and where it
puts them.

A source (entry-point group `lavin.shovel.sources`) yields messages, each with a settle
callback; a destination (group `lavin.shovel.destinations`) accepts a message and reports,
through the future `send` returns, when it is safely handed over. The core runs the loop
between them: it applies the shovel's `ack-mode`, counts what moved, keeps the link's state
and reconnects after `reconnect-delay`. The entry-point name is the URI scheme an endpoint
serves (`amqp`, `http`, ...), and the class's `name` must equal it.

Endpoints run on the broker's event loop: every call that waits does so with `await`,
never by blocking. An endpoint raises `EndpointFailure` when the far side goes away or
refuses it; the core then closes both ends and starts them again after the delay.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar


class InvalidEndpoint(ValueError):
    """The endpoint's part of a definition cannot work (bad URI, a missing or conflicting
    key): the parameter PUT answers 400 with this text and nothing is stored."""


class EndpointFailure(Exception):
    """The endpoint lost its far side or was refused (connection refused, wrong
    credentials, a missing queue, a nack): the link goes to state `error` with this text
    and is started again after `reconnect-delay`."""


class AckMode(Enum):
    """When a source message is settled, as RabbitMQ's `ack-mode` says."""

    ON_CONFIRM = "on-confirm"  # after the destination confirmed it: no loss
    ON_PUBLISH = "on-publish"  # once the destination accepted it for sending
    NO_ACK = "no-ack"  # the source forgets it as soon as it is delivered


@dataclass(frozen=True, slots=True)
class EncodedProperties:
    """Properties as an AMQP content header carried them (the property flags and fields),
    with the mapping they were decoded into."""

    properties: Mapping[str, Any]
    data: bytes


@dataclass(frozen=True, slots=True)
class ShovelMessage:
    """One message on its way: the routing it arrived with and its basic properties by
    their AMQP names (`content_type`, `headers`, `delivery_mode`, `message_id`,
    `timestamp` as seconds since the epoch, ...), absent ones left out.

    A source that received the properties encoded may set `encoded` too, so that a
    destination that speaks AMQP sends them on without encoding them again. It holds only
    while `properties` is the very mapping it was decoded into: a message made with other
    properties (`dataclasses.replace(message, properties=...)`) has none, whatever
    `encoded` says (see `raw_properties`)."""

    body: bytes
    routing_key: str = ""
    exchange: str = ""
    properties: Mapping[str, Any] = field(default_factory=dict)
    redelivered: bool = False
    encoded: EncodedProperties | None = None

    def raw_properties(self) -> bytes | None:
        """The encoded properties if they are still this message's, else None."""
        encoded = self.encoded
        return encoded.data if encoded is not None and encoded.properties is self.properties else None


# Settles a source message: True once it is safely handed over (acked at the source),
# False when it could not be (returned to the source, to come again).
Settle = Callable[[bool], None]


class LocalBroker(ABC):
    """The broker the link runs in, for URIs with no host (`amqp://`, `amqp:///vhost`),
    which mean this broker as in RabbitMQ."""

    @abstractmethod
    async def open_connection(self, vhost: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A stream to this broker's AMQP listener, already trusted: the client sends the
        protocol header and any credentials, and is logged in as the link's owner."""


@dataclass(frozen=True)
class EndpointSettings:
    """What an endpoint is started with.

    `uri` is the one URI this start uses (the core picks one of a list of `dest-uri`s).
    `definition` is the whole shovel or upstream definition as stored, so that an endpoint
    reads its own keys (`src-queue`, `dest-exchange-key`, ...). `link_name` names the link
    in headers and logs (the shovel's name, or `federation: ...`).
    """

    uri: str
    definition: Mapping[str, Any]
    vhost: str
    link_name: str
    ack_mode: AckMode
    local: LocalBroker


class ShovelEndpoint(ABC):
    """What sources and destinations share: validation, opening and closing."""

    # The URI scheme this class serves, equal to its entry-point name (a subclass serves
    # another scheme: `amqps` is `amqp` over TLS).
    name: ClassVar[str]

    def __init__(self, settings: EndpointSettings) -> None:
        self.settings = settings

    @classmethod
    def validate(cls, uri: str, definition: Mapping[str, Any]) -> None:
        """Raise InvalidEndpoint for what is wrong whatever the far side says. Called on
        the parameter PUT before anything is stored; must not do I/O. The default accepts."""

    @abstractmethod
    async def open(self) -> None:
        """Connect and declare what the endpoint needs; raise EndpointFailure if it cannot."""

    @abstractmethod
    async def close(self) -> None:
        """Let go of the far side. Called once after `open`, whether it succeeded or not;
        must not raise."""

    def details(self) -> Mapping[str, Any]:
        """What the status shows of this end (`src_uri`, `dest_queue`, ...), credentials
        left out. The default is nothing."""
        return {}


class ShovelSource(ShovelEndpoint):
    """Yields messages. In `AckMode.NO_ACK` the settle callbacks do nothing."""

    @abstractmethod
    def messages(self) -> AsyncIterator[tuple[ShovelMessage, Settle]]:
        """Messages in source order, each with its settle callback. The iterator ends when
        the source is done (`src-delete-after` reached); it raises EndpointFailure when
        the source goes away. Messages not settled by then come again after a restart."""

    async def bind(self, routing_key: str, arguments: Mapping[str, Any]) -> None:
        """Exchange federation: also take what the upstream exchange (`src-exchange`)
        routes with this key and arguments into the source's queue (`src-queue`). Called
        after `open` for each binding of the downstream exchange, and as they come and go.
        Sources that cannot follow bindings keep this default, which refuses."""
        raise EndpointFailure(f"the {self.name} source cannot follow bindings")

    async def unbind(self, routing_key: str, arguments: Mapping[str, Any]) -> None:
        """Undo `bind`."""
        raise EndpointFailure(f"the {self.name} source cannot follow bindings")

    def pause(self) -> Awaitable[None] | None:
        """Stop taking new messages for now (queue federation with no local consumer to
        take them); the default does nothing."""
        return None

    def resume(self) -> Awaitable[None] | None:
        """Take messages again after `pause`; the default does nothing."""
        return None


class ShovelDestination(ShovelEndpoint):
    """Accepts messages and says when each is safely handed over."""

    @abstractmethod
    async def send(self, message: ShovelMessage) -> asyncio.Future[None]:
        """Hand `message` over. Returns once it is accepted for sending (waiting here is
        how a destination slows the source down); the future completes when the far side
        has taken it (a publisher confirm, a 2xx), or fails with EndpointFailure."""
