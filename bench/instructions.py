"""Instruction counts of the broker under fixed loads, with valgrind's callgrind.

Instructions, unlike seconds, do not move with whatever else the machine does, so two builds
can be compared to a fraction of a percent: run this against each build's Python (a venv
with Lavin installed) and compare the tables. Only the loads are counted: the broker starts
with instrumentation off, and each load switches it on for its own duration.

    python -m lavin.bench.instructions --python .venv-installed/bin/python [--scale 1.0]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lavin.bench.brokers import free_port, port_accepts

START_TIMEOUT = 300.0  # the broker starts some 50 times slower under valgrind
# (label, lavin-perf arguments): fixed message counts, one producer and one consumer.
LOADS: tuple[tuple[str, list[str]], ...] = (
    ("autoack, 16 B", ["throughput", "-a", "-C", "20000"]),
    ("manual ack, prefetch 1000", ["throughput", "-P", "1000", "-C", "20000"]),
    ("confirms (window 1000), autoack", ["throughput", "-a", "-c", "1000", "-C", "20000"]),
    ("persistent, confirms, manual ack", ["throughput", "-p", "-c", "1000", "-C", "10000"]),
    ("publish-only", ["publish-only", "-C", "20000"]),
    ("64 KiB, manual ack, prefetch 100", ["throughput", "-s", "65536", "-P", "100", "-C", "1000"]),
)


def scaled(arguments: list[str], scale: float) -> list[str]:
    count = arguments.index("-C") + 1
    return [*arguments[:count], str(max(1, int(int(arguments[count]) * scale))), *arguments[count + 1 :]]


def callgrind_control(pid: int, *options: str) -> None:
    subprocess.run(["callgrind_control", *options, str(pid)], check=True, capture_output=True, timeout=120)


def total_instructions(dump: Path) -> int:
    match = re.search(r"^totals: (\d+)", dump.read_text(), re.M)
    if match is None:
        raise RuntimeError(f"{dump} has no totals line")
    return int(match.group(1))


def measure(python: str, scale: float) -> list[tuple[str, int]]:
    results: list[tuple[str, int]] = []
    with tempfile.TemporaryDirectory(prefix="lavin-callgrind-") as workdir:
        port = free_port()
        out = Path(workdir) / "callgrind.out"
        broker = subprocess.Popen(
            [
                "valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
                python, "-m", "lavin", "serve", "--data-dir", f"{workdir}/data", "--amqp-port", str(port),
                "--http-port", "-1", "--metrics-http-port", "-1", "--log-level", "warning",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + START_TIMEOUT
            while not port_accepts(port):
                if broker.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the broker did not start under valgrind")
                time.sleep(1.0)
            uri = f"amqp://guest:guest@127.0.0.1:{port}/%2F"
            for number, (label, arguments) in enumerate(LOADS, start=1):
                callgrind_control(broker.pid, "--zero")
                callgrind_control(broker.pid, "--instr=on")
                load = [sys.executable, "-m", "lavin.bench.perf", *scaled(arguments, scale), "--uri", uri, "--json"]
                subprocess.run(load, check=True, capture_output=True, timeout=1800)
                callgrind_control(broker.pid, "--instr=off")
                callgrind_control(broker.pid, f"--dump=load{number}")
                dumps = sorted(Path(workdir).glob("callgrind.out*"), key=lambda path: path.stat().st_mtime)
                results.append((label, total_instructions(dumps[-1])))
        finally:
            broker.terminate()
            broker.wait(timeout=120)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", required=True, help="the Python of the build to measure")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every load's message count")
    options = parser.parse_args()
    for label, instructions in measure(options.python, options.scale):
        print(f"| {label} | {instructions:,} |", flush=True)


if __name__ == "__main__":
    main()
