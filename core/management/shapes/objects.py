"""RabbitMQ's JSON for exchanges, queues, bindings and messages, and the request bodies
that declare, bind, publish and get them.

A binding is named in paths by its `properties_key`, as in RabbitMQ: "~" for an empty
routing key without arguments, the percent-encoded routing key when it has no arguments,
else that key, "~" and a hash of the arguments. The hash is Lavin's own (RabbitMQ hashes
the Erlang term), so a key is good for the broker that gave it out.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from lavin.api.exchange import Binding
from lavin.api.field_table import encode_table
from lavin.api.message import PROPERTY_FIELDS, Body, Message, encode_properties
from lavin.broker.policy.arguments import queue_type_name
from lavin.broker.policy.policies import exchange_policy_fields, policy_fields
from lavin.broker.queues.queue import Queue
from lavin.broker.routing.exchange import Exchange
from lavin.broker.runtime.stats import queue_lengths
from lavin.broker.vhost import VHost
from lavin.management.shapes.access import BadRequest, required
from lavin.management.shapes.held_messages import held_messages
from lavin.management.shapes.message_stats import object_message_stats, with_rates
from lavin.storage.metadata.storable import UnstorableValue, check_value

# The default exchange's name in paths (its real name is "").
DEFAULT_EXCHANGE_PATH_NAME: Final = "amq.default"
ACK_MODES: Final = ("ack_requeue_true", "ack_requeue_false", "reject_requeue_true", "reject_requeue_false")
# Queue types that RabbitMQ reports as another: a priority queue is a classic queue there.
REPORTED_QUEUE_TYPES: Final = {"priority": "classic"}
MAX_SHORT_STRING: Final = 255


def exchange_name_from_path(name: str) -> str:
    return "" if name == DEFAULT_EXCHANGE_PATH_NAME else name


# ---- objects --------------------------------------------------------------------------------


def exchange_json(vhost: VHost, exchange: Exchange) -> dict[str, Any]:
    return {
        "name": exchange.name,
        "vhost": vhost.name,
        "type": exchange.type_name,
        "durable": exchange.durable,
        "auto_delete": exchange.auto_delete,
        "internal": exchange.internal,
        "arguments": dict(exchange.arguments),
        "user_who_performed_action": "",
        "message_stats": object_message_stats(vhost.broker.stats, exchange),
        **exchange_policy_fields(vhost.policies, exchange),
    }


def queue_json(vhost: VHost, queue: Queue, node: str, unacked_ids: list[int]) -> dict[str, Any]:
    """A queue's settings and counts; `unacked_ids` are its entry of `unacked_deliveries`."""
    consumers = queue.consumers
    unacked = queue.unacked
    ready = queue.message_count
    exclusive_tag = next((consumer.tag for consumer in consumers if consumer.exclusive), None)
    single_active = queue.settings.single_active_consumer
    stats = vhost.broker.stats
    lengths = queue_lengths(ready, unacked)
    return {
        "name": queue.name,
        "vhost": vhost.name,
        "durable": queue.durable,
        "auto_delete": queue.auto_delete,
        "exclusive": queue.exclusive_owner is not None,
        "arguments": dict(queue.arguments),
        "type": queue_type(queue),
        "node": node,
        "state": "running",
        "consumers": len(consumers),
        "consumer_capacity": 1.0 if consumers else 0.0,
        "consumer_utilisation": 1.0 if consumers else None,
        "exclusive_consumer_tag": exclusive_tag,
        "single_active_consumer_tag": consumers[0].tag if single_active and consumers else None,
        **with_rates(lengths, stats.rates(queue, lengths)),
        **held_messages(queue, unacked_ids).api_fields(),
        "memory": 0,
        "message_stats": object_message_stats(stats, queue),
        **policy_fields(vhost.policies, queue),
    }


def queue_type(queue: Queue) -> str:
    name = queue_type_name(queue.arguments)
    return REPORTED_QUEUE_TYPES.get(name, name)


def consumer_details(queue: Queue) -> list[dict[str, Any]]:
    """The queue's consumers as RabbitMQ lists them on a queue's page; the channel a
    consumer belongs to is the channel endpoints' business."""
    single_active = queue.settings.single_active_consumer
    return [
        {
            "consumer_tag": consumer.tag,
            "exclusive": consumer.exclusive,
            "ack_required": not consumer.no_ack,
            "prefetch_count": consumer.prefetch,
            "arguments": dict(consumer.arguments),
            "active": not single_active or index == 0,
            "activity_status": "up" if not single_active else ("single_active" if index == 0 else "waiting"),
            "queue": {"name": queue.name, "vhost": queue.vhost.name},
            "channel_details": {},
        }
        for index, consumer in enumerate(queue.consumers)
    ]


def binding_json(vhost: str, source: str, binding: Binding) -> dict[str, Any]:
    return {
        "source": source,
        "vhost": vhost,
        "destination": binding.destination.name,
        "destination_type": binding.destination.kind,
        "routing_key": binding.routing_key,
        "arguments": dict(binding.arguments),
        "properties_key": properties_key(binding.routing_key, binding.arguments),
    }


def default_binding_json(queue: Queue) -> dict[str, Any]:
    """The binding every queue has to the default exchange, by its name."""
    return binding_json(queue.vhost.name, "", Binding(queue, queue.name, {}))


def properties_key(routing_key: str, arguments: Mapping[str, Any]) -> str:
    if not arguments:
        return _quote(routing_key) if routing_key else "~"
    return f"{_quote(routing_key)}~{_quote(arguments_hash(arguments))}"


def _quote(text: str) -> str:
    return urllib.parse.quote_plus(text, safe="").replace("~", "%7E")


def arguments_hash(arguments: Mapping[str, Any]) -> str:
    """Four bytes of a digest of the arguments, in base64url without padding (as long as
    RabbitMQ's)."""
    canonical = json.dumps(arguments, sort_keys=True, default=repr).encode()
    return base64.urlsafe_b64encode(hashlib.sha256(canonical).digest()[:4]).rstrip(b"=").decode()


def find_binding(bindings: Iterable[Binding], props: str) -> Binding | None:
    """The binding a `properties_key` names among `bindings` (of one source and destination)."""
    tokens = props.split("~")
    if len(tokens) > 2:
        return None
    routing_key = urllib.parse.unquote_plus(tokens[0])
    # "~" alone, or a key and "~" with nothing after it: no arguments (as RabbitMQ reads it)
    wanted_hash = urllib.parse.unquote_plus(tokens[1]) if len(tokens) == 2 and tokens[1] else None
    for binding in bindings:
        if binding.routing_key != routing_key:
            continue
        if binding.arguments:
            if wanted_hash is not None and arguments_hash(binding.arguments) == wanted_hash:
                return binding
        elif wanted_hash is None:
            return binding
    return None


# ---- request bodies -------------------------------------------------------------------------


def flag(body: Mapping[str, Any], key: str) -> bool:
    """A boolean field, absent: false; RabbitMQ takes "true" and "false" too."""
    value = body.get(key, False)
    if isinstance(value, bool):
        return value
    if value not in ("true", "false"):
        raise BadRequest(f"{key} must be a boolean")
    return bool(value == "true")


def arguments(body: Mapping[str, Any]) -> dict[str, Any]:
    """`arguments`: an object that a field table can hold, as over AMQP."""
    value = body.get("arguments")
    if value is None or value == []:  # RabbitMQ's own tools send [] for no arguments
        return {}
    if not isinstance(value, dict):
        raise BadRequest("arguments must be an object")
    try:
        check_value(value, "arguments", field_table=True)  # first: it bounds the nesting encode_table recurses into
        encode_table(value)
    except UnstorableValue as exc:
        raise BadRequest(str(exc)) from None
    except ValueError as exc:
        raise BadRequest(f"arguments: {exc}") from None
    return dict(value)


def text_field(body: Mapping[str, Any], key: str, default: str) -> str:
    value = body.get(key)
    return default if value is None else short_string(value, key)


def short_string(value: Any, key: str) -> str:
    """A name or key that AMQP frames carry as a short string: at most 255 bytes."""
    if not isinstance(value, str):
        raise BadRequest(f"{key} must be a string")
    if len(value.encode("utf-8", "surrogateescape")) > MAX_SHORT_STRING:
        raise BadRequest(f"{key} must be at most {MAX_SHORT_STRING} bytes")
    return value


def integer(value: Any, key: str) -> int:
    """An integer, or a string of one (RabbitMQ parses both)."""
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadRequest(f"{key} must be an integer")
    return value


_INTEGER_PROPERTIES: Final = frozenset({"delivery_mode", "priority", "timestamp"})
_TIMESTAMP_MAX: Final = 2**64 - 1
_PROPERTY_NAMES: Final = frozenset(name for _, name, _ in PROPERTY_FIELDS)


def basic_properties(value: Any) -> bytes:
    """The `properties` of a publish, encoded; each field of its proper type, as RabbitMQ
    checks them. Unknown names are ignored, as RabbitMQ ignores them."""
    if value is None or value == []:
        return encode_properties({})
    if not isinstance(value, dict):
        raise BadRequest("properties must be an object")
    props: dict[str, Any] = {}
    for name, field_value in value.items():
        if name not in _PROPERTY_NAMES or field_value is None:
            continue
        if name == "headers":
            if not isinstance(field_value, dict):
                raise BadRequest("properties.headers must be an object")
        elif name in _INTEGER_PROPERTIES:
            highest = _TIMESTAMP_MAX if name == "timestamp" else 255
            if not isinstance(field_value, int) or isinstance(field_value, bool):
                raise BadRequest(f"properties.{name} must be an integer")
            if not 0 <= field_value <= highest:
                raise BadRequest(f"properties.{name} must be between 0 and {highest}")
        else:
            short_string(field_value, f"properties.{name}")
        props[name] = field_value
    try:
        return encode_properties(props)
    except ValueError as exc:  # a headers value no field table holds
        raise BadRequest(f"properties.headers: {exc}") from None


def payload(text: Any, encoding: Any) -> bytes:
    if not isinstance(text, str):
        raise BadRequest("payload_not_string")
    if encoding == "string":
        return text.encode("utf-8", "surrogateescape")
    if encoding == "base64":
        try:
            return base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise BadRequest("payload is not valid base64") from None
    raise BadRequest(f"unsupported payload_encoding '{encoding}': use string or base64")


@dataclass(frozen=True)
class Display:
    """How messages read through the API are shown: `encoding` auto (text when it is
    UTF-8) or base64, and bodies cut to `truncate` bytes."""

    encoding: str
    truncate: int | None

    @classmethod
    def parse(cls, body: Mapping[str, Any], encoding: Any) -> Display:
        if encoding not in ("auto", "base64"):
            raise BadRequest("Unsupported encoding. Please use auto or base64.")
        truncate = body.get("truncate")
        if truncate is not None:
            truncate = _count(truncate, "truncate")
        return cls(encoding, truncate)


@dataclass(frozen=True)
class GetRequest:
    """`POST /api/queues/VHOST/NAME/get`: how many, what to do with them, how to show them."""

    count: int
    ack_mode: str
    display: Display

    @property
    def requeue(self) -> bool:
        return self.ack_mode in ("ack_requeue_true", "reject_requeue_true")

    @classmethod
    def parse(cls, body: Mapping[str, Any]) -> GetRequest:
        ack_mode, count, encoding = required(body, "ackmode", "count", "encoding")
        if ack_mode not in ACK_MODES:
            raise BadRequest(f"Invalid ackmode value: {ack_mode}. Valid values are: {', '.join(ACK_MODES)}")
        return cls(_count(count, "count"), ack_mode, Display.parse(body, encoding))


@dataclass(frozen=True)
class StreamRead:
    """LavinMQ's `POST /api/queues/VHOST/NAME/stream`: `count` messages from `offset`
    (as `x-stream-offset` takes it; first by default), left in the stream."""

    count: int
    offset: Any
    display: Display

    @classmethod
    def parse(cls, body: Mapping[str, Any]) -> StreamRead:
        (count,) = required(body, "count")
        return cls(
            _count(count, "count"), body.get("offset", "first"), Display.parse(body, body.get("encoding", "auto"))
        )


def _count(value: Any, key: str) -> int:
    number = integer(value, key)
    if number < 0:
        raise BadRequest(f"{key} must not be negative")
    return number


def got_message_json(message: Message, redelivered: bool, message_count: int, display: Display) -> dict[str, Any]:
    body = message.body
    shown = body if display.truncate is None else body[: display.truncate]
    text, encoding = _payload_text(shown, display.encoding)
    return {
        "payload_bytes": len(body),
        "redelivered": redelivered,
        "exchange": message.exchange,
        "routing_key": message.routing_key,
        "message_count": message_count,
        "properties": message.props,
        "payload": text,
        "payload_encoding": encoding,
    }


def _payload_text(body: Body, encoding: str) -> tuple[str, str]:
    if encoding == "auto":
        try:
            return body.decode("utf-8"), "string"
        except UnicodeDecodeError:
            pass
    return base64.b64encode(body).decode(), "base64"
