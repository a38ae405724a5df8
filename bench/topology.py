"""The exchanges, queues and bindings of lavin-perf's routing scenarios, and the routing keys
their producers publish to in turn."""

from __future__ import annotations

from dataclasses import dataclass

from lavin.bench.fleet import pipelined
from lavin.client.wire import CHANNEL, Address, connect
from pamqp import commands


@dataclass(frozen=True)
class Topology:
    exchange: str  # "" is the default exchange
    exchange_type: str
    queues: tuple[str, ...]
    bindings: tuple[tuple[str, str], ...]  # (queue, binding key)
    publish_keys: tuple[str, ...]  # all the same length: producers write them in turn
    copies: int  # queues each message reaches


def numbered(prefix: str, count: int) -> tuple[str, ...]:
    width = len(str(count - 1))
    return tuple(f"{prefix}-{index:0{width}d}" for index in range(count))


def fanout(prefix: str, queues: int) -> Topology:
    """One fanout exchange bound to every queue: each message goes to all of them."""
    names = numbered(prefix, queues)
    return Topology(f"{prefix}-fanout", "fanout", names, tuple((name, "") for name in names), ("",), queues)


def topic(prefix: str, queues: int, bindings: int) -> Topology:
    """`bindings` wildcard patterns over `queues` queues, two per published key: `*.Q.J.*` and
    `k.Q.J.#` both send `k.Q.J.x` to queue Q and nothing else matches it, so each message is
    delivered once. The keys cycle over the queues: key m goes to queue m % queues."""
    per_queue = max(1, bindings // (2 * queues))
    queue_width, key_width = len(str(queues - 1)), len(str(per_queue - 1))
    names = numbered(prefix, queues)
    keys = [(queue, f"{queue:0{queue_width}d}.{number:0{key_width}d}")
            for number in range(per_queue) for queue in range(queues)]  # fmt: skip
    patterns = tuple(
        (names[queue], pattern) for queue, middle in keys for pattern in (f"*.{middle}.*", f"k.{middle}.#")
    )
    return Topology(f"{prefix}-topic", "topic", names, patterns, tuple(f"k.{middle}.x" for _, middle in keys), 1)


def queue_per_key(prefix: str, queues: int) -> Topology:
    """Queues reached through the default exchange by their names, one after the other."""
    names = numbered(prefix, queues)
    return Topology("", "direct", names, (), names, 1)


def declare_topology(address: Address, topology: Topology, durable: bool) -> None:
    """Declare (and empty) the queues, the exchange and the bindings, many methods per write."""
    with connect(address) as connection:
        declares = [commands.Queue.Declare(queue=name, durable=durable) for name in topology.queues]
        pipelined(connection, declares, commands.Queue.DeclareOk)
        pipelined(connection, [commands.Queue.Purge(queue=name) for name in topology.queues], commands.Queue.PurgeOk)
        if not topology.exchange:
            return
        exchange = commands.Exchange.Declare(
            exchange=topology.exchange, exchange_type=topology.exchange_type, durable=durable
        )
        connection.call(exchange, commands.Exchange.DeclareOk, CHANNEL)
        binds = [
            commands.Queue.Bind(queue=queue, exchange=topology.exchange, routing_key=key)
            for queue, key in topology.bindings
        ]
        pipelined(connection, binds, commands.Queue.BindOk)


def delete_topology(address: Address, topology: Topology) -> None:
    with connect(address) as connection:
        deletes = [commands.Queue.Delete(queue=name) for name in topology.queues]
        pipelined(connection, deletes, commands.Queue.DeleteOk)
        if topology.exchange:
            connection.call(commands.Exchange.Delete(exchange=topology.exchange), commands.Exchange.DeleteOk, CHANNEL)
