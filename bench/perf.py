"""`lavin-perf`: an AMQP 0-9-1 load generator for Lavin, RabbitMQ or any other broker.

    lavin-perf throughput --duration 10 --verify
    lavin-perf latency --rate 1000 --broker-pid "$(pgrep -f 'lavin serve')"
    lavin-perf connections --count 1000 --broker-pid 1234 --json
    lavin-perf throughput --uri amqps://guest:guest@localhost/%2F --tls-ca-cert ca.crt
    lavin-perf throughput --ws ws://127.0.0.1:15672/ws/amqp
    lavin-perf fanout --queues 100 --verify --count 10000
    lavin-perf many-connections --connections 1000 --rate-per-connection 100
    lavin-perf backlog --backlog-bytes 10000000000 --dd-dir /var/lib/lavin
    lavin-perf queued-messages --count 100000000 --broker-pid 1234 --keep

See docs/benchmarks.md for every scenario and what its numbers mean.
"""

from __future__ import annotations

import argparse
import json
import ssl
import sys
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, TextIO
from urllib.parse import urlsplit

from lavin.bench.fleet import spread
from lavin.bench.load import WorkerFailed
from lavin.bench.scale import (
    SCALE_SCENARIOS,
    add_scale_scenarios,
    bindings,
    check_scale_arguments,
    queue_count,
    queued_messages,
)
from lavin.bench.scan import CLOCK_STAMP, SEQUENCE_STAMP
from lavin.bench.scenarios import (
    backlog,
    consume_only,
    dd_write,
    idle_connections,
    message_flow,
    queue_churn,
    routed_flow,
)
from lavin.bench.topology import Topology, fanout, queue_per_key, topic
from lavin.bench.workers import LoadSpec, Stamp
from lavin.client.wire import Address, AmqpError, connect

DEFAULT_URI = "amqp://guest:guest@127.0.0.1:5672/%2F"
DEFAULT_WEBSOCKET_PATH = "/ws/amqp"
WEBSOCKET_PORTS = {"ws": 80, "wss": 443}
BUSY_WORKER_PCT = 90.0  # above this the generator may be what limits the rate
FLEET_SCENARIOS = ("fanout", "topic", "many-queues", "many-connections")  # many connections per worker process


def _common_options() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--uri", default=DEFAULT_URI, help="broker to load (default %(default)s)")
    parser.add_argument("--json", action="store_true", help="print the results as one JSON object")
    parser.add_argument(
        "--broker-pid", type=int, help="the broker's process id: report its CPU time (and RSS) from /proc"
    )
    transport = parser.add_argument_group("TLS and WebSocket")
    transport.add_argument(
        "--tls",
        action="store_true",
        help="connect with TLS (implied by amqps:// and wss://; amqp:// then means port 5671)",
    )
    transport.add_argument(
        "--tls-ca-cert",
        metavar="FILE",
        help="check the broker's certificate against this CA (default: the system's CAs)",
    )
    transport.add_argument(
        "--tls-no-verify", action="store_true", help="do not check the broker's certificate at all (benchmarks only)"
    )
    transport.add_argument("--tls-cert", metavar="FILE", help="present this client certificate (PEM)")
    transport.add_argument("--tls-key", metavar="FILE", help="the client certificate's key, if not in --tls-cert")
    transport.add_argument("--ws", metavar="URL",
                           help="AMQP over WebSocket to this ws:// or wss:// URL (path default /ws/amqp);"
                                " --uri still gives the user, password and vhost")  # fmt: skip
    return parser


def _message_options(routing: bool = True) -> argparse.ArgumentParser:
    """Message options; the routing scenarios make their own exchange, and name their queues
    after --queue."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("-s", "--size", type=int, default=16, help="body size in bytes (default %(default)s)")
    parser.add_argument("-p", "--persistent", action="store_true", help="persistent messages, durable queue")
    parser.add_argument("-c", "--confirm", type=int, default=0, metavar="WINDOW",
                        help="publisher confirms with at most WINDOW unconfirmed (default off)")  # fmt: skip
    if not routing:
        parser.add_argument("-u", "--queue", default="perf-test", help="queue name prefix (default %(default)s)")
        return parser
    parser.add_argument("-u", "--queue", default="perf-test", help="queue name; declared, purged and deleted")
    parser.add_argument("--queue-type", default="", metavar="TYPE",
                        help="declare the queue with this x-queue-type, such as quorum (default: none)")  # fmt: skip
    parser.add_argument("-e", "--exchange", default="", help="publish through this exchange (direct, declared)")
    parser.add_argument("-k", "--routing-key", help="binding and routing key (default: the queue name)")
    return parser


def _consumer_options() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("-a", "--autoack", action="store_true", help="no-ack consumers (default: manual acks)")
    parser.add_argument("-P", "--prefetch", type=int, default=1000, help="manual acks' prefetch (default %(default)s)")
    return parser


def _parallel_options(producers: bool, consumers: bool) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False)
    if producers:
        parser.add_argument("-x", "--producers", type=int, default=1, help="producer processes (default 1)")
    if consumers:
        parser.add_argument("-y", "--consumers", type=int, default=1, help="consumer processes (default %(default)s)")
    return parser


def _timed_options(default_rate: float) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("-z", "--duration", type=float, default=10.0, help="seconds to publish (default 10)")
    parser.add_argument("-r", "--rate", type=float, default=default_rate,
                        help=f"total publish rate limit in msg/s, 0 = none (default {default_rate:g})")  # fmt: skip
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lavin-perf", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="scenario", required=True, metavar="SCENARIO")
    common, message, consumer = _common_options(), _message_options(), _consumer_options()

    throughput = commands.add_parser(
        "throughput",
        parents=[common, message, consumer, _parallel_options(True, True), _timed_options(0)],
        help="producers and consumers on one queue",
    )
    throughput.add_argument("-C", "--count", type=int, default=0,
                            help="messages per producer instead of --duration")  # fmt: skip
    throughput.add_argument("-V", "--verify", action="store_true",
                            help="count lost, duplicated and out-of-order messages")  # fmt: skip

    publish_only = commands.add_parser(
        "publish-only", parents=[common, message, _parallel_options(True, False), _timed_options(0)],
        help="producers only; the queue fills up",
    )  # fmt: skip
    publish_only.add_argument("-C", "--count", type=int, default=0, help="messages per producer instead of --duration")

    consume_only_parser = commands.add_parser(
        "consume-only", parents=[common, message, consumer, _parallel_options(True, True)],
        help="preload a queue, then time how fast consumers drain it",
    )  # fmt: skip
    consume_only_parser.add_argument("-C", "--count", type=int, default=100_000,
                                     help="messages to preload (default 100000)")  # fmt: skip

    commands.add_parser(
        "latency", parents=[common, message, consumer, _timed_options(1000)],
        help="publish-to-delivery latency percentiles at a fixed rate, 1 producer and 1 consumer",
    )  # fmt: skip

    connections = commands.add_parser("connections", parents=[common],
                                      help="open idle connections; the broker's RSS per connection")  # fmt: skip
    connections.add_argument("-C", "--count", type=int, default=1000, help="connections (default 1000)")

    churn = commands.add_parser("queue-churn", parents=[common], help="declare+bind, then delete, non-durable queues")
    churn.add_argument("-C", "--count", type=int, default=1000, help="queues (default 1000)")
    _add_routing_scenarios(commands, common, consumer)
    _add_backlog_scenarios(commands, common)
    add_scale_scenarios(commands, common)
    return parser


def _counting_options(count_help: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("-C", "--count", type=int, default=0, help=count_help)
    parser.add_argument("-V", "--verify", action="store_true",
                        help="count lost, duplicated and out-of-order messages, per queue")  # fmt: skip
    return parser


def _add_routing_scenarios(commands: Any, common: argparse.ArgumentParser, consumer: argparse.ArgumentParser) -> None:
    routed = [common, _message_options(routing=False), consumer, _timed_options(0),
              _counting_options("messages per producer instead of --duration")]  # fmt: skip
    one_each = "consumer processes; each holds many connections (default 2)"

    fanout_parser = commands.add_parser("fanout", parents=[*routed, _parallel_options(True, False)],
                                        help="one fanout exchange to many queues, a consumer each")  # fmt: skip
    fanout_parser.add_argument("--queues", type=int, default=100, help="queues bound (default 100)")
    fanout_parser.add_argument("--processes", type=int, default=2, help=one_each)

    topic_parser = commands.add_parser("topic", parents=[*routed, _parallel_options(True, False)],
                                       help="a topic exchange with many wildcard bindings")  # fmt: skip
    topic_parser.add_argument("--queues", type=int, default=10, help="queues, a consumer each (default 10)")
    topic_parser.add_argument("--bindings", type=int, default=10_000,
                              help="patterns with * and #, two per published key (default 10000)")  # fmt: skip
    topic_parser.add_argument("--processes", type=int, default=2, help=one_each)

    many_queues = commands.add_parser("many-queues", parents=[*routed, _parallel_options(True, False)],
                                      help="queues with one consumer each, the messages spread evenly")  # fmt: skip
    many_queues.add_argument("--queues", type=int, default=10_000, help="queues (default 10000)")
    many_queues.add_argument("--connections", type=int, default=100,
                             help="consumer connections the queues are spread over (default 100)")  # fmt: skip
    many_queues.add_argument("--processes", type=int, default=2, help=one_each)

    clients = commands.add_parser(
        "many-connections",
        parents=[common, _message_options(routing=False), consumer,
                 _counting_options("messages per connection instead of --duration")],
        help="many producer connections at a fixed rate each, a consumer connection (and queue) each",
    )  # fmt: skip
    clients.add_argument("-z", "--duration", type=float, default=10.0, help="seconds to publish (default 10)")
    clients.add_argument("--connections", type=int, default=1000,
                         help="producer connections, as many queues and consumers (default 1000)")  # fmt: skip
    clients.add_argument("--rate-per-connection", type=float, default=100.0, help="msg/s each (default 100)")
    clients.add_argument("--processes", type=int, default=2,
                         help="processes per side over which the connections are spread (default 2)")  # fmt: skip


def _add_backlog_scenarios(commands: Any, common: argparse.ArgumentParser) -> None:
    backlog_parser = commands.add_parser(
        "backlog",
        parents=[common, _message_options(routing=False), _consumer_options(), _parallel_options(False, True)],
        help="fill a durable queue with persistent messages, then time how fast consumers drain it",
    )  # fmt: skip
    backlog_parser.set_defaults(size=65536, prefetch=100, consumers=10)  # on option objects of its own
    backlog_parser.add_argument("--backlog-bytes", type=int, default=10**9,
                                help="bytes of bodies to queue first (default 1 GB)")  # fmt: skip
    backlog_parser.add_argument("--dd-dir", metavar="DIR",
                                help="also time dd writing as much to this directory (the broker's disk)")  # fmt: skip
    backlog_parser.add_argument("-V", "--verify", action="store_true",
                                help="count lost, duplicated and out-of-order messages")  # fmt: skip

    disk = commands.add_parser("disk", parents=[common], help="dd's write rate to a directory: the disk's limit")
    disk.add_argument("--dd-dir", metavar="DIR", required=True, help="where to write (the broker's disk)")
    disk.add_argument("--bytes", type=int, default=2**30, help="bytes to write (default 1 GiB)")


def uses_tls(args: argparse.Namespace) -> bool:
    if args.ws:
        return bool(args.tls or urlsplit(args.ws).scheme == "wss")
    return bool(args.tls or urlsplit(args.uri).scheme == "amqps")


def tls_context(args: argparse.Namespace) -> ssl.SSLContext:
    """How to check the broker: against --tls-ca-cert (or the system's CAs) and its name,
    or not at all; with --tls-cert, also how to prove who we are."""
    context = ssl.create_default_context(cafile=args.tls_ca_cert)
    if args.tls_no_verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if args.tls_cert:
        context.load_cert_chain(args.tls_cert, args.tls_key)
    return context


def broker_address(args: argparse.Namespace) -> Address:
    """The broker as --uri, --tls* and --ws describe it."""
    uri = args.uri
    if args.tls and uri.startswith("amqp://"):
        uri = "amqps://" + uri.removeprefix("amqp://")
    address = replace(Address.from_uri(uri), tls=tls_context(args) if uses_tls(args) else None)
    if not args.ws:
        return address
    websocket = urlsplit(args.ws)
    return replace(
        address,
        host=websocket.hostname or address.host,
        port=websocket.port or WEBSOCKET_PORTS[websocket.scheme],
        websocket_path=websocket.path or DEFAULT_WEBSOCKET_PATH,
    )


def load_spec(args: argparse.Namespace, stamp: Stamp, producers: int) -> LoadSpec:
    rate = getattr(args, "rate", 0.0)
    return LoadSpec(
        address=broker_address(args),
        queue=args.queue,
        queue_type=getattr(args, "queue_type", ""),
        exchange=getattr(args, "exchange", ""),
        routing_key=getattr(args, "routing_key", None) or args.queue,
        size=args.size,
        persistent=args.persistent,
        confirm=args.confirm,
        rate=rate / producers if rate else 0.0,
        count=getattr(args, "count", 0),
        autoack=getattr(args, "autoack", True),
        prefetch=getattr(args, "prefetch", 0),
        stamp=stamp,
    )


def run_scenario(args: argparse.Namespace) -> dict[str, Any]:
    progress = None if args.json else sys.stderr
    scenario = args.scenario
    if scenario == "connections":
        return idle_connections(broker_address(args), args.count, args.broker_pid)
    if scenario == "queue-churn":
        return queue_churn(broker_address(args), args.count, args.broker_pid)
    if scenario in SCALE_SCENARIOS:
        return run_scale(args, progress)
    if scenario == "consume-only":
        spec = load_spec(args, Stamp.NONE, args.producers)
        return consume_only(spec, args.producers, args.consumers, args.count, args.broker_pid, progress)
    if scenario == "latency":
        spec = load_spec(args, Stamp.CLOCK, 1)
        return message_flow(spec, 1, 1, args.duration, args.broker_pid, progress)
    if scenario == "disk":
        return {"dd": dd_write(args.dd_dir, args.bytes)}
    if scenario == "backlog":
        spec = load_spec(args, Stamp.SEQUENCE if args.verify else Stamp.NONE, 1)
        return backlog(spec, args.backlog_bytes, args.consumers, args.dd_dir, args.broker_pid, progress)
    if scenario in FLEET_SCENARIOS:
        return run_routed(args, progress)
    consumers = args.consumers if scenario == "throughput" else 0
    stamp = Stamp.SEQUENCE if getattr(args, "verify", False) else Stamp.NONE
    spec = load_spec(args, stamp, args.producers)
    duration = 0.0 if spec.count else args.duration
    return message_flow(spec, args.producers, consumers, duration, args.broker_pid, progress)


def run_scale(args: argparse.Namespace, progress: TextIO | None) -> dict[str, Any]:
    """queued-messages, queue-count and bindings: LavinMQ's scale claims."""
    if args.scenario == "queued-messages":
        spec = replace(load_spec(args, Stamp.NONE, args.producers), count=args.count // args.producers)
        return queued_messages(spec, args.producers, args.keep, args.broker_pid, progress)
    run = queue_count if args.scenario == "queue-count" else bindings
    return run(broker_address(args), args.count, args.durable, args.broker_pid)


def run_routed(args: argparse.Namespace, progress: TextIO | None) -> dict[str, Any]:
    """fanout, topic, many-queues and many-connections: a topology and fleets of connections."""
    prefix = args.queue
    duration = 0.0 if args.count else args.duration
    if args.scenario == "many-connections":
        # Latency stamps come for free unless the bodies carry sequence stamps instead.
        stamp = Stamp.SEQUENCE if args.verify else Stamp.CLOCK if args.size >= CLOCK_STAMP.size else Stamp.NONE
        spec = replace(load_spec(args, stamp, 1), rate=args.rate_per_connection)
        topology = queue_per_key(prefix, args.connections)
        processes = min(args.processes, args.connections)
        producers = spread(topology.publish_keys, args.connections, processes)
        consumers = spread(topology.queues, args.connections, processes)
        return routed_flow(spec, topology, consumers, producers, duration, args.broker_pid, progress)
    spec = load_spec(args, Stamp.SEQUENCE if args.verify else Stamp.NONE, args.producers)
    topology: Topology
    if args.scenario == "fanout":
        topology, connections = fanout(prefix, args.queues), args.queues  # one consumer connection per queue
    elif args.scenario == "topic":
        topology, connections = topic(prefix, args.queues, args.bindings), args.queues
    else:
        topology, connections = queue_per_key(prefix, args.queues), min(args.connections, args.queues)
    consumers = spread(topology.queues, connections, min(args.processes, connections))
    return routed_flow(spec, topology, consumers, args.producers, duration, args.broker_pid, progress)


def tls_session(address: Address) -> dict[str, str]:
    """The TLS version and cipher the broker agrees to, from one more connection."""
    with connect(address) as connection:
        sock = connection.sock
        if not isinstance(sock, ssl.SSLSocket):
            return {}
        cipher = sock.cipher()
        return {"version": sock.version() or "", "cipher": cipher[0] if cipher else ""}


def check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.ws and urlsplit(args.ws).scheme not in WEBSOCKET_PORTS:
        parser.error("--ws needs a ws:// or wss:// URL")
    if not uses_tls(args) and (args.tls_ca_cert or args.tls_no_verify or args.tls_cert):
        parser.error("the --tls-* options need TLS: --tls, an amqps:// --uri or a wss:// --ws")
    if args.tls_key and not args.tls_cert:
        parser.error("--tls-key goes with --tls-cert")
    if args.scenario == "connections" and args.broker_pid is None:
        parser.error("connections needs --broker-pid to read the broker's RSS")
    if args.scenario == "many-connections" and args.confirm:
        parser.error(f"{args.scenario} does not wait for publisher confirms")
    if args.scenario in FLEET_SCENARIOS and (args.ws or uses_tls(args)):
        parser.error(f"{args.scenario} runs over plain TCP only: its workers wait on many sockets with select")
    for name in ("queues", "connections", "processes", "bindings", "rate_per_connection", "backlog_bytes"):
        if getattr(args, name, 1) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    for name in ("producers", "consumers"):
        if getattr(args, name, 1) < 1:
            parser.error(f"--{name} must be at least 1")
    if getattr(args, "count", 0) < 0:
        parser.error("--count must not be negative")
    if getattr(args, "verify", False) and args.size < SEQUENCE_STAMP.size:
        parser.error(f"--verify needs --size of at least {SEQUENCE_STAMP.size}")
    if args.scenario == "latency" and args.size < CLOCK_STAMP.size:
        parser.error(f"latency needs --size of at least {CLOCK_STAMP.size}")
    if args.scenario == "latency" and args.rate <= 0:
        parser.error("latency needs a --rate")
    check_scale_arguments(parser, args)


def _flatten(result: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    lines: list[tuple[str, Any]] = []
    for key, value in result.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            lines += _flatten(value, f"{name}.")
        else:
            lines.append((name, value))
    return lines


def _format(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
    return str(value)


def print_text(scenario: str, result: dict[str, Any]) -> None:
    lines = _flatten(result)
    width = max(len(name) for name, _ in lines)
    print(scenario)
    for name, value in lines:
        print(f"  {name:<{width}}  {_format(value)}")
    busiest = result.get("generator_cpu", {}).get("busiest_worker_pct", 0.0)
    if busiest > BUSY_WORKER_PCT:
        print(f"  note: a lavin-perf worker used {busiest:.0f}% of a core; the generator may be the limit")


def problems(result: dict[str, Any]) -> int:
    """Messages lost, duplicated or out of order (0 when not verifying), or missing from or
    extra in the queue that queued-messages filled."""
    verified: int = sum(result.get("verify", {}).values())
    return verified + (abs(result["queued"] - result["published"]) if "queued" in result else 0)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_arguments(parser, args)
    try:
        result = run_scenario(args)
        if uses_tls(args):
            result["tls"] = tls_session(broker_address(args))
    except (OSError, AmqpError, WorkerFailed) as exc:  # TimeoutError and ConnectionError are OSErrors
        print(f"lavin-perf: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    if args.json:
        settings = {key: value for key, value in vars(args).items() if key not in ("json", "uri", "scenario")}
        print(json.dumps({"scenario": args.scenario, "settings": settings, **result}))
    else:
        print_text(args.scenario, result)
    return 1 if problems(result) else 0


if __name__ == "__main__":
    sys.exit(main())
