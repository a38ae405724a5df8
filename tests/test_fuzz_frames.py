"""Seeded fuzzing of everything a client sends: the protocol header, the handshake methods,
method frames, content headers, bodies and the field tables inside them.

Valid inputs are mutated (bytes flipped, cut short, lengths extended, value types swapped,
invalid UTF-8, tables nested deep or made huge) with `random.Random` and fixed seeds, so a
failure names a case that reproduces. Each case runs on a connection of its own against one
real broker, while a pika canary publishes and consumes without pause. Every bad input must
end in a channel.close or connection.close with a reply code the AMQP spec defines (never
541 INTERNAL_ERROR), in an accepted input, or, for a bad protocol header, in the broker's
own header and a closed socket; the broker must stay up and log no traceback.

After its bad input a case sends a terminator, zeros a frame longer than frame_max, and
ends its side of the stream. Whatever the broker made of the input, the zeros end the
connection with 501 FRAME_ERROR (an invalid frame end) if it is still open, so no case
waits on a frame the broker still expects the rest of.
"""

from __future__ import annotations

import random
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pika
import pytest
from broker_process import BrokerProcess
from lavin.client.wire import (
    FRAME_BODY,
    FRAME_HEAD,
    FRAME_HEADER,
    FRAME_METHOD,
    FRAME_OVERHEAD,
    METHOD_ID,
    PROTOCOL_HEADER,
    AmqpError,
    Connection,
    decode_method,
    method_frame,
    raw_frame,
)
from pamqp import commands

SEED = 1909  # change to explore; every case name carries its category and number
FRAME_MAX = 4096  # small frames keep the terminator short
BIG_FRAME_MAX = 131072  # for deep and huge tables
CASE_TIMEOUT = 5.0  # a case that gets no answer in this long is a hang
CANARY_TIMEOUT = 10.0  # the canary's publish-to-delivery round trip must finish in this long
# The reply codes AMQP 0-9-1 defines for channel.close and connection.close (541 excluded).
SPEC_CODES = frozenset({311, 312, 313, 320, 402, 403, 404, 405, 406, 501, 502, 503, 504, 505, 506, 530, 540})
CHANNEL = 1
WORKERS = 16  # cases run at once, each on its own connection

# --------------------------------------------------------------------------- field values, by hand
# pamqp's encoder cannot write everything a client may send (bytes that are not UTF-8, a
# chosen integer width, nesting beyond Python's recursion limit), so values are built here.

U8, U16, U32, U64 = struct.Struct(">B"), struct.Struct(">H"), struct.Struct(">I"), struct.Struct(">Q")


def shortstr(data: bytes) -> bytes:
    return U8.pack(len(data)) + data


def longstr(data: bytes) -> bytes:
    return U32.pack(len(data)) + data


def table(fields: list[tuple[bytes, bytes]]) -> bytes:
    """A field table from (key, encoded value) pairs; the value carries its type octet."""
    return longstr(b"".join(shortstr(key) + value for key, value in fields))


def array(values: list[bytes]) -> bytes:
    return longstr(b"".join(values))


def text(value: str | bytes) -> bytes:
    return b"S" + longstr(value.encode() if isinstance(value, str) else value)


def signed(value: int) -> bytes:
    return b"I" + struct.pack(">i", value)


def long_long(value: int) -> bytes:
    return b"l" + struct.pack(">q", value)


def boolean(value: bool) -> bytes:
    return b"t" + bytes((value,))


def nested(depth: int, kind: bytes = b"F") -> bytes:
    """A table (F) or array (A) holding one of itself `depth` times over."""
    inner = table([])
    for _ in range(depth):
        inner = table([(b"n", b"F" + inner)]) if kind == b"F" else array([b"A" + inner])
    return inner


INVALID_UTF8 = (b"\xff", b"\xc3", b"\xed\xa0\x80", b"caf\xe9", b"\xf4\x90\x80\x80")
TYPE_OCTETS = b"tbBsuIilLfdDSATFVx\x00"


def random_value(rng: random.Random, depth: int = 0) -> bytes:
    """Any field value, valid on the wire, nested at most a few levels."""
    kind = rng.choice(TYPE_OCTETS if depth < 3 else TYPE_OCTETS.replace(b"A", b"").replace(b"F", b""))
    widths = {"b": 1, "B": 1, "s": 2, "u": 2, "I": 4, "i": 4, "l": 8, "L": 8, "f": 4, "d": 8, "D": 5, "T": 8}
    char = chr(kind)
    if char == "t":
        return boolean(rng.random() < 0.5)
    if char in widths:
        return bytes((kind,)) + rng.randbytes(widths[char])
    if char == "S":
        return text(rng.choice([b"", b"plain", "naïve ✓".encode(), rng.choice(INVALID_UTF8), rng.randbytes(12)]))
    if char == "x":
        return b"x" + longstr(rng.randbytes(rng.randrange(16)))
    if char == "F":
        return b"F" + random_table(rng, depth + 1)
    if char == "A":
        return b"A" + array([random_value(rng, depth + 1) for _ in range(rng.randrange(4))])
    return bytes((kind,))  # V and \x00: void


def random_table(rng: random.Random, depth: int = 0, names: tuple[str, ...] = ()) -> bytes:
    fields = []
    for _ in range(rng.randrange(6)):
        key = rng.choice(names).encode() if names and rng.random() < 0.7 else rng.choice([b"k", b"x-a", b"\xff\xfe"])
        fields.append((key, random_value(rng, depth)))
    return table(fields)


# Arguments the broker reads, with a value of a random type.
QUEUE_ARGUMENTS = (
    "x-queue-type", "x-message-ttl", "x-expires", "x-max-length", "x-max-length-bytes", "x-overflow",
    "x-dead-letter-exchange", "x-dead-letter-routing-key", "x-max-priority", "x-single-active-consumer",
    "x-delivery-limit", "x-consumer-timeout", "x-queue-mode", "x-max-age", "x-stream-max-segment-size-bytes",
)  # fmt: skip
EXCHANGE_ARGUMENTS = ("alternate-exchange", "x-delayed-type", "hash-header", "hash-property")
BINDING_ARGUMENTS = ("x-match", "x-priority", "x-stream-offset", "x-stream-filter", "x-cancel-on-ha-failover")
TEXT_VALUES = ("classic", "quorum", "stream", "reject-publish", "drop-head", "all", "any", "direct", "1D", "amq.direct")


def argument_table(rng: random.Random, names: tuple[str, ...]) -> bytes:
    """Known arguments with plausible, odd or invalid values."""
    fields = []
    for name in rng.sample(names, rng.randrange(1, 4)):
        choice = rng.randrange(6)
        if choice == 0:
            value = text(rng.choice(TEXT_VALUES))
        elif choice == 1:
            value = text(rng.choice(INVALID_UTF8))
        elif choice == 2:
            value = signed(rng.choice([0, 1, 1000, -1, 2**31 - 1]))
        elif choice == 3:
            value = long_long(rng.choice([2**40, -(2**63)]))
        else:
            value = random_value(rng)
        fields.append((name.encode(), value))
    return table(fields)


# --------------------------------------------------------------------------- valid inputs to mutate


def method_payload(method: commands.Frame) -> bytes:
    return method_frame(0, method)[7:-1]


def with_table(method: commands.Frame, table_bytes: bytes) -> bytes:
    """The method's payload with its last argument, an (empty) table, replaced."""
    return method_payload(method)[:-4] + table_bytes


QUEUES = ("fuzz-a", "fuzz-b", "amq.rabbitmq.reply-to", "")
EXCHANGES = ("", "amq.direct", "amq.headers", "amq.topic", "fuzz-x")
EXCHANGE_TYPES = ("direct", "fanout", "topic", "headers", "x-consistent-hash", "x-delayed-message", "nope")


def channel_methods(rng: random.Random) -> list[bytes]:
    """Payloads of methods a client sends on an open channel (arguments tables included)."""
    queue = rng.choice(QUEUES)
    exchange = rng.choice(EXCHANGES)
    declare = commands.Queue.Declare(queue=queue, exclusive=True, passive=rng.random() < 0.1)
    return [
        with_table(declare, argument_table(rng, QUEUE_ARGUMENTS)),
        with_table(
            commands.Exchange.Declare(exchange="fuzz-x", exchange_type=rng.choice(EXCHANGE_TYPES)),
            argument_table(rng, EXCHANGE_ARGUMENTS),
        ),
        with_table(
            commands.Queue.Bind(queue=queue, exchange=exchange, routing_key="k"), argument_table(rng, BINDING_ARGUMENTS)
        ),
        with_table(
            commands.Exchange.Bind(destination="fuzz-x", source="amq.fanout"), argument_table(rng, BINDING_ARGUMENTS)
        ),
        with_table(commands.Basic.Consume(queue=queue), argument_table(rng, BINDING_ARGUMENTS)),
        with_table(commands.Queue.Unbind(queue=queue, exchange=exchange), random_table(rng)),
        method_payload(commands.Basic.Qos(prefetch_count=rng.randrange(100), global_=rng.random() < 0.5)),
        method_payload(commands.Basic.Ack(delivery_tag=rng.randrange(3), multiple=rng.random() < 0.5)),
        method_payload(commands.Basic.Nack(delivery_tag=rng.randrange(3), requeue=rng.random() < 0.5)),
        method_payload(commands.Basic.Get(queue=queue)),
        method_payload(commands.Basic.Cancel(consumer_tag="c")),
        method_payload(commands.Queue.Purge(queue=queue)),
        method_payload(commands.Queue.Delete(queue=queue)),
        method_payload(commands.Exchange.Delete(exchange="fuzz-x")),
        method_payload(commands.Channel.Flow(active=True)),
        method_payload(commands.Confirm.Select()),
        method_payload(commands.Tx.Select()),
        method_payload(commands.Basic.Recover(requeue=True)),
        method_payload(commands.Channel.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0)),
    ]


PROPERTY_BITS = (
    (0x8000, "content_type"), (0x4000, "content_encoding"), (0x2000, "headers"), (0x1000, "delivery_mode"),
    (0x0800, "priority"), (0x0400, "correlation_id"), (0x0200, "reply_to"), (0x0100, "expiration"),
    (0x0080, "message_id"), (0x0040, "timestamp"), (0x0020, "type"), (0x0010, "user_id"), (0x0008, "app_id"),
    (0x0004, "cluster_id"),
)  # fmt: skip
HEADER_NAMES = ("CC", "BCC", "x-delay", "x-match", "x-death", "x-stream-filter-value", "hash")


def random_properties(rng: random.Random) -> bytes:
    """A property flag word and its fields; headers, reply-to and expiration most often."""
    flags = 0
    fields = []
    for bit, name in PROPERTY_BITS:
        if rng.random() > (0.6 if name in ("headers", "reply_to", "expiration") else 0.2):
            continue
        flags |= bit
        if name == "headers":
            fields.append(random_headers(rng))
        elif name in ("delivery_mode", "priority"):
            fields.append(bytes((rng.choice([1, 2, 9, 255]),)))
        elif name == "timestamp":
            fields.append(U64.pack(rng.choice([0, 1_700_000_000, 2**64 - 1])))
        elif name == "reply_to":
            fields.append(shortstr(rng.choice([b"amq.rabbitmq.reply-to", b"q", rng.choice(INVALID_UTF8)])))
        elif name == "expiration":
            fields.append(shortstr(rng.choice([b"1000", b"-5", b"12abc", b"", "١٢".encode(), *INVALID_UTF8])))
        elif name == "user_id":
            fields.append(shortstr(rng.choice([b"guest", b"other", b"\xff"])))
        else:
            fields.append(shortstr(rng.choice([b"", b"text/plain", rng.choice(INVALID_UTF8)])))
    return U16.pack(flags) + b"".join(fields)


def random_headers(rng: random.Random) -> bytes:
    fields = [(key.encode(), random_value(rng)) for key in rng.sample(HEADER_NAMES, rng.randrange(3))]
    if rng.random() < 0.3:  # sender-selected distribution with odd keys
        fields.append((rng.choice([b"CC", b"BCC"]), b"A" + array([text(rng.choice([b"k", *INVALID_UTF8]))])))
    return table(fields)


def header_payload(body_size: int, properties: bytes) -> bytes:
    return struct.pack(">HHQ", 60, 0, body_size) + properties


PUBLISH = method_payload(commands.Basic.Publish(exchange="", routing_key="fuzz-a"))


def publish(properties: bytes, body: bytes = b"body") -> list[tuple[int, bytes]]:
    """basic.publish, content header and body as (frame type, payload)."""
    frames = [(FRAME_METHOD, PUBLISH), (FRAME_HEADER, header_payload(len(body), properties))]
    return [*frames, (FRAME_BODY, body)] if body else frames


# --------------------------------------------------------------------------- mutations


def mutate(rng: random.Random, data: bytes) -> bytes:
    """One to three random mutations of `data`."""
    out = bytearray(data)
    for _ in range(rng.randrange(1, 4)):
        operation = rng.randrange(7)
        position = rng.randrange(len(out) + 1)
        if operation == 0 and out:  # flip bits
            index = min(position, len(out) - 1)
            out[index] ^= 1 << rng.randrange(8)
        elif operation == 1:  # cut short
            del out[position:]
        elif operation == 2:  # extend
            out[position:position] = rng.randbytes(rng.randrange(1, 16))
        elif operation == 3 and len(out) >= 4:  # a length or number made huge, zero or slightly off
            index = min(position, len(out) - 4)
            old = U32.unpack_from(out, index)[0]
            out[index : index + 4] = U32.pack(
                rng.choice([0, 0xFFFFFFFF, 0x7FFFFFFF, (old + 1) % 2**32, max(old - 1, 0)])
            )
        elif operation == 4 and out:  # a short length or an octet made odd
            out[min(position, len(out) - 1)] = rng.choice([0, 1, 0x7F, 0x80, 0xFF])
        elif operation == 5:  # a value type swapped
            types = [i for i, octet in enumerate(out) if octet in TYPE_OCTETS]
            if types:
                out[rng.choice(types)] = rng.choice(TYPE_OCTETS + b"?Zc\x01")
        elif operation == 6:  # invalid UTF-8 written over the bytes there
            junk = rng.choice(INVALID_UTF8)
            out[position : position + len(junk)] = junk
    return bytes(out)


def frames_of(rng: random.Random, frames: list[tuple[int, bytes]], channel: int = CHANNEL) -> bytes:
    """The frames with one of them mutated: mostly its payload (framed with its new size, so
    that the mutation reaches the decoders), sometimes the frame's own bytes."""
    target = rng.randrange(len(frames))
    out = []
    for index, (frame_type, payload) in enumerate(frames):
        if index != target:
            out.append(raw_frame(frame_type, channel, payload))
        elif rng.random() < 0.8:
            out.append(raw_frame(frame_type, channel, mutate(rng, payload)))
        else:
            out.append(mutate(rng, raw_frame(frame_type, channel, payload)))
    return b"".join(out)


# --------------------------------------------------------------------------- cases


@dataclass(frozen=True)
class Case:
    name: str
    stage: str  # where the bad input goes: "header", "start-ok", "tune-ok", "open" or "channel"
    data: bytes
    frame_max: int = FRAME_MAX


def start_ok_payload(rng: random.Random) -> bytes:
    capabilities = b"F" + table([(b"authentication_failure_close", boolean(True)), (b"basic.nack", boolean(True))])
    extra = random_table(rng, names=("product", "capabilities", "platform"))
    properties = longstr(shortstr(b"capabilities") + capabilities + extra[4:]) if rng.random() < 0.7 else extra
    if rng.random() < 0.5:
        response = longstr(table([(b"LOGIN", text("guest")), (b"PASSWORD", text("guest"))])[4:])
        mechanism = b"AMQPLAIN"
    else:
        response = longstr(b"\0guest\0guest")
        mechanism = b"PLAIN"
    return U32.pack(commands.Connection.StartOk.index) + properties + shortstr(mechanism) + response + shortstr(b"en")


def header_cases(rng: random.Random, count: int) -> Iterator[Case]:
    for number in range(count):
        data = mutate(rng, PROTOCOL_HEADER)
        if data[:8] == PROTOCOL_HEADER:  # mutated past the header only (zeros never complete one)
            continue
        yield Case(f"header-{number}", "header", data)


def start_ok_cases(rng: random.Random, count: int) -> Iterator[Case]:
    for number in range(count):
        yield Case(f"start-ok-{number}", "start-ok", frames_of(rng, [(FRAME_METHOD, start_ok_payload(rng))], 0))


def tune_ok_cases(rng: random.Random, count: int) -> Iterator[Case]:
    for number in range(count):
        tune_ok = commands.Connection.TuneOk(
            channel_max=rng.choice([0, 1, 2047, 65535]), frame_max=FRAME_MAX, heartbeat=rng.choice([0, 60, 65535])
        )
        open_ = method_payload(commands.Connection.Open(virtual_host="/"))
        frames = [(FRAME_METHOD, method_payload(tune_ok)), (FRAME_METHOD, open_)]
        yield Case(f"tune-ok-{number}", "tune-ok", frames_of(rng, frames, 0))


def open_cases(rng: random.Random, count: int) -> Iterator[Case]:
    for number in range(count):
        open_ = method_payload(commands.Connection.Open(virtual_host=rng.choice(["/", "nope", ""])))
        channel_open = method_payload(commands.Channel.Open())
        yield Case(f"open-{number}", "open", frames_of(rng, [(FRAME_METHOD, open_)], 0) + raw_frame(1, 1, channel_open))


def method_cases(rng: random.Random, count: int) -> Iterator[Case]:
    for number in range(count):
        payload = rng.choice(channel_methods(rng))
        yield Case(f"method-{number}", "channel", frames_of(rng, [(FRAME_METHOD, payload)]))


def publish_cases(rng: random.Random, count: int) -> Iterator[Case]:
    for number in range(count):
        body = rng.choice([b"", b"body", rng.randbytes(rng.randrange(FRAME_MAX))])
        yield Case(f"publish-{number}", "channel", frames_of(rng, publish(random_properties(rng), body)))


def valid_publish_cases(rng: random.Random, count: int) -> Iterator[Case]:
    """Properties as generated, not mutated: odd values (reply-to, expiration, headers) in
    well-formed frames."""
    for number in range(count):
        frames = publish(random_properties(rng))
        yield Case(f"odd-properties-{number}", "channel", b"".join(raw_frame(t, CHANNEL, p) for t, p in frames))


def valid_method_cases(rng: random.Random, count: int) -> Iterator[Case]:
    """Methods with arguments of odd types and values, in well-formed frames."""
    for number in range(count):
        payload = rng.choice(channel_methods(rng)[:6])
        yield Case(f"odd-arguments-{number}", "channel", raw_frame(FRAME_METHOD, CHANNEL, payload))


def extreme_table_cases(rng: random.Random) -> Iterator[Case]:
    """Tables nested deeper than any limit and tables as large as a frame, in the headers
    property, in queue.declare's arguments and in start-ok's client properties."""
    room = BIG_FRAME_MAX - 64
    biggest = table([(b"k%05d" % i, b"V") for i in range(room // 8)])
    tables = {
        "deep-table": nested(2000),
        "deep-array": nested(2000, b"A"),
        "deep-100": nested(100),
        "deep-101": nested(101),
        "huge": biggest,
        "huge-cut": biggest[: len(biggest) // 2],
        "size-past-end": U32.pack(0xFFFFFFF0) + biggest[4:64],
    }
    declare = commands.Queue.Declare(queue="fuzz-big", exclusive=True)
    for name, value in tables.items():
        headers = U16.pack(0x2000) + value
        yield Case(
            f"headers-{name}", "channel", b"".join(raw_frame(t, 1, p) for t, p in publish(headers)), BIG_FRAME_MAX
        )
        yield Case(f"declare-{name}", "channel", raw_frame(FRAME_METHOD, 1, with_table(declare, value)), BIG_FRAME_MAX)
        start_ok = U32.pack(commands.Connection.StartOk.index) + value + shortstr(b"PLAIN")
        start_ok += longstr(b"\0guest\0guest") + shortstr(b"en")
        yield Case(f"start-ok-{name}", "start-ok", raw_frame(FRAME_METHOD, 0, start_ok), BIG_FRAME_MAX)
    for depth in (99, 100, 101, 5000):
        nested_value = b"A" + array([text(b"k")] * rng.randrange(1, 3))
        for _ in range(depth):
            nested_value = b"A" + array([nested_value])
        cc = U16.pack(0x2000) + table([(b"CC", nested_value)])
        frames = b"".join(raw_frame(t, 1, p) for t, p in publish(cc))
        yield Case(f"headers-cc-depth-{depth}", "channel", frames, BIG_FRAME_MAX)


CATEGORIES: dict[str, Callable[[random.Random], Iterator[Case]]] = {
    "header": lambda rng: header_cases(rng, 200),
    "start-ok": lambda rng: start_ok_cases(rng, 500),
    "tune-ok": lambda rng: tune_ok_cases(rng, 200),
    "open": lambda rng: open_cases(rng, 200),
    "method": lambda rng: method_cases(rng, 1500),
    "odd-arguments": lambda rng: valid_method_cases(rng, 500),
    "publish": lambda rng: publish_cases(rng, 1500),
    "odd-properties": lambda rng: valid_publish_cases(rng, 500),
    "extreme-tables": extreme_table_cases,
}

# --------------------------------------------------------------------------- running a case


@dataclass
class Outcome:
    codes: list[int]  # reply codes of every channel.close and connection.close, in order
    texts: list[str]
    header_reply: bytes | None = None  # what the broker answered to a bad protocol header


def run_case(url: str, case: Case) -> Outcome:
    """Bring a connection to the case's stage, send its bytes and the terminator, and
    collect what the broker answers until it closes the socket."""
    connection = Connection(url, timeout=CASE_TIMEOUT)
    try:
        if case.stage == "header":
            connection.send_raw(case.data + bytes(8))
            connection.sock.shutdown(socket.SHUT_WR)
            return Outcome([], [], connection.read_until_eof(CASE_TIMEOUT))
        frame_max = BIG_FRAME_MAX
        connection.send_raw(PROTOCOL_HEADER)
        if case.stage == "start-ok":
            connection.expect(commands.Connection.Start)
        else:
            connection.start_ok()
            if case.stage == "tune-ok":
                connection.expect(commands.Connection.Tune)
            elif case.stage == "open":
                frame_max = case.frame_max
                connection.tune_ok(frame_max)
            else:
                frame_max = case.frame_max
                connection.tune_ok(frame_max, vhost="/")
                connection.expect(commands.Connection.OpenOk)
                connection.open_channel(CHANNEL)
        connection.send_raw(case.data + bytes(frame_max + 8))
        # The end of the stream: the broker answers all it has read, then closes the socket,
        # without waiting for a close-ok that the zeros would bury.
        connection.sock.shutdown(socket.SHUT_WR)
        received = connection.read_until_eof(CASE_TIMEOUT)
    finally:
        connection.sock.close()
    closes = list(closes_in(received))
    return Outcome([c.reply_code for c in closes], [c.reply_text for c in closes])


CLOSES = (commands.Connection.Close.index, commands.Channel.Close.index)


def closes_in(data: bytes) -> Iterator[commands.Connection.Close | commands.Channel.Close]:
    """The channel.close and connection.close frames among the broker's output. Only
    those are decoded: content the broker passes on (returned messages) may hold
    properties pamqp refuses, such as a content type that is not UTF-8."""
    offset = 0
    while offset + FRAME_OVERHEAD <= len(data):
        frame_type, _, size = FRAME_HEAD.unpack_from(data, offset)
        payload = data[offset + 7 : offset + 7 + size]
        offset += size + FRAME_OVERHEAD
        if frame_type == FRAME_METHOD and METHOD_ID.unpack_from(payload)[0] in CLOSES:
            close = decode_method(payload)
            assert isinstance(close, commands.Connection.Close | commands.Channel.Close)
            yield close


def attempt(url: str, case: Case) -> Outcome | str:
    """The case's outcome, or what went wrong with the connection (a hang, a reset)."""
    try:
        return run_case(url, case)
    except (TimeoutError, AmqpError, OSError) as exc:
        return repr(exc)


def problems_of(case: Case, outcome: Outcome) -> list[str]:
    problems = []
    for code, reply_text in zip(outcome.codes, outcome.texts, strict=True):
        if code not in SPEC_CODES:
            problems.append(f"{case.name}: {code} {reply_text}")
    if outcome.header_reply is not None and outcome.header_reply != PROTOCOL_HEADER:
        problems.append(f"{case.name}: answered a bad protocol header with {outcome.header_reply[:40]!r}")
    return problems


# --------------------------------------------------------------------------- the canary


class Canary(threading.Thread):
    """A pika client that publishes a message and waits for its delivery, over and over."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.rounds = 0
        self.slowest = 0.0
        self.error: str | None = None
        self._stop_event = threading.Event()
        self._ready = threading.Event()

    def run(self) -> None:
        try:
            connection = pika.BlockingConnection(pika.URLParameters(self.url))
            channel = connection.channel()
            channel.confirm_delivery()
            queue = channel.queue_declare("", exclusive=True).method.queue
            deliveries = channel.consume(queue, auto_ack=True, inactivity_timeout=CANARY_TIMEOUT)
            self._ready.set()
            while not self._stop_event.is_set():
                body = str(self.rounds).encode()
                started = time.monotonic()
                channel.basic_publish("", queue, body)
                method, _, received = next(deliveries)
                if method is None or received != body:
                    self.error = f"round {self.rounds}: expected {body!r}, got {received!r} (method {method})"
                    break
                self.slowest = max(self.slowest, time.monotonic() - started)
                self.rounds += 1
                time.sleep(0.005)
            channel.cancel()
            connection.close()
        except Exception as exc:  # noqa: BLE001 - any failure is the finding, reported by check()
            self.error = f"round {self.rounds}: {exc!r}"
        finally:
            self._ready.set()

    def wait_ready(self) -> None:
        assert self._ready.wait(CANARY_TIMEOUT), "the canary could not connect"

    def check(self, rounds_before: int) -> None:
        """No failure so far, and a round trip completes after `rounds_before`."""
        deadline = time.monotonic() + CANARY_TIMEOUT
        while self.rounds <= rounds_before + 1 and self.error is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert self.error is None, f"the canary failed: {self.error}"
        assert self.rounds > rounds_before + 1, "the canary made no progress"

    def stop(self) -> None:
        self._stop_event.set()
        self.join(CANARY_TIMEOUT + 5)


@pytest.fixture(scope="module")
def fuzz_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker of the fuzzer's own, so that its log holds only what the cases caused."""
    process = BrokerProcess(Path(tmp_path_factory.mktemp("fuzz-broker")) / "data")
    process.start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def canary(fuzz_broker: BrokerProcess) -> Iterator[Canary]:
    thread = Canary(fuzz_broker.url)
    thread.start()
    thread.wait_ready()
    yield thread
    thread.stop()


@pytest.mark.parametrize("category", CATEGORIES)
def test_bad_input_gets_a_spec_reply_and_the_broker_carries_on(
    fuzz_broker: BrokerProcess, canary: Canary, category: str
) -> None:
    cases = list(CATEGORIES[category](random.Random(f"{SEED}-{category}")))
    rounds_before = canary.rounds
    tally: Counter[str] = Counter()
    problems: list[str] = []
    # Many connections at once: a refused login is answered only after a delay.
    with ThreadPoolExecutor(WORKERS) as pool:
        for case, outcome in zip(cases, pool.map(partial(attempt, fuzz_broker.url), cases), strict=True):
            if isinstance(outcome, str):
                problems.append(f"{case.name}: {outcome}")
                continue
            tally.update(str(code) for code in outcome.codes or ["none"])
            problems += problems_of(case, outcome)
    assert fuzz_broker.running, "the broker died"
    log = fuzz_broker.output
    print(
        f"{category}: {len(cases)} cases, replies {dict(tally)}, tracebacks in the log: {log.count('Traceback')},"
        f" the canary's slowest round trip: {canary.slowest:.3f} s"
    )
    assert not problems, f"{len(problems)} cases went wrong, the first ones:\n" + "\n".join(problems[:15])
    assert "Traceback" not in log, log[max(log.index("Traceback") - 200, 0) :][:3000]
    canary.check(rounds_before)


def test_a_case_runs_against_a_healthy_connection(fuzz_broker: BrokerProcess) -> None:
    """The harness itself: well-formed input followed by the terminator ends in 501 only."""
    frames = b"".join(raw_frame(t, CHANNEL, p) for t, p in publish(U16.pack(0x1000) + b"\x02"))
    outcome = run_case(fuzz_broker.url, Case("valid", "channel", frames))
    assert outcome.codes == [501], outcome.texts
