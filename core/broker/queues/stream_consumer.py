"""Stream consumers: where each one starts, which messages it wants, and how far it acked.

Every consumer of a stream reads through a cursor of its own. The channel settles its
deliveries on the consumer's `StreamReader` (acks release prefetch credit only: the log
keeps every message). For server-side offset tracking the reader knows the offset up to
which everything was acked: the first delivered offset not acked yet, or the read
position when nothing is outstanding (messages its filter passed over count as acked).

Which consumers are tracked (`tracking`): a consumer tag the client chose, and either no
`x-stream-offset` or LavinMQ's `x-stream-automatic-offset-tracking: true`; that argument
set to false turns tracking off. A tracked consumer with a stored offset starts there,
whatever `x-stream-offset` says; without one it starts where `x-stream-offset` says.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from heapq import heappop, heappush
from typing import TYPE_CHECKING, Any, Protocol

from lavin.api import Message, StreamCursor, errors, field_type, parse_duration
from lavin.api.message import HEADERS_FLAG, headers_offset
from lavin.storage.segments.record import now_ms

if TYPE_CHECKING:
    from lavin.broker.queues.consumer import Consumer
    from lavin.broker.queues.stream_queue import StreamQueue

OFFSET_ARGUMENT = "x-stream-offset"
TRACKING_ARGUMENT = "x-stream-automatic-offset-tracking"
FILTER_ARGUMENT = "x-stream-filter"
MATCH_UNFILTERED_ARGUMENT = "x-stream-match-unfiltered"
FILTER_VALUE_HEADER = "x-stream-filter-value"
GENERATED_TAG_PREFIX = "amq.ctag-"

_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")


def long_field(name: str, value: int) -> bytes:
    """A field-table entry holding a signed 64-bit integer (type 'l')."""
    key = name.encode()
    return bytes((len(key),)) + key + b"l" + _I64.pack(value)


_OFFSET_ENTRY_PREFIX = long_field(OFFSET_ARGUMENT, 0)[: -_I64.size]


def with_offset_header(properties: bytes, offset: int) -> bytes:
    """The encoded properties with `x-stream-offset` appended to the headers table.

    Spliced into the bytes, so the properties are not decoded. Appended last, so that it
    wins over a header of that name the publisher set.
    """
    entry = _OFFSET_ENTRY_PREFIX + _I64.pack(offset)
    flags = properties[0]
    position = headers_offset(properties)
    if not flags & HEADERS_FLAG:
        table = _U32.pack(len(entry)) + entry
        return bytes((flags | HEADERS_FLAG,)) + properties[1:position] + table + properties[position:]
    size = _U32.unpack_from(properties, position)[0]
    end = position + 4 + size
    table = _U32.pack(size + len(entry)) + properties[position + 4 : end] + entry
    return properties[:position] + table + properties[end:]


def with_offset(message: Message, offset: int) -> Message:
    """The message as a stream consumer gets it: `x-stream-offset` in its headers."""
    properties = with_offset_header(message.properties, offset)
    return Message(message.exchange, message.routing_key, properties, message.body, message.timestamp)


@dataclass(frozen=True)
class StreamFilter:
    """RabbitMQ 3.13's filter, applied exactly to each message rather than per chunk."""

    values: frozenset[str]
    match_unfiltered: bool

    def accepts(self, message: Message) -> bool:
        try:
            value = message.headers.get(FILTER_VALUE_HEADER)
        except ValueError:  # properties nobody could decode: the message has no filter value
            value = None
        if isinstance(value, bytes):
            value = value.decode(errors="replace")
        if not isinstance(value, str):
            return self.match_unfiltered
        return value in self.values


def parse_filter(arguments: dict[str, Any]) -> StreamFilter | None:
    """`x-stream-filter` (a string or an array of strings; other entries are ignored, as in
    RabbitMQ) and `x-stream-match-unfiltered` (false unless true)."""
    raw = arguments.get(FILTER_ARGUMENT)
    if isinstance(raw, (str, bytes)):
        raw = [raw]
    elif not isinstance(raw, list):
        return None
    texts = [v.decode(errors="replace") if isinstance(v, bytes) else v for v in raw if isinstance(v, (str, bytes))]
    values = frozenset(texts)
    return StreamFilter(values, arguments.get(MATCH_UNFILTERED_ARGUMENT) is True)


class OffsetRange(Protocol):
    """What placing a consumer needs of a stream: its bounds, its arrival times, its name."""

    @property
    def first_offset(self) -> int: ...
    @property
    def next_offset(self) -> int: ...
    def offset_at(self, timestamp: int) -> int: ...
    def resource(self) -> str: ...


def start_offset(queue: StreamQueue, value: object) -> int:
    return offset_in(_QueueRange(queue), value)


def offset_in(stream: OffsetRange, value: object) -> int:
    """Where a consumer starts: `x-stream-offset` as RabbitMQ reads it.

    `first`, `last` (the last message), `next` (what comes next; also when absent), an
    offset, an AMQP timestamp (seconds: the first message that arrived at or after it) or
    a duration such as `10m` (messages of the last ten minutes). A negative integer -N
    replays the last N messages, as in LavinMQ. Offsets outside the stream are moved to
    its nearest end.
    """
    first, end = stream.first_offset, stream.next_offset
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    if value is None or value == "next":
        return end
    if value == "first":
        return first
    if value == "last":
        return max(first, end - 1)
    if isinstance(value, str):
        milliseconds = parse_duration(value)
        if milliseconds is None:
            raise _invalid_offset(stream, value)
        wanted = stream.offset_at(now_ms() - milliseconds)
    elif isinstance(value, datetime):
        wanted = stream.offset_at(int(value.timestamp() * 1000))
    elif isinstance(value, int) and not isinstance(value, bool):
        wanted = value if value >= 0 else end + value  # -N: the last N messages
    else:
        raise _invalid_offset(stream, value)
    return min(max(wanted, first), end)


class _QueueRange:
    """A stream queue as an OffsetRange: its visible end is what is committed."""

    def __init__(self, queue: StreamQueue) -> None:
        self._queue = queue

    @property
    def first_offset(self) -> int:
        return self._queue.store.first_offset

    @property
    def next_offset(self) -> int:
        return self._queue.committed_offset

    def offset_at(self, timestamp: int) -> int:
        return self._queue.store.offset_at(timestamp)

    def resource(self) -> str:
        return self._queue.resource()


def _invalid_offset(stream: OffsetRange, value: object) -> errors.PreconditionFailed:
    return _invalid_arg(stream.resource(), OFFSET_ARGUMENT, "invalid_stream_offset_arg", value)


def _invalid_arg(resource: str, argument: str, reason: str, value: object) -> errors.PreconditionFailed:
    if isinstance(value, str):
        shown = f'<<"{value}">>'
    else:
        shown = str(value).lower() if isinstance(value, bool) else str(value)
    return errors.PreconditionFailed(
        f"invalid arg '{argument}' for {resource}: {{{reason},{{{field_type(value)},{shown}}}}}"
    )


def tracking(queue: StreamQueue, consumer: Consumer) -> bool:
    """Whether the broker stores and restores this consumer's offset.

    Only a tag the client chose can be resumed. `x-stream-automatic-offset-tracking` (a
    boolean, or the string `true`/`false` as LavinMQ also reads it) decides when given;
    otherwise a consumer is tracked when it gives no `x-stream-offset`.
    """
    arguments = consumer.arguments
    flag = arguments.get(TRACKING_ARGUMENT)
    if isinstance(flag, bytes):
        flag = flag.decode(errors="replace")
    if flag in ("true", "false"):
        flag = flag == "true"
    if flag is not None and not isinstance(flag, bool):
        raise _invalid_arg(queue.resource(), TRACKING_ARGUMENT, "invalid_automatic_offset_tracking_arg", flag)
    if consumer.tag.startswith(GENERATED_TAG_PREFIX):
        return False
    if flag is None:
        return OFFSET_ARGUMENT not in arguments
    return flag


class StreamReader:
    """One consumer's cursor, filter and outstanding deliveries; the channel settles on it."""

    __slots__ = (
        "_outstanding",
        "_queue",
        "_redeliver",
        "_settled",
        "active",
        "consumer",
        "cursor",
        "filter",
        "tracked",
    )

    def __init__(
        self,
        queue: StreamQueue,
        consumer: Consumer,
        cursor: StreamCursor,
        stream_filter: StreamFilter | None,
        tracked: bool,
    ) -> None:
        self._queue = queue
        self.consumer = consumer
        self.cursor = cursor
        self.filter = stream_filter
        self.tracked = tracked
        self.active = True
        self._outstanding: deque[int] = deque()  # delivered offsets, ascending, not settled yet
        self._settled: set[int] = set()  # settled out of order, still behind an outstanding one
        self._redeliver: list[int] = []  # heap of requeued offsets

    @property
    def resume_offset(self) -> int:
        """Where this consumer would resume without losing an unacked message."""
        return self._outstanding[0] if self._outstanding else self.cursor.offset

    def has_pending(self, limit: int) -> bool:
        return bool(self._redeliver) or self.cursor.offset < limit

    def drain(self, limit: int, budget: int) -> bool:
        """Deliver while the consumer has credit, reading below `limit`; True when `budget`
        reads ran out first (there is more to do)."""
        consumer = self.consumer
        cursor = self.cursor
        stream_filter = self.filter
        while consumer.can_take():
            if not budget:
                return True
            budget -= 1
            if self._redeliver:
                self._redeliver_next()
                continue
            item = cursor.next(limit)
            if item is None:
                return False
            offset, message = item
            if stream_filter is not None and not stream_filter.accepts(message):
                continue
            self._outstanding.append(offset)
            self._send(offset, message, False)
        return False

    def _redeliver_next(self) -> None:
        offset = heappop(self._redeliver)
        try:
            message = self._queue.store.read(offset)
        except LookupError:  # retention deleted it meanwhile
            self._settle(offset)
            return
        self._send(offset, message, True)

    def _send(self, offset: int, message: Message, redelivered: bool) -> None:
        self.consumer.deliver(self, offset, with_offset(message, offset), redelivered)

    # -- settled by the channel ------------------------------------------------------------

    def ack(self, offset: int) -> None:
        self._settle(offset)

    def check_rejectable(self) -> None:
        """A log keeps its messages: nothing to reject (540, RabbitMQ's text)."""
        raise errors.NotImplemented_(
            f"basic.nack and basic.reject not supported by stream queues {self._queue.resource()}"
        )

    def reject(self, offset: int) -> None:
        self.check_rejectable()

    def requeue(self, offsets: Iterable[int]) -> None:
        """Nacked with requeue or recovered: sent again to this consumer, marked redelivered.
        After the consumer is gone (its channel closed) they simply stay unacked."""
        if not self.active:
            return
        for offset in offsets:
            heappush(self._redeliver, offset)
        self._queue.schedule_drain()

    def _settle(self, offset: int) -> None:
        outstanding = self._outstanding
        if outstanding and outstanding[0] == offset:
            outstanding.popleft()
            settled = self._settled
            while outstanding and outstanding[0] in settled:
                settled.remove(outstanding.popleft())
        else:
            self._settled.add(offset)
        if self.tracked:
            self._queue.store_offset(self.consumer.tag, self.resume_offset)
