"""One load run: producer and consumer processes on one queue, and the sums of what they saw.

The coordinating process only starts and stops the workers, prints per-second rates and
reads the broker's CPU time around the run; it touches no messages.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import queue
import time
from array import array
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from typing import Any, TextIO

from lavin.bench.measure import BrokerCpu, percentiles_ms
from lavin.bench.scan import verify_totals
from lavin.bench.workers import LoadSpec, Signals, Stamp, consume, produce

Worker = Callable[[LoadSpec, int, int, Signals], None]  # process entry: spec, index, progress slot, signals
MB = 1e6

READY_TIMEOUT = 30.0
STOP_TIMEOUT = 90.0  # a stopping producer may still wait for its confirms
IDLE_TIMEOUT = 5.0  # a drain without progress for this long is over: what is missing is lost
TICK = 0.1
PROGRESS_INTERVAL = 1.0


class WorkerFailed(Exception):
    pass


class Watcher:
    """Collects the workers' reports and prints progress while the coordinator waits."""

    def __init__(self, signals: Signals, workers: dict[tuple[str, int], BaseProcess], progress: TextIO | None) -> None:
        self.signals = signals
        self.workers = workers
        self.producers = sum(role == "producer" for role, _ in workers)
        self.ready = 0
        self.results: dict[tuple[str, int], dict[str, Any]] = {}
        self._progress = progress
        self._last_print = time.monotonic()
        self._last_counts = (0, 0)
        self._started = self._last_print

    def counts(self) -> tuple[int, int]:
        """Messages published and consumed so far, from the workers' live counters."""
        progress = self.signals.progress
        return sum(progress[: self.producers]), sum(progress[self.producers :])

    def finished(self, role: str) -> int:
        return sum(key[0] == role for key in self.results)

    def mark_start(self) -> None:
        self._started = self._last_print = time.monotonic()

    def until(self, done: Callable[[], bool], timeout: float | None = None, waiting_for: str = "") -> None:
        deadline = time.monotonic() + timeout if timeout is not None else math.inf
        while not done():
            self._take_reports()
            self._print_progress()
            if time.monotonic() > deadline:
                raise TimeoutError(f"gave up after {timeout:.0f} s waiting for {waiting_for}")

    def drain(self, target: int) -> None:
        """Wait until consumers got `target` messages, or until they stop making progress."""
        last_count, last_change = -1, time.monotonic()

        def done() -> bool:
            nonlocal last_count, last_change
            consumed = self.counts()[1]
            if consumed != last_count:
                last_count, last_change = consumed, time.monotonic()
            return consumed >= target or time.monotonic() - last_change > IDLE_TIMEOUT

        self.until(done)

    def _take_reports(self) -> None:
        exited = {key for key, process in self.workers.items() if not process.is_alive()}
        timeout = TICK
        while True:
            try:
                kind, role, index, payload = self.signals.reports.get(timeout=timeout)
            except queue.Empty:
                break
            timeout = 0.0  # after the first report, only take what is already waiting
            if kind == "error":
                raise WorkerFailed(f"{role} {index}: {payload}")
            if kind == "ready":
                self.ready += 1
            else:
                self.results[(role, index)] = payload
        for role, index in exited - self.results.keys():
            code = self.workers[(role, index)].exitcode
            raise WorkerFailed(f"{role} {index} exited with {code} without a result")

    def _print_progress(self) -> None:
        now = time.monotonic()
        if self._progress is None or now - self._last_print < PROGRESS_INTERVAL or not self.signals.start.is_set():
            return
        published, consumed = self.counts()
        span = now - self._last_print
        publish_rate = (published - self._last_counts[0]) / span
        consume_rate = (consumed - self._last_counts[1]) / span
        elapsed = now - self._started
        print(
            f"{elapsed:6.1f} s  published {publish_rate:>10,.0f} msg/s  consumed {consume_rate:>10,.0f} msg/s",
            file=self._progress,
            flush=True,
        )
        self._last_print, self._last_counts = now, (published, consumed)


def run_load(
    spec: LoadSpec,
    producers: int,
    consumers: int,
    *,
    duration: float,
    drain: bool,
    expected: dict[int, int] | None = None,
    broker_pid: int | None = None,
    progress: TextIO | None = None,
    producer: Worker = produce,
    consumer: Worker = consume,
    copies: int = 1,
) -> dict[str, Any]:
    """Publish for `duration` seconds (0: until each producer sent `spec.count`), then,
    with `drain`, consume until everything published (or `expected`, messages per stream
    already queued, with no producers) has arrived, `copies` times over (fan-out)."""
    context = multiprocessing.get_context("fork")
    signals = Signals(context, producers + consumers)
    workers: dict[tuple[str, int], BaseProcess] = {}
    for index in range(producers):
        workers[("producer", index)] = context.Process(target=producer, args=(spec, index, index, signals), daemon=True)
    for index in range(consumers):
        workers[("consumer", index)] = context.Process(
            target=consumer, args=(spec, index, producers + index, signals), daemon=True
        )
    for process in workers.values():
        process.start()
    watcher = Watcher(signals, workers, progress)
    broker_cpu = BrokerCpu(broker_pid)
    started_ns = 0
    try:
        watcher.until(lambda: watcher.ready == len(workers), READY_TIMEOUT, "the workers to connect")
        broker_cpu.start()
        started_ns = time.monotonic_ns()
        watcher.mark_start()
        signals.start.set()
        if producers:
            deadline = time.monotonic() + duration if duration else math.inf
            with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C ends the run early, with results
                watcher.until(lambda: watcher.finished("producer") == producers or time.monotonic() >= deadline)
            signals.stop_producers.set()
            watcher.until(lambda: watcher.finished("producer") == producers, STOP_TIMEOUT, "the producers to stop")
        if consumers:
            if drain:
                published = sum(watcher.results[("producer", index)]["published"] for index in range(producers))
                if not producers:
                    published = sum((expected or {}).values())
                with contextlib.suppress(KeyboardInterrupt):
                    watcher.drain(published * copies)
            signals.stop_consumers.set()
            watcher.until(lambda: watcher.finished("consumer") == consumers, STOP_TIMEOUT, "the consumers to stop")
        broker_cpu.stop()
    finally:
        for event in (signals.start, signals.stop_producers, signals.stop_consumers):
            event.set()
        for process in workers.values():
            process.join(timeout=5)
            if process.is_alive():
                process.terminate()
    return summarize(spec, watcher.results, started_ns, broker_cpu, expected or {}, copies)


def summarize(
    spec: LoadSpec,
    results: dict[tuple[str, int], dict[str, Any]],
    started_ns: int,
    broker_cpu: BrokerCpu,
    expected: dict[int, int],
    copies: int,
) -> dict[str, Any]:
    producers = {index: result for (role, index), result in results.items() if role == "producer"}
    consumers = [result for (role, _), result in results.items() if role == "consumer"]
    published = sum(result["published"] for result in producers.values())
    consumed = sum(result["consumed"] for result in consumers)
    summary: dict[str, Any] = {}
    if producers:
        summary["published"] = published
        summary["publish_rate"] = published / max(result["elapsed"] for result in producers.values())
        summary["publish_mb_per_s"] = summary["publish_rate"] * spec.size / MB
        if spec.confirm:
            summary["nacked"] = sum(result["nacked"] for result in producers.values())
    if consumers:
        # From the start to the last delivery: a consumer idling at the end does not dilute the rate.
        last_ns = max(result["last_ns"] for result in consumers)
        summary["consumed"] = consumed
        summary["consume_rate"] = consumed / ((last_ns - started_ns) / 1e9) if consumed else 0.0
        summary["consume_mb_per_s"] = summary["consume_rate"] * spec.size / MB
    if spec.stamp is Stamp.SEQUENCE:
        streams = dict(expected)
        for result in producers.values():
            streams.update(result["streams"])
        checks = [check for result in consumers for check in result["checks"]]
        summary["verify"] = verify_totals(streams, checks, each=copies > 1)
    if spec.stamp is Stamp.CLOCK:
        samples = array("q")
        for result in consumers:
            samples.extend(result["latencies_ns"])
        summary["latency_ms"] = percentiles_ms(samples)
    if broker_cpu.pid is not None:
        summary["broker_cpu_s"] = broker_cpu.seconds
        summary["broker_cpu_us_per_message"] = broker_cpu.micros_per(max(published, consumed))
    generator: dict[str, float] = {}
    if producers:
        generator["producers_s"] = sum(result["cpu"] for result in producers.values())
    if consumers:
        generator["consumers_s"] = sum(result["cpu"] for result in consumers)
    # Near 100 % the generator itself may be what limits the rate.
    workers = [*producers.values(), *consumers]
    generator["busiest_worker_pct"] = max(100 * result["cpu"] / result["elapsed"] for result in workers)
    summary["generator_cpu"] = generator
    return summary
