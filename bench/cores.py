"""One core against two: what a Lavin build does with the broker on one CPU, and on both.

    python -m lavin.bench.cores [--duration 5] [--rounds 2] [--only WORD] [--lavin NAME=PATH]

Starts each build (this environment's `lavin`, then every `--lavin NAME=PATH`, another
build's `lavin` command) and runs `bench/compare`'s message rows on it twice per round: with
every broker thread on CPU 0 and the load generator on CPU 1, then with the broker free on
CPUs 0 and 1 and the load generator free too (so they share both). Prints a Markdown table:
each build's figure on one core and on two, the gain, and its broker CPU per message.
docs/scaling.md reads its results.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lavin.bench.brokers import Broker, Transport, lavin
from lavin.bench.comparison import Measured, Scenario, median, run_scenario, scenarios, show

ONE_CORE = frozenset({0})
TWO_CORES = frozenset({0, 1})
GENERATOR_BESIDE = ("taskset", "-c", "1")  # the load generator's CPU while the broker has CPU 0
# The rows whose labels hold one of these words, unless --only names others.
DEFAULT_ROWS = ("autoack throughput", "manual ack", "persistent", "publish-only", "bodies")


def pin(pid: int, cpus: frozenset[int]) -> None:
    """Every thread of process `pid` on `cpus`; threads it starts later inherit it."""
    for task in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(task), cpus)


def parse_build(text: str) -> tuple[str, Path]:
    name, equals, path = text.partition("=")
    if not equals or not name or not Path(path).is_file():
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=PATH to a lavin command")
    return name, Path(path)


@contextmanager
def build(workdir: Path, name: str, executable: Path | None) -> Iterator[Broker]:
    with lavin(workdir, instance=f"-{name}", executable=executable) as broker:
        yield Broker(name, broker.uri, broker.pid)


def measure(scenario: Scenario, broker: Broker, cpus: frozenset[int], duration: float) -> Measured:
    assert broker.pid is not None
    pin(broker.pid, cpus)
    launcher = GENERATOR_BESIDE if cpus == ONE_CORE else ()
    return run_scenario(scenario, broker, duration, launcher)


def print_table(names: list[str], rows: list[tuple[Scenario, list[dict[frozenset[int], list[Measured]]]]]) -> None:
    header = ["scenario", "unit"]
    for name in names:
        header += [f"{name}, 1 core", f"{name}, 2 cores", f"{name}: 2 / 1", f"{name} CPU µs/op, 1 / 2 cores"]
    print("| " + " | ".join(header) + " |")
    print("|---|---|" + "---:|" * (len(header) - 2))
    for scenario, per_build in rows:
        cells = [scenario.label, scenario.unit]
        for runs in per_build:
            one = median([run.metric for run in runs[ONE_CORE]])
            two = median([run.metric for run in runs[TWO_CORES]])
            cpu = [show(median([run.cpu for run in runs[cpus]])) for cpus in (ONE_CORE, TWO_CORES)]
            gain = f"{two / one:.2f}" if one and two is not None else "n/a"
            cells += [show(one), show(two), gain, " / ".join(cpu)]
        print("| " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m lavin.bench.cores", description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per timed run (default 5)")
    parser.add_argument("--rounds", type=int, default=2, help="runs per build, row and core count (default 2)")
    parser.add_argument("--only", action="append", default=[], metavar="WORD",
                        help="the rows whose label contains WORD (repeatable; default: the message rows)")  # fmt: skip
    parser.add_argument("--lavin", action="append", default=[], type=parse_build, metavar="NAME=PATH",
                        help="also another build's lavin command (repeatable)")  # fmt: skip
    args = parser.parse_args()
    if len(os.sched_getaffinity(0)) < 2:
        parser.error("this needs CPUs 0 and 1")
    words = args.only or DEFAULT_ROWS
    _, repeated = scenarios(connections=0, churn_queues=0)
    plain = [row for row in repeated if row.timed and row.transport is Transport.AMQP]
    chosen = [row for row in plain if any(word in row.label for word in words)]
    builds: list[tuple[str, Path | None]] = [("Lavin", None), *args.lavin]
    rows: list[tuple[Scenario, list[dict[frozenset[int], list[Measured]]]]] = []
    with tempfile.TemporaryDirectory(prefix="lavin-cores-") as workdir:
        for scenario in chosen:
            per_build: list[dict[frozenset[int], list[Measured]]] = []
            for name, executable in builds:
                runs: dict[frozenset[int], list[Measured]] = {ONE_CORE: [], TWO_CORES: []}
                with build(Path(workdir), name, executable) as broker:
                    for _ in range(args.rounds):
                        for cpus in (ONE_CORE, TWO_CORES):
                            runs[cpus].append(measure(scenario, broker, cpus, args.duration))
                per_build.append(runs)
            rows.append((scenario, per_build))
    print_table([name for name, _ in builds], rows)


if __name__ == "__main__":
    main()
