"""The decoded window's process-wide budget: a message routed to many queues (fan-out) is
held once, so it is paid for once, not once per queue."""

from __future__ import annotations

from lavin.api.message import Message
from lavin.storage.segments.decoded_window import ALL_WINDOWS_BYTES, DecodedWindow

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
