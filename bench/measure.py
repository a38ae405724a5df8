"""What the load generator measures besides messages: CPU time, memory, latency spread."""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Sequence

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
IDLE_CPU_SHARE = 0.05  # a broker using less of a core than this has finished the previous run's work
IDLE_SAMPLE = 0.5  # seconds
IDLE_WAIT = 30.0


def own_cpu_seconds() -> float:
    """User plus system CPU time of this process so far (microsecond resolution)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def process_cpu_seconds(pid: int) -> float:
    """User plus system CPU time of another process (all its threads), from /proc."""
    with open(f"/proc/{pid}/stat") as stat:
        # The command name may hold spaces and parentheses: split after its closing one.
        fields = stat.read().rsplit(")", 1)[1].split()
    # utime and stime are fields 14 and 15 of the file, 12 and 13 after the name.
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def process_rss_kib(pid: int, *, peak: bool = False) -> int:
    """The resident set size of a process now, or its peak so far (VmHWM)."""
    field = "VmHWM:" if peak else "VmRSS:"
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} for process {pid}")


def rss_growth_mb(before_kib: int, after_kib: int) -> float:
    """RSS growth in MB (10^6 bytes), the unit of LavinMQ's published figures."""
    return (after_kib - before_kib) * 1024 / 1e6


def process_fd_count(pid: int) -> int:
    """Open file descriptors of a process: sockets, files, epoll, pipes."""
    return len(os.listdir(f"/proc/{pid}/fd"))


def wait_until_idle(pid: int) -> None:
    """Let the broker finish what the previous run left (deleting a full queue, garbage
    collection, flushing) so that it is not billed to the next run or measurement."""
    deadline = time.monotonic() + IDLE_WAIT
    while time.monotonic() < deadline:
        before = process_cpu_seconds(pid)
        time.sleep(IDLE_SAMPLE)
        if process_cpu_seconds(pid) - before < IDLE_CPU_SHARE * IDLE_SAMPLE:
            return


class BrokerCpu:
    """The broker's CPU time across a measured stretch; a no-op without a pid."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        self._start = 0.0
        self.seconds = 0.0

    def start(self) -> None:
        if self.pid is not None:
            self._start = process_cpu_seconds(self.pid)

    def stop(self) -> None:
        if self.pid is not None:
            self.seconds = process_cpu_seconds(self.pid) - self._start

    def micros_per(self, operations: int) -> float | None:
        if self.pid is None or operations <= 0:
            return None
        return self.seconds * 1e6 / operations


def percentiles_ms(samples_ns: Sequence[int]) -> dict[str, float]:
    """p50/p95/p99/max (nearest rank) and the mean, in milliseconds."""
    if not samples_ns:
        return {}
    ordered = sorted(samples_ns)
    last = len(ordered) - 1

    def rank(fraction: float) -> float:
        return ordered[min(last, int(fraction * len(ordered)))] / 1e6

    return {
        "p50": rank(0.50),
        "p95": rank(0.95),
        "p99": rank(0.99),
        "max": ordered[last] / 1e6,
        "mean": sum(ordered) / len(ordered) / 1e6,
    }
