"""The decoded window's process-wide budget: a message routed to many queues (fan-out) is
held once, so it is paid for once, not once per queue."""

from __future__ import annotations

import sys

from lavin.api.message import Message
from lavin.storage.segments.decoded_window import ALL_WINDOWS_BYTES, DecodedWindow, window_bytes

MiB = 1 << 20


def test_one_message_in_many_windows_is_paid_for_once() -> None:
    queues = 4 * ALL_WINDOWS_BYTES // MiB  # four times what the budget holds of distinct 1 MiB messages
    fanned_out = Message("fan", "", b"\x00\x00", bytes(MiB), 1)
    windows = [DecodedWindow() for _ in range(queues)]
    for window in windows:
        window.remember(7, MiB + 40, fanned_out)
    held = [window.take(7) for window in windows]
    assert all(entry is not None and entry[1] is fanned_out for entry in held), "a queue's entry was not kept"


def test_distinct_messages_are_each_paid_for() -> None:
    count = 2 * ALL_WINDOWS_BYTES // MiB
    windows = [DecodedWindow() for _ in range(count)]
    for window in windows:
        window.remember(7, MiB + 40, Message("direct", "", b"\x00\x00", bytes(MiB), 1))
    held = [window.take(7) for window in windows]
    kept = sum(entry is not None for entry in held)
    assert 0 < kept <= ALL_WINDOWS_BYTES // MiB, (
        f"{kept} distinct 1 MiB messages held within a {ALL_WINDOWS_BYTES // MiB} MiB budget"
    )


def message(body: bytes) -> Message:
    return Message("direct", "", b"\x00\x00", body, 1)


def test_records_not_remembered_are_passed_over_in_id_order() -> None:
    window = DecodedWindow()
    first, second, third = message(b"1"), message(b"2"), message(b"3")
    window.remember(100, 40, first)
    window.remember(180, 40, second)  # 140 went straight to a consumer
    window.remember((2 << 32) | 4, 40, third)  # a new segment
    assert window.held(0, frozenset()) == (3, 3)
    assert window.held(0, frozenset({180})) == (2, 2)
    assert window.take(140) is None  # not held; the entry before it goes
    assert window.held(0, frozenset()) == (2, 2)
    assert window.take(180) == (40, second)
    assert window.take((2 << 32) | 4) == (40, third)
    assert window.take((2 << 32) | 44) is None


def test_forgetting_the_last_entry_forgets_the_gap_before_it() -> None:
    window = DecodedWindow()
    kept, forgotten, later = message(b"kept"), message(b"forgotten"), message(b"later")
    window.remember(100, 40, kept)
    window.remember(180, 40, forgotten)
    window.forget_last(180)
    window.forget_last(100 - 1)  # not the last entry: nothing happens
    assert window.held(0, frozenset()) == (1, 4)
    window.remember(140, 40, later)  # consecutive to `kept` again
    assert window.take(100) == (40, kept)
    assert window.take(140) == (40, later)
    assert window.held(0, frozenset()) == (0, 0)


def test_what_the_windows_hold_is_given_back_to_the_budget() -> None:
    before = window_bytes()
    window = DecodedWindow()
    for index in range(3000):  # past the point where taken entries are cut off the lists
        window.remember(4 + index * 50, 50, message(b"%d" % index))
    for index in range(2000):
        assert window.take(4 + index * 50) is not None
    window.forget_last(4 + 2999 * 50)
    assert window.held(0, frozenset()) == (999, sum(len(b"%d" % index) for index in range(2000, 2999)))
    window.clear()
    assert window_bytes() == before


def test_a_taken_message_is_not_kept_by_the_window() -> None:
    window = DecodedWindow()
    first = message(b"large")
    references = sys.getrefcount(first)
    window.remember(4, 40, first)
    window.remember(44, 40, message(b"next"))  # the window is not empty after the take
    assert window.take(4) == (40, first)
    assert sys.getrefcount(first) == references
