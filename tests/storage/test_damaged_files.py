"""Real files with flipped bytes: what the stores recover, and what they report.

A damaged record costs that record and no other: reading resumes at the next intact
record, the file as it was is kept aside (`*.corrupt`), and an ERROR names the file and
the counts. A segment of an unknown format is kept aside whole; a stream's offsets never
move and are never handed out twice.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from lavin.api.message import Message, encode_properties
from lavin.storage.metadata.definitions_store import DefinitionsStore, QueueDef
from lavin.storage.segments.record import FILE_HEADER_SIZE, HEADER_SIZE, LENGTH
from lavin.storage.segments.segment_store import SegmentStore
from lavin.storage.streams.stream_store import StreamStore

PERSISTENT = encode_properties({"delivery_mode": 2})
QUEUE_SEGMENT = 4096
STREAM_SEGMENT = 400
BODY_SIZE = 100
RECORD_SIZE = 146  # a record of BODY_SIZE, with "amq.direct", "rk" and PERSISTENT


def body(index: int) -> bytes:
    return b"%04d" % index + b"." * (BODY_SIZE - 4)


def records(segment: Path) -> list[int]:
    """Byte positions of the records of an undamaged segment file."""
    data = segment.read_bytes()
    positions, position = [], FILE_HEADER_SIZE
    while position < len(data):
        positions.append(position)
        position += HEADER_SIZE + LENGTH.unpack_from(data, position)[0]
    return positions


def flip(path: Path, position: int, count: int = 1, mask: int = 0xFF) -> bytes:
    """Flip `count` bytes from `position`; return the damaged file's bytes."""
    data = bytearray(path.read_bytes())
    for index in range(position, position + count):
        data[index] ^= mask
    path.write_bytes(bytes(data))
    return bytes(data)


def errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.levelno >= logging.ERROR]


# -- queues ----------------------------------------------------------------------------------


def queue_with_segments(path: Path, count: int) -> dict[int, list[int]]:
    """A closed queue store of `count` messages; the message indexes of each segment."""
    store = SegmentStore(path, durable=True, segment_size=QUEUE_SEGMENT)
    by_segment: dict[int, list[int]] = {}
    for index in range(count):
        message_id = store.push(Message("amq.direct", "rk", PERSISTENT, body(index), 1_700_000_000_000))
        by_segment.setdefault(message_id >> 32, []).append(index)
    store.close()
    return by_segment


def taken_bodies(store: SegmentStore) -> list[bytes]:
    taken = []
    while (item := store.take()) is not None:
        taken.append(item[1].body)
    return taken


# (which records of segment 2, where in the record, how many bytes): four flipped bytes
# in one body, one in each of four bodies, a record's length field, a record's crc field.
DAMAGE = {
    "four-bytes-in-one-body": ([5], HEADER_SIZE + 40, 4),
    "a-byte-in-four-bodies": ([1, 6, 11, 20], HEADER_SIZE + 40, 1),
    "a-length-field": ([7], 1, 1),
    "a-crc-field": ([7], 5, 1),
}


@pytest.mark.parametrize("damage", DAMAGE.values(), ids=DAMAGE.keys())
def test_damaged_records_in_a_middle_segment_cost_only_themselves(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: tuple[list[int], int, int]
) -> None:
    damaged_records, at, count = damage
    path = tmp_path / "q"
    by_segment = queue_with_segments(path, 250)
    assert len(by_segment) == 9
    segment = path / "msgs.0000000002"
    positions = records(segment)
    assert positions[1] - positions[0] == RECORD_SIZE
    for record in damaged_records:
        damaged_file = flip(segment, positions[record] + at, count)
    lost = {by_segment[2][record] for record in damaged_records}

    with caplog.at_level(logging.WARNING):
        store = SegmentStore(path, durable=True, segment_size=QUEUE_SEGMENT)
    expected = [body(index) for index in range(250) if index not in lost]
    assert len(store) == 250 - len(damaged_records)
    assert taken_bodies(store) == expected
    damaged, intact = len(damaged_records), len(positions) - len(damaged_records)
    assert errors(caplog) == [
        f"{segment}: {damaged} damaged record(s) ({damaged * RECORD_SIZE} bytes, the first at byte "
        f"{positions[damaged_records[0]]}) passed over, {intact} intact record(s) kept; "
        "the file as it was is kept as msgs.0000000002.corrupt"
    ]
    assert (path / "msgs.0000000002.corrupt").read_bytes() == damaged_file
    store.close()

    caplog.clear()
    with caplog.at_level(logging.WARNING):
        reopened = SegmentStore(path, durable=True, segment_size=QUEUE_SEGMENT)
    assert caplog.records == []  # repaired once: holes are read as records
    assert taken_bodies(reopened) == expected
    reopened.close()


def test_after_a_clean_shutdown_crcs_are_checked_when_first_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "q"
    by_segment = queue_with_segments(path, 250)
    segment = path / "msgs.0000000002"
    positions = records(segment)
    for record in (1, 6):
        flip(segment, positions[record] + HEADER_SIZE + 40)
    lost = {by_segment[2][1], by_segment[2][6]}
    first_in_segment = by_segment[2][0]

    with caplog.at_level(logging.WARNING):
        store = SegmentStore(path, durable=True, segment_size=QUEUE_SEGMENT, closed_cleanly=True)
    assert len(store) == 250 and caplog.records == []  # the lengths are whole: no crc was read
    for _ in range(first_in_segment + 1):
        assert store.take() is not None
    # A peek passes over a damaged record as a take does, so that both see the same head.
    peeked = store.peek()
    assert peeked is not None and peeked[1].body == body(by_segment[2][2])
    assert len(store) == 250 - first_in_segment - 2
    expected = [body(index) for index in range(first_in_segment + 2, 250) if index not in lost]
    assert taken_bodies(store) == expected
    assert errors(caplog) == [
        f"{segment}: the record at byte {positions[record]} fails its crc; passed over, not delivered"
        for record in (1, 6)
    ]
    assert not (path / "msgs.0000000002.corrupt").exists()
    store.close()

    reopened = SegmentStore(path, durable=True, segment_size=QUEUE_SEGMENT)
    assert len(reopened) == 248  # the damaged two were acked; the others, taken and not acked, are back
    reopened.close()


def test_after_a_clean_shutdown_a_damaged_length_field_is_still_found_at_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "q"
    by_segment = queue_with_segments(path, 250)
    segment = path / "msgs.0000000002"
    flip(segment, records(segment)[7] + 1)

    with caplog.at_level(logging.WARNING):
        store = SegmentStore(path, durable=True, segment_size=QUEUE_SEGMENT, closed_cleanly=True)
    assert len(store) == 249  # the careful scan took over: the damaged record is a hole
    assert taken_bodies(store) == [body(index) for index in range(250) if index != by_segment[2][7]]
    assert "1 damaged record(s)" in errors(caplog)[0]
    store.close()


def test_a_segment_of_unknown_format_is_kept_aside_and_the_others_recovered(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "q"
    store = SegmentStore(path, durable=True, segment_size=QUEUE_SEGMENT)
    ids = [store.push(Message("amq.direct", "rk", PERSISTENT, body(index), 1)) for index in range(250)]
    in_segment_2 = [index for index, message_id in enumerate(ids) if message_id >> 32 == 2]
    for _ in range(in_segment_2[-1] + 1):
        store.take()
    store.ack(ids[in_segment_2[0]])  # segment 2 gets an ack file
    store.close()
    segment = path / "msgs.0000000002"
    damaged_file = flip(segment, 0, 1, mask=0x62)  # format version 1 -> 99

    with caplog.at_level(logging.WARNING):
        reopened = SegmentStore(path, durable=True, segment_size=QUEUE_SEGMENT)
    expected = [body(index) for index in range(250) if index not in in_segment_2]
    assert taken_bodies(reopened) == expected
    assert errors(caplog) == [
        f"{path}: 1 segment(s) not recovered ({segment}: unsupported segment format version 99, kept as "
        f"msgs.0000000002.corrupt); {len(expected)} message(s) recovered from 8 other segment(s)"
    ]
    assert (path / "msgs.0000000002.corrupt").read_bytes() == damaged_file
    assert (path / "acks.0000000002.corrupt").exists()
    assert not segment.exists()
    reopened.close()


# -- streams ---------------------------------------------------------------------------------


def stream_with_segments(path: Path, count: int = 60) -> list[list[int]]:
    """A closed stream of `count` messages (every index saved); the offsets of each segment."""
    store = StreamStore(path, segment_size=STREAM_SEGMENT)
    for index in range(count):
        store.push(Message("", "s", PERSISTENT, f"m{index}".encode(), 1_000 + index))
    store.close()
    offsets, first = [], 0
    for name in sorted(name for name in os.listdir(path) if name.startswith("msgs.")):
        held = len(records(path / name))
        offsets.append(list(range(first, first + held)))
        first += held
    return offsets


def read_all(store: StreamStore) -> list[tuple[int, bytes]]:
    cursor = store.cursor(0)
    found = []
    while (item := cursor.next(store.end_offset)) is not None:
        found.append((item[0], item[1].body))
    return found


def expected_reads(count: int, lost: list[int]) -> list[tuple[int, bytes]]:
    return [(offset, f"m{offset}".encode()) for offset in range(count) if offset not in lost]


def test_a_damaged_stream_record_is_not_delivered_though_its_index_exists(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "s"
    segments = stream_with_segments(path)
    segment = path / "msgs.0000000002"
    flip(segment, records(segment)[3] + HEADER_SIZE + 20)  # the body of the segment's fourth message
    damaged = segments[1][3]

    with caplog.at_level(logging.WARNING):
        store = StreamStore(path, segment_size=STREAM_SEGMENT)
        assert read_all(store) == expected_reads(60, [damaged])
    assert errors(caplog) == [
        f"{segment}: the record at offset {damaged} (byte {records(segment)[3]}) fails its crc; "
        f"offsets {damaged} to {damaged} are passed over"
    ]
    with pytest.raises(LookupError):
        store.read(damaged)
    assert store.read(damaged + 1).body == f"m{damaged + 1}".encode()
    assert store.push(Message("", "s", PERSISTENT, b"new", 0)) == 60
    store.close()


def test_a_damaged_length_field_with_an_index_passes_over_to_the_segment_end(tmp_path: Path) -> None:
    path = tmp_path / "s"
    segments = stream_with_segments(path)
    segment = path / "msgs.0000000002"
    flip(segment, records(segment)[3] + 2)  # the length field says 64 KiB more

    store = StreamStore(path, segment_size=STREAM_SEGMENT)
    assert read_all(store) == expected_reads(60, segments[1][3:])
    assert store.end_offset == 60
    store.close()


def test_a_truncated_stream_segment_keeps_every_later_offset(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "s"
    segments = stream_with_segments(path)
    segment = path / "msgs.0000000002"
    positions = records(segment)
    os.truncate(segment, positions[-2] + 5)  # the last two records: one cut short, one gone
    lost = segments[1][-2:]

    with caplog.at_level(logging.WARNING):
        store = StreamStore(path, segment_size=STREAM_SEGMENT)
    assert read_all(store) == expected_reads(60, lost)
    assert errors(caplog) == [
        f"{segment}: 2 record(s) lost to damage (offsets {lost[0]} to {lost[1]}); holes keep the later offsets in place"
    ]
    assert store.push(Message("", "s", PERSISTENT, b"m60", 0)) == 60  # never an offset given out before
    store.close()

    caplog.clear()
    with caplog.at_level(logging.WARNING):
        reopened = StreamStore(path, segment_size=STREAM_SEGMENT)
    assert caplog.records == []
    assert read_all(reopened) == expected_reads(61, lost)
    reopened.close()


def test_a_damaged_stream_record_without_an_index_is_passed_over_in_place(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "s"
    segments = stream_with_segments(path)
    for name in os.listdir(path):
        if name.startswith("index."):
            (path / name).unlink()
    segment = path / "msgs.0000000002"
    flip(segment, records(segment)[3] + HEADER_SIZE + 20, 4)

    with caplog.at_level(logging.WARNING):
        store = StreamStore(path, segment_size=STREAM_SEGMENT)
    assert read_all(store) == expected_reads(60, [segments[1][3]])
    assert [message.split(":")[0] for message in errors(caplog)] == [str(segment)]
    assert "1 damaged record(s)" in errors(caplog)[0]
    assert (path / "msgs.0000000002.corrupt").exists()
    assert store.end_offset == 60
    store.close()


def test_a_stream_segment_of_unknown_format_is_kept_aside_and_its_offsets_stay_taken(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "s"
    segments = stream_with_segments(path)
    segment = path / "msgs.0000000002"
    damaged_file = flip(segment, 0, 1, mask=0x62)

    with caplog.at_level(logging.WARNING):
        store = StreamStore(path, segment_size=STREAM_SEGMENT)
    assert read_all(store) == expected_reads(60, segments[1])
    assert errors(caplog) == [
        f"{segment}: unsupported segment format version 99, kept as msgs.0000000002.corrupt; "
        "its records are not recovered",
        f"{segment}: {len(segments[1])} record(s) lost to damage (offsets {segments[1][0]} to {segments[1][-1]}); "
        "holes keep the later offsets in place",
    ]
    assert (path / "msgs.0000000002.corrupt").read_bytes() == damaged_file
    assert store.end_offset == 60
    store.close()


# -- definitions -----------------------------------------------------------------------------


def frame_offsets(data: bytes) -> list[int]:
    offsets, offset = [], 0
    while offset < len(data):
        offsets.append(offset)
        offset += 8 + LENGTH.unpack_from(data, offset)[0]
    return offsets


@pytest.mark.parametrize("where", [20, 0], ids=["payload-bit", "length-bit"])
def test_a_flipped_bit_in_the_definitions_log_loses_only_its_record(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, where: int
) -> None:
    path = tmp_path / "definitions.lavin"
    store = DefinitionsStore(path)
    store.load()
    for index in range(41):
        store.queue_declared(QueueDef(f"q{index}"))
    store.close()
    damaged_file = flip(path, frame_offsets(path.read_bytes())[10] + where, mask=0x04)

    with caplog.at_level(logging.WARNING):
        store = DefinitionsStore(path)
        loaded = store.load()
    store.close()
    assert list(loaded.queues) == [f"q{index}" for index in range(41) if index != 10]
    [error] = errors(caplog)
    assert error.startswith(f"{path}: 1 damaged stretch(es) skipped (")
    assert error.endswith(
        "; 10 record(s) read before the damage and 30 after; the file as it was is kept as definitions.lavin.corrupt"
    )
    assert (tmp_path / "definitions.lavin.corrupt").read_bytes() == damaged_file

    caplog.clear()
    with caplog.at_level(logging.WARNING):
        store = DefinitionsStore(path)
        assert list(store.load().queues) == list(loaded.queues)  # the rewrite kept every readable record
    store.close()
    assert caplog.records == []
