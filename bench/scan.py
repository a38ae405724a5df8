"""Raw frame scanners for the load loops: deliveries, publisher confirms, body stamps.

They walk frame heads with struct and look only at the bytes they need (the method id,
the delivery tag, the first bytes of a body), so the generator spends well under a
microsecond per frame and stays faster than the broker it measures.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Callable

from lavin.client.wire import (
    BASIC_ACK,
    BASIC_DELIVER,
    BASIC_NACK,
    DELIVERY_TAG,
    FRAME_BODY,
    FRAME_HEAD,
    FRAME_METHOD,
    METHOD_ID,
    decode_method,
    raise_if_closing,
)

CONFIRM_ARGS = struct.Struct(">QB")  # delivery tag, multiple bit
# Stamps at the start of a message body.
SEQUENCE_STAMP = struct.Struct(">IQ")  # stream id (a producer, or one routing key of it), sequence from 0
CLOCK_STAMP = struct.Struct(">Q")  # CLOCK_MONOTONIC nanoseconds at publish time

BodyHandler = Callable[[bytearray, int], None]


def check_control(buffer: bytearray, start: int, end: int) -> None:
    """A method other than the ones being counted: fail loudly if it ends the run."""
    raise_if_closing(decode_method(bytes(buffer[start + 7 : end - 1])))


class DeliveryScanner:
    """Counts basic.deliver frames, keeps the last delivery tag, and hands the first body
    frame of each message to `on_body` (for stamps) when one is given."""

    def __init__(self, on_body: BodyHandler | None = None) -> None:
        self.count = 0
        self.last_tag = 0
        self._on_body = on_body
        self._awaiting_body = False

    def scan(self, buffer: bytearray) -> int:
        """Consume every complete frame in `buffer`; return how many bytes that was."""
        unpack_head = FRAME_HEAD.unpack_from
        unpack_method = METHOD_ID.unpack_from
        unpack_tag = DELIVERY_TAG.unpack_from
        on_body = self._on_body
        awaiting_body = self._awaiting_body
        count = self.count
        last_tag = self.last_tag
        offset = 0
        end = len(buffer)
        while end - offset >= 8:
            frame_type, _, size = unpack_head(buffer, offset)
            next_offset = offset + 8 + size
            if next_offset > end:
                break
            if frame_type == FRAME_METHOD:
                if unpack_method(buffer, offset + 7)[0] == BASIC_DELIVER:
                    count += 1
                    # After the method id comes the consumer tag (a short string), then the tag.
                    last_tag = unpack_tag(buffer, offset + 12 + buffer[offset + 11])[0]
                    awaiting_body = on_body is not None
                else:
                    check_control(buffer, offset, next_offset)
            elif frame_type == FRAME_BODY and awaiting_body:
                on_body(buffer, offset + 7)  # type: ignore[misc]  # set whenever awaiting_body is
                awaiting_body = False
            offset = next_offset
        self.count = count
        self.last_tag = last_tag
        self._awaiting_body = awaiting_body
        return offset


class ConfirmTracker:
    """Counts the publisher confirms (basic.ack / basic.nack, single or multiple) received."""

    def __init__(self) -> None:
        self._floor = 0  # every publish up to this tag is settled
        self._singles: set[int] = set()  # settled one by one above the floor
        self.nacked = 0

    @property
    def settled(self) -> int:
        return self._floor + len(self._singles)

    def scan(self, buffer: bytearray) -> int:
        """Consume every complete frame in `buffer`; return how many bytes that was."""
        offset = 0
        end = len(buffer)
        while end - offset >= 8:
            frame_type, _, size = FRAME_HEAD.unpack_from(buffer, offset)
            next_offset = offset + 8 + size
            if next_offset > end:
                break
            if frame_type == FRAME_METHOD:
                method = METHOD_ID.unpack_from(buffer, offset + 7)[0]
                if method in (BASIC_ACK, BASIC_NACK):
                    tag, bits = CONFIRM_ARGS.unpack_from(buffer, offset + 11)
                    newly_settled = self._settle(tag, bool(bits & 1))
                    if method == BASIC_NACK:
                        self.nacked += newly_settled
                else:
                    check_control(buffer, offset, next_offset)
            offset = next_offset
        return offset

    def _settle(self, tag: int, multiple: bool) -> int:
        before = self.settled
        if multiple:
            if tag > self._floor:
                self._floor = tag
                self._singles = {single for single in self._singles if single > tag}
        elif tag == self._floor + 1:  # in order, as brokers that confirm one by one send them
            self._floor = tag
        elif tag > self._floor:
            self._singles.add(tag)  # out of order: held until the ones below it are in
        # Singles the floor has reached join it, whichever confirm raised it.
        while self._floor + 1 in self._singles:
            self._singles.remove(self._floor + 1)
            self._floor += 1
        return self.settled - before


class SequenceCheck:
    """Which sequence numbers arrived from each stream, and how many came twice or late.

    Late means below the highest number this consumer already saw from that stream.
    """

    def __init__(self) -> None:
        self.seen: dict[int, bytearray] = {}  # stream id -> bitmap of sequence numbers
        self._highest: dict[int, int] = {}
        self.duplicated = 0
        self.out_of_order = 0

    def on_body(self, buffer: bytearray, offset: int) -> None:
        stream, sequence = SEQUENCE_STAMP.unpack_from(buffer, offset)
        bitmap = self.seen.get(stream)
        if bitmap is None:
            bitmap = self.seen[stream] = bytearray()
        index, bit = sequence >> 3, 1 << (sequence & 7)
        if index >= len(bitmap):
            bitmap.extend(bytes(index + 4096 - len(bitmap)))
        if bitmap[index] & bit:
            self.duplicated += 1
            return
        bitmap[index] |= bit
        highest = self._highest.get(stream, -1)
        if sequence < highest:
            self.out_of_order += 1
        else:
            self._highest[stream] = sequence


def verify_totals(published: dict[int, int], checks: list[SequenceCheck], *, each: bool = False) -> dict[str, int]:
    """Lost, duplicated and out-of-order counts over all consumers, given how many messages
    went out per stream (a producer, or one routing key of a producer).

    By default every message is due once in all: a sequence number seen by two consumers is a
    duplicate too (the broker delivered it twice). With `each` (fan-out) every check stands for
    one queue and is due every message.
    """
    if each:
        totals = [verify_totals(published, [check]) for check in checks]
        return {key: sum(total[key] for total in totals) for key in ("lost", "duplicated", "out_of_order")}
    duplicated = sum(check.duplicated for check in checks)
    unions: dict[int, int] = {}
    for check in checks:
        for stream, seen in check.seen.items():
            bitmap = int.from_bytes(seen, "little")
            duplicated += bitmap.bit_count()
            unions[stream] = unions.get(stream, 0) | bitmap
    distinct = 0
    for stream, union in unions.items():
        # Numbers past what the stream published count as duplicates: nothing sent them.
        in_range = union & ((1 << published.get(stream, 0)) - 1)
        distinct += in_range.bit_count()
        duplicated -= in_range.bit_count()
    return {
        "lost": sum(published.values()) - distinct,
        "duplicated": duplicated,
        "out_of_order": sum(check.out_of_order for check in checks),
    }


class LatencyRecorder:
    """Publish-to-delivery latency of every message, from the clock stamp in its body.

    `now` is set once per read from the socket: the time the bytes arrived.
    """

    def __init__(self) -> None:
        self.samples_ns = array("q")
        self.now = 0

    def on_body(self, buffer: bytearray, offset: int) -> None:
        self.samples_ns.append(self.now - CLOCK_STAMP.unpack_from(buffer, offset)[0])
