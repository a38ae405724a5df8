"""Stream info: a tool asks for a stream's offsets over plain AMQP, without consuming.

The request goes to the default exchange with routing key `amq.lavin.stream-info`, the
stream queue's name (UTF-8) as body and `reply_to` set (a queue, or direct reply-to). The
answer goes through the default exchange to `reply_to`, `correlation_id` copied, with an
empty body and the offsets in its headers (docs/streams.md has the contract). The channel
looks at the address only once a message turned out unroutable, so publishes pay nothing.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from lavin.api import Message
from lavin.broker.queues.stream_consumer import long_field
from lavin.broker.queues.stream_queue import StreamQueue
from lavin.storage.segments.record import now_ms

if TYPE_CHECKING:
    from lavin.broker.queues.queue import Queue

STREAM_INFO_ADDRESS = "amq.lavin.stream-info"
ERROR_HEADER = "x-error"

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_HEADERS = 0x2000
_CORRELATION_ID = 0x0400


def stream_info_reply(queues: Mapping[str, Queue], vhost: str, request: Message) -> Message | None:
    """The answer to a stream-info request about one of `queues` (a vhost's, named
    `vhost`); None when `request` is not one or has no `reply_to` (it stays unroutable then)."""

    def describe(name: str) -> Mapping[str, int] | str:
        queue = queues.get(name)
        if isinstance(queue, StreamQueue):
            return queue.stream_info()
        return "is not a stream" if queue is not None else "does not exist"

    return stream_info_answer(vhost, request, describe)


def stream_info_answer(
    vhost: str, request: Message, describe: Callable[[str], Mapping[str, int] | str]
) -> Message | None:
    """The answer to a stream-info request, `describe` giving a queue's offsets (the
    headers) or why there are none; None when `request` is not one or has no `reply_to`."""
    if request.routing_key != STREAM_INFO_ADDRESS:
        return None
    try:
        props = request.props
    except ValueError:
        return None
    reply_to = props.get("reply_to")
    if not reply_to:
        return None
    name = request.body.decode("utf-8", errors="replace")
    info = describe(name)
    if isinstance(info, str):
        table = _string_field(ERROR_HEADER, f"queue '{name}' in vhost '{vhost}' {info}")
    else:
        table = b"".join(long_field(key, value) for key, value in info.items())
    flags = _HEADERS
    properties = _U32.pack(len(table)) + table
    correlation_id = props.get("correlation_id")
    if correlation_id is not None:
        flags |= _CORRELATION_ID
        encoded = correlation_id.encode("utf-8", "surrogateescape")
        properties += bytes((len(encoded),)) + encoded
    return Message("", reply_to, _U16.pack(flags) + properties, b"", now_ms())


def _string_field(name: str, value: str) -> bytes:
    key, data = name.encode(), value.encode()
    return bytes((len(key),)) + key + b"S" + _U32.pack(len(data)) + data
