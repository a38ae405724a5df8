"""The public surface for plugins: import this package, never other `lavin` modules.

Exchange types own a routing table (`ExchangeType`, or `BindingTable` to build on); queue
types own storage and ordering (`QueueType`, `StreamType`), with the core's engines handed
to them as a `StorageToolkit`; auth backends say who a user is (`AuthBackend`); shovel
endpoints move messages between brokers (`ShovelSource`, `ShovelDestination`); lifecycle
plugins implement the hooks in `lavin.api.hooks`, marked with `hookimpl`. Everything else
lives in the core, which imports this package and is never imported by it.
"""

from __future__ import annotations

import pluggy
from lavin.api.arguments import Arguments, InvalidArgument, field_type, parse_duration
from lavin.api.auth import (
    TAGS,
    Access,
    AuthBackend,
    AuthContext,
    Authorizer,
    PatternAuthorizer,
    StoredUser,
    TopicPermissions,
    User,
    VHostPermissions,
    pattern_allows,
)
from lavin.api.errors import (
    AccessRefused,
    AMQPError,
    NotAllowed,
    NotFound,
    PreconditionFailed,
    ResourceLocked,
)
from lavin.api.exchange import (
    Binding,
    BindingId,
    BindingTable,
    Destination,
    DestinationSet,
    ExchangeType,
    ExchangeTypes,
    binding_id,
    destination_identity,
    frozen,
)
from lavin.api.hooks import BrokerInfo, ConnectionInfo, VHostInfo
from lavin.api.message import Body, Message, encode_properties, message_priority
from lavin.api.printable import printable
from lavin.api.queue import (
    MessageStore,
    QueueType,
    Retention,
    StorageToolkit,
    StreamCursor,
    StreamType,
)
from lavin.api.shovel import (
    AckMode,
    EncodedProperties,
    EndpointFailure,
    EndpointSettings,
    InvalidEndpoint,
    LocalBroker,
    Settle,
    ShovelDestination,
    ShovelEndpoint,
    ShovelMessage,
    ShovelSource,
)

hookimpl = pluggy.HookimplMarker("lavin")

__all__ = [
    "TAGS",
    "AMQPError",
    "Access",
    "AccessRefused",
    "AckMode",
    "Arguments",
    "AuthBackend",
    "AuthContext",
    "Authorizer",
    "Binding",
    "BindingId",
    "BindingTable",
    "Body",
    "BrokerInfo",
    "ConnectionInfo",
    "Destination",
    "DestinationSet",
    "EncodedProperties",
    "EndpointFailure",
    "EndpointSettings",
    "ExchangeType",
    "ExchangeTypes",
    "InvalidArgument",
    "InvalidEndpoint",
    "LocalBroker",
    "Message",
    "MessageStore",
    "NotAllowed",
    "NotFound",
    "PatternAuthorizer",
    "PreconditionFailed",
    "QueueType",
    "ResourceLocked",
    "Retention",
    "Settle",
    "ShovelDestination",
    "ShovelEndpoint",
    "ShovelMessage",
    "ShovelSource",
    "StorageToolkit",
    "StoredUser",
    "StreamCursor",
    "StreamType",
    "TopicPermissions",
    "User",
    "VHostInfo",
    "VHostPermissions",
    "binding_id",
    "destination_identity",
    "encode_properties",
    "field_type",
    "frozen",
    "hookimpl",
    "message_priority",
    "parse_duration",
    "pattern_allows",
    "printable",
]
