"""Rates of the segment store's hot paths: `python bench/bench_storage.py [--count N]`.

Prints µs per message for push, take + ack, and push + skip + ack (the publish-to-idle-
consumer path), and the RSS growth while the queue holds every message.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

from lavin.api.message import Message, encode_properties
from lavin.storage.segments.segment_store import SegmentStore

TICK = 100  # pushes between flushes, like one event-loop tick under load


def rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize() / 1e6


def run(directory: Path, count: int, durable: bool, persistent: bool, body_size: int) -> None:
    properties = encode_properties({"delivery_mode": 2 if persistent else 1})
    message = Message("amq.direct", "bench", properties, b"x" * body_size, 1)
    store = SegmentStore(directory / f"q-{durable}-{persistent}-{body_size}", durable)
    push, take, ack, skip, flush = store.push, store.take, store.ack, store.skip, store.flush

    rss_before = rss_mb()
    start = time.perf_counter()
    for index in range(count):
        push(message)
        if index % TICK == 0:
            flush()
    flush()
    push_us = (time.perf_counter() - start) / count * 1e6
    rss_growth = rss_mb() - rss_before

    start = time.perf_counter()
    while (item := take()) is not None:
        ack(item[0])
    flush()
    take_us = (time.perf_counter() - start) / count * 1e6

    start = time.perf_counter()
    for index in range(count):
        message_id = push(message)
        skip(message_id)
        ack(message_id)
        if index % TICK == 0:
            flush()
    flush()
    direct_us = (time.perf_counter() - start) / count * 1e6
    store.delete()
    print(
        f"durable={durable!s:5} persistent={persistent!s:5} body={body_size:>6}B  "
        f"push {push_us:5.2f} µs  take+ack {take_us:5.2f} µs  push+skip+ack {direct_us:5.2f} µs  "
        f"RSS +{rss_growth:6.1f} MB for {count:,} queued"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--dir", type=Path, default=None, help="where the queues live (a temp dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        for durable, persistent, body_size in [
            (False, False, 16),
            (True, False, 16),
            (True, True, 16),
            (True, True, 1024),
            (True, True, 65536),
        ]:
            count = args.count if body_size <= 1024 else max(1, args.count // 100)
            run(Path(directory), count, durable, persistent, body_size)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
