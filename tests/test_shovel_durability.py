"""No loss under kill -9: a shovel with `ack-mode` on-confirm pulls 100,000 persistent
messages from a durable queue on broker A into a durable queue on broker B while B, then A,
is killed with SIGKILL and started again on the same data and ports.

The shovel lives on B (its parameter is stored there), so killing B kills the shovel too; it
starts again from the stored parameter when B comes back, and again after A comes back
(reconnect-delay 1). Every number must arrive at least once; duplicates are what
at-least-once allows (a confirm lost with the broker that sent it) and are only reported.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

import requests
from broker_process import BrokerFactory, BrokerProcess
from lavin.client.wire import CHANNEL, connect
from pamqp import commands

MESSAGES = 100_000
BATCH = 10_000  # published between waits for the confirms
PERSISTENT = commands.Basic.Properties(delivery_mode=2)
SOURCE, DESTINATION = "shovel-durability-src", "shovel-durability-dest"
WAIT = 30.0  # seconds any single wait may take
AUTH = ("guest", "guest")


def declare(broker: BrokerProcess, queue: str) -> int:
    """Declare the durable queue (if it is not there); its ready message count."""
    with connect(broker.url, WAIT) as connection:
        declared = connection.call(commands.Queue.Declare(queue=queue, durable=True), commands.Queue.DeclareOk, CHANNEL)
        return declared.message_count


def publish_numbers(broker: BrokerProcess, queue: str, count: int) -> None:
    """Publish bodies b"0" ... b"count-1", persistent, and wait until every one is confirmed."""
    with connect(broker.url, WAIT) as connection:
        connection.call(commands.Confirm.Select(), commands.Confirm.SelectOk, CHANNEL)
        for start in range(0, count, BATCH):
            stop = min(start + BATCH, count)
            connection.publish(queue, (b"%d" % number for number in range(start, stop)), PERSISTENT)
            confirmed = start
            while confirmed < stop:
                reply = connection.recv_frame(WAIT)
                assert reply is not None, "the broker closed the publisher"
                assert isinstance(reply.frame, commands.Basic.Ack), f"not confirmed: {reply.frame}"
                confirmed = reply.frame.delivery_tag


def read_all(broker: BrokerProcess, queue: str, count: int) -> list[bytes]:
    """The bodies of the `count` messages in the queue, consumed and acked."""
    bodies: list[bytes] = []
    with connect(broker.url, WAIT) as connection:
        connection.qos(2000)
        connection.consume(queue)
        while len(bodies) < count:
            delivery = connection.next_delivery()
            bodies.append(delivery.body)
            if len(bodies) % 1000 == 0 or len(bodies) == count:
                connection.ack(delivery.delivery_tag, multiple=True)
    return bodies


def wait_for(check: Callable[[], bool], what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_on_confirm_shovel_loses_nothing_when_both_brokers_are_killed(broker_factory: BrokerFactory) -> None:
    source, destination = broker_factory(), broker_factory()
    declare(source, SOURCE)
    began = time.monotonic()
    publish_numbers(source, SOURCE, MESSAGES)
    published = time.monotonic()
    declare(destination, DESTINATION)
    value = {
        "src-uri": source.url,
        "src-queue": SOURCE,
        "dest-uri": "amqp://",
        "dest-queue": DESTINATION,
        "ack-mode": "on-confirm",
        "reconnect-delay": 1,
    }
    url = f"{destination.http_url}/api/parameters/shovel/%2F/durable"
    assert requests.put(url, json={"value": value}, auth=AUTH, timeout=10).status_code == 201

    # Kill the destination (and the shovel in it) a fifth of the way through.
    wait_for(lambda: declare(destination, DESTINATION) >= MESSAGES // 5, "a fifth to arrive", WAIT)
    destination.kill()
    destination.start()
    arrived_after_restart = declare(destination, DESTINATION)
    # Then the source, once the restarted shovel has moved a good part more.
    wait_for(
        lambda: declare(destination, DESTINATION) >= arrived_after_restart + MESSAGES // 5,
        "the restarted shovel to move more",
        WAIT,
    )
    left_at_source = declare(source, SOURCE)
    source.kill()
    source.start()
    assert left_at_source > 0, "the source was killed after the transfer ended: nothing was tested"

    wait_for(lambda: declare(source, SOURCE) == 0, "the source queue to empty", 60)
    # Nothing ready at the source; wait for the last confirmed batch to be acked there too.
    wait_for(lambda: _unacked(source, SOURCE) == 0, "the shovel's last acks", WAIT)
    moved = time.monotonic()
    held = declare(destination, DESTINATION)
    numbers = Counter(int(body) for body in read_all(destination, DESTINATION, held))
    missing = set(range(MESSAGES)) - numbers.keys()
    duplicates = sum(numbers.values()) - len(numbers)
    print(
        f"published {MESSAGES} in {published - began:.1f} s; shovelled through two kills in "
        f"{moved - published:.1f} s; {duplicates} duplicates, {len(missing)} missing"
    )
    assert not missing, f"{len(missing)} messages lost, e.g. {sorted(missing)[:10]}"
    assert numbers.keys() <= set(range(MESSAGES))
    assert "Traceback" not in destination.output and "Traceback" not in source.output


def _unacked(broker: BrokerProcess, queue: str) -> int:
    reply = requests.get(f"{broker.http_url}/api/queues/%2F/{queue}", auth=AUTH, timeout=10).json()
    return int(reply.get("messages_unacknowledged", 0))
