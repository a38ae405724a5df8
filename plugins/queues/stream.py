"""The stream queue type: an append-only log kept in segment files, read by offset.

Selected with `x-queue-type: stream`. The log itself is the core's stream store; this type
reads the arguments that shape it: retention (`x-max-length`, `x-max-length-bytes`,
`x-max-age`) and the segment size (`x-stream-max-segment-size-bytes`).
"""

from __future__ import annotations

from pathlib import Path

from lavin.api import (
    Arguments,
    InvalidArgument,
    Retention,
    StorageToolkit,
    StreamType,
    field_type,
    parse_duration,
)

SEGMENT_SIZE_ARGUMENT = "x-stream-max-segment-size-bytes"


def _non_negative(arguments: Arguments, name: str) -> int | None:
    value = arguments.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(name, f'"expected integer, got {field_type(value)}"')
    if value < 0:
        raise InvalidArgument(name, f"{{value_negative,{value}}}")
    return value


def _max_age(arguments: Arguments) -> int | None:
    value = arguments.get("x-max-age")
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    if not isinstance(value, str):
        raise InvalidArgument("x-max-age", f"{{unacceptable_type,{field_type(value)}}}")
    milliseconds = parse_duration(value)
    if milliseconds is None:
        raise InvalidArgument("x-max-age", "invalid_max_age")
    return milliseconds


def _segment_size(arguments: Arguments, limit: int) -> int | None:
    size = _non_negative(arguments, SEGMENT_SIZE_ARGUMENT)
    if size is not None and not 0 < size <= limit:
        reason = f"{{value_zero,{size}}}" if not size else f"{{value_too_large,{size}}} (at most {limit})"
        raise InvalidArgument(SEGMENT_SIZE_ARGUMENT, reason)
    return size


class StreamQueueType(StreamType):
    """The core's stream store, configured by the declare arguments. Never instantiated."""

    name = "stream"

    @classmethod
    def create(cls, path: Path, arguments: Arguments, durable: bool, storage: StorageToolkit) -> StreamType:
        retention = Retention(
            max_length=_non_negative(arguments, "x-max-length"),
            max_bytes=_non_negative(arguments, "x-max-length-bytes"),
            max_age_ms=_max_age(arguments),
        )
        segment_size = _segment_size(arguments, storage.max_stream_segment_size)
        return storage.stream_store(path, segment_size, retention)
