"""Ask the broker which offsets a stream queue holds, without consuming from it.

The request is a message to the default exchange with routing key `amq.lavin.stream-info`
and the queue name as body; the reply comes back through direct reply-to, with the
answer in its headers.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping

from lavin.client.wire import Connection, Properties, connect
from pyspark_lavin.offsets import StreamBounds

STREAM_INFO_ROUTING_KEY = "amq.lavin.stream-info"
DIRECT_REPLY_TO = "amq.rabbitmq.reply-to"
FIRST_OFFSET = "x-stream-first-offset"
NEXT_OFFSET = "x-stream-next-offset"
ERROR = "x-error"


class StreamInfoError(RuntimeError):
    """The broker cannot describe that queue (it is missing or not a stream)."""


def fetch_stream_bounds(
    uri: str, queue: str, timeout: float, client_properties: Mapping[str, object] | None = None
) -> StreamBounds:
    with connect(uri, timeout, client_properties=client_properties) as client:
        return request_stream_bounds(client, queue)


def request_stream_bounds(client: Connection, queue: str) -> StreamBounds:
    # Direct reply-to needs the consumer before the request goes out.
    client.consume(DIRECT_REPLY_TO, no_ack=True)
    correlation_id = secrets.token_hex(8)
    client.publish(
        STREAM_INFO_ROUTING_KEY,
        [queue.encode()],
        Properties(reply_to=DIRECT_REPLY_TO, correlation_id=correlation_id),
        mandatory=True,
    )
    while True:
        reply = client.next_delivery()
        if reply.properties.correlation_id == correlation_id:
            return parse_stream_bounds(queue, reply.properties.headers or {})


def parse_stream_bounds(queue: str, headers: Mapping[str, object]) -> StreamBounds:
    error = headers.get(ERROR)
    if error is not None:
        raise StreamInfoError(error.decode(errors="replace") if isinstance(error, bytes) else str(error))
    first, next_offset = headers.get(FIRST_OFFSET), headers.get(NEXT_OFFSET)
    if not isinstance(first, int) or not isinstance(next_offset, int):
        raise StreamInfoError(f"stream queue {queue!r}: the broker's reply lacks offsets: {headers!r}")
    return StreamBounds(first=first, next=next_offset)
