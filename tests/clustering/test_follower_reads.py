"""Stream reads served by an in-sync follower: a client that sends the client property
`read_from_follower: true` reads stream queues from the follower's replica (the leader
never sees that connection); every other client is passed through to the leader as before.
One two-node cluster for the module: a leader and one follower."""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest
import requests
from broker_process import BrokerProcess
from clustering.cluster import Cluster
from helpers import eventually
from lavin.client import wire
from lavin.storage.streams.stream_replica import StreamReplica, find_stream
from lavin.testing.etcd_server import MISSING_REASON, EtcdServer
from pika.exceptions import AMQPConnectionError, ChannelClosedByBroker, ConnectionClosedByBroker
from pyspark_lavin.offsets import OffsetRange
from pyspark_lavin.options import parse_options
from pyspark_lavin.range_reader import read_deliveries
from pyspark_lavin.stream_info import fetch_stream_bounds
from test_unix_and_proxy import Relay, proxy_ini, proxy_v1

pytestmark = pytest.mark.timeout(120)
GUEST = ("guest", "guest")
STREAM = "exports"
CLASSIC = "classic-q"
READ_HERE = {"read_from_follower": True}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    if not EtcdServer.available():
        pytest.skip(MISSING_REASON)
    root = tmp_path_factory.mktemp("follower-reads")
    etcd = EtcdServer(root / "etcd-server")
    etcd.start()
    nodes = Cluster(root, etcd.endpoint, size=2)
    nodes.nodes[0].extra_args += ("--config", str(proxy_ini(root, "127.0.0.1")))  # the leader takes PROXY headers
    try:
        nodes.nodes[0].start()
        nodes.leader()
        nodes.nodes[1].start()
        nodes.wait_in_sync(2)
        follower = nodes.nodes[1]
        eventually(lambda: knows_it_is_in_sync(follower), timeout=15)  # it reads the ISR every second
        yield nodes
    finally:
        nodes.stop()
        etcd.kill()


def knows_it_is_in_sync(node: BrokerProcess) -> bool:
    listed = requests.get(f"{node.http_url}/api/nodes", auth=GUEST, timeout=5).json()
    name = Cluster.name_of(node)
    return any(entry["name"] == name and entry["in_sync"] for entry in listed)


def read_sessions(node: BrokerProcess) -> int:
    """How many read sessions the node opened (it logs each)."""
    return node.output.count("lavin.clustering.read_session: read session")


def leader_of(cluster: Cluster) -> BrokerProcess:
    return cluster.nodes[0]


def follower_of(cluster: Cluster) -> BrokerProcess:
    return cluster.nodes[1]


def connect(node: BrokerProcess, name: str, *, password: str = "guest", reads: bool = True) -> pika.BlockingConnection:
    properties: dict[str, Any] = {"connection_name": name, **(READ_HERE if reads else {})}
    return pika.BlockingConnection(
        pika.ConnectionParameters(
            "127.0.0.1",
            node.port,
            credentials=pika.PlainCredentials("guest", password),
            client_properties=properties,
            connection_attempts=1,
            socket_timeout=5,
        )
    )


def publish(node: BrokerProcess, queue: str, bodies: list[bytes], name: str = "publisher") -> None:
    connection = connect(node, name, reads=False)
    channel = connection.channel()
    channel.confirm_delivery()
    for body in bodies:
        channel.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2))
    connection.close()


@pytest.fixture(scope="module")
def stream(cluster: Cluster) -> list[bytes]:
    """A stream queue and a classic one, declared on the leader; 50 messages in the stream."""
    connection = connect(leader_of(cluster), "declarer", reads=False)
    channel = connection.channel()
    channel.queue_declare(STREAM, durable=True, arguments={"x-queue-type": "stream"})
    channel.queue_declare(CLASSIC, durable=True)
    connection.close()
    bodies = [f"m{number}".encode() for number in range(50)]
    publish(leader_of(cluster), STREAM, bodies)
    return bodies


def connection_names(node: BrokerProcess) -> set[str]:
    listed = requests.get(f"{node.http_url}/api/connections", auth=GUEST, timeout=5).json()
    return {connection.get("user_provided_name", "") for connection in listed}


def consume(
    connection: pika.BlockingConnection, count: int, arguments: dict[str, Any], timeout: float = 10
) -> list[tuple[bytes, int]]:
    """`count` deliveries of STREAM: their bodies and x-stream-offset headers."""
    channel = connection.channel()
    channel.basic_qos(prefetch_count=10)
    received: list[tuple[bytes, int]] = []

    def on_message(ch: Any, method: Any, properties: pika.BasicProperties, body: bytes) -> None:
        received.append((body, (properties.headers or {})["x-stream-offset"]))
        ch.basic_ack(method.delivery_tag)

    channel.basic_consume(STREAM, on_message, arguments=arguments)
    deadline = time.monotonic() + timeout
    while len(received) < count and time.monotonic() < deadline:
        connection.process_data_events(time_limit=0.1)
    return received


def test_a_read_client_reads_a_stream_on_the_follower_and_follows_its_tail(
    cluster: Cluster, stream: list[bytes]
) -> None:
    leader, follower = leader_of(cluster), follower_of(cluster)
    reader = connect(follower, "reader")
    received = consume(reader, len(stream), {"x-stream-offset": "first"})
    assert [body for body, _ in received] == stream
    assert [offset for _, offset in received] == list(range(received[0][1], received[0][1] + len(stream)))
    later = [f"later{number}".encode() for number in range(20)]
    publish(leader, STREAM, later)
    deadline = time.monotonic() + 10
    while len(received) < len(stream) + len(later) and time.monotonic() < deadline:
        reader.process_data_events(time_limit=0.1)
    assert [body for body, _ in received] == stream + later
    # Served by the follower: the leader does not know the reader; a client without the
    # property goes through the follower to the leader, and may publish there.
    passed = connect(follower, "passed-through", reads=False)
    passed.channel().queue_declare("through-the-follower", durable=True)
    names = eventually(lambda: (found := connection_names(leader)) and "passed-through" in found and found)
    assert "reader" not in names
    publish(follower, "through-the-follower", [b"hello"], name="publisher-via-follower")
    passed.close()
    reader.close()


def test_a_read_session_refuses_what_only_the_leader_serves(cluster: Cluster, stream: list[bytes]) -> None:
    leader, follower = leader_of(cluster), follower_of(cluster)
    for attempt in (
        lambda channel: channel.basic_publish("amq.direct", "key", b"x"),
        lambda channel: channel.queue_declare("new-queue", durable=True),
        lambda channel: channel.exchange_declare("new-exchange", "fanout"),
    ):
        connection = connect(follower, "refused")
        with pytest.raises(ConnectionClosedByBroker) as closed:
            attempt(connection.channel())
            connection.process_data_events(time_limit=1)
        assert closed.value.reply_code == 540
        assert f"publish through the leader at 127.0.0.1:{leader.port}" in closed.value.reply_text
    with pytest.raises(AMQPConnectionError) as refused:
        connect(follower, "wrong-password", password="wrong")
    assert "ACCESS_REFUSED" in repr(refused.value)
    connection = connect(follower, "errors")
    for queue, code in ((CLASSIC, 404), ("missing-q", 404)):
        channel = connection.channel()
        channel.basic_qos(prefetch_count=10)
        with pytest.raises(ChannelClosedByBroker) as channel_closed:
            channel.basic_consume(queue, lambda *_: None)
        assert channel_closed.value.reply_code == code
    channel = connection.channel()
    with pytest.raises(ChannelClosedByBroker) as no_prefetch:
        channel.basic_consume(STREAM, lambda *_: None)
    assert no_prefetch.value.reply_code == 406
    assert "consumer prefetch count is not set" in no_prefetch.value.reply_text
    channel = connection.channel()
    with pytest.raises(ChannelClosedByBroker) as bad_offset:
        channel.basic_qos(prefetch_count=10)
        channel.basic_consume(STREAM, lambda *_: None, arguments={"x-stream-offset": "yesterday"})
    assert bad_offset.value.reply_code == 406
    assert "invalid_stream_offset_arg" in bad_offset.value.reply_text
    channel = connection.channel()
    assert channel.queue_declare(STREAM, passive=True).method.message_count >= len(stream)
    with pytest.raises(ChannelClosedByBroker) as not_found:
        channel.queue_declare("missing-q", passive=True)
    assert not_found.value.reply_code == 404
    connection.close()


def test_garbage_after_a_read_login_closes_that_connection_only(cluster: Cluster, stream: list[bytes]) -> None:
    follower = follower_of(cluster)
    for garbage in (b"\x01\x00\x00\xff\xff\xff\xff" + b"x" * 64, b"\x07\x00\x00\x00\x00\x00\x02ab\xce"):
        with socket.create_connection(("127.0.0.1", follower.port), timeout=5) as raw:
            raw.sendall(b"AMQP\x00\x00\x09\x01")
            assert raw.recv(4096)  # connection.start
            raw.sendall(garbage)
            raw.settimeout(5)
            while raw.recv(4096):  # until the follower closes it
                pass
    for garbage in (b"\x01\x00\x01\x00\x00\x00\x03abc\xce", b"\x09" * 64):  # inside a read session
        session = wire.connect(f"amqp://guest:guest@127.0.0.1:{follower.port}/%2F", 5, client_properties=READ_HERE)
        session.stream.sendall(garbage)
        while session.stream.recv(4096):
            pass
        session.stream.close()
    assert follower.output.count("closing read session") >= 2  # the follower served them, and closed them
    reader = connect(follower, "after-garbage")
    assert len(consume(reader, 5, {"x-stream-offset": "first"})) >= 5
    reader.close()
    assert "Traceback" not in follower.output, follower.output[follower.output.find("Traceback") - 300 :][:3000]


def test_stream_info_and_a_range_read_on_the_follower(cluster: Cluster, stream: list[bytes]) -> None:
    leader, follower = leader_of(cluster), follower_of(cluster)
    leader_url = f"amqp://guest:guest@127.0.0.1:{leader.port}/%2F"
    follower_url = f"amqp://guest:guest@127.0.0.1:{follower.port}/%2F"
    on_leader = fetch_stream_bounds(leader_url, STREAM, 5)
    served_before = read_sessions(follower)
    on_follower = eventually(
        lambda: (bounds := fetch_stream_bounds(follower_url, STREAM, 5, READ_HERE)) == on_leader and bounds
    )
    assert on_follower.next - on_follower.first >= len(stream)
    options = parse_options({"uri": follower_url, "queue": STREAM, "readFromFollower": "true", "prefetch": "7"})
    assert options.client_properties == READ_HERE
    read = list(read_deliveries(options, OffsetRange(on_follower.first, on_follower.next)))
    assert [offset for offset, _ in read] == list(range(on_follower.first, on_follower.next))
    assert [delivery.body for _, delivery in read][: len(stream)] == stream
    assert read_sessions(follower) >= served_before + 2  # the follower served both, not the leader


def test_a_client_the_follower_does_not_answer_is_passed_to_the_leader_whole(
    cluster: Cluster, stream: list[bytes]
) -> None:
    """A PROXY protocol header is not AMQP's: the follower passes it on, and the leader,
    which trusts the follower's address, takes the client for the one the header names."""
    leader, follower = leader_of(cluster), follower_of(cluster)
    with (
        Relay(("127.0.0.1", follower.port), proxy_v1("192.0.2.45", 40045)) as relay,
        pytest.raises(pika.exceptions.ProbableAuthenticationError, match="403"),
    ):
        pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", relay.port, connection_attempts=1))
    eventually(lambda: "login of user 'guest' from 192.0.2.45 refused" in leader.output)


def stream_directory(node: BrokerProcess) -> Path:
    directory = find_stream(node.data_dir, "/", STREAM)
    assert directory is not None
    return directory


def test_a_follower_shows_only_what_every_in_sync_replica_has(tmp_path: Path, etcd: EtcdServer) -> None:
    """With one in-sync follower stopped, the other has the new messages on disk, but does
    not show them: the leader could die and the stopped one be elected without them."""
    cluster = Cluster(tmp_path, etcd.endpoint)
    leader, reading, stalled = cluster.nodes
    try:
        leader.start()
        cluster.leader()
        reading.start()
        stalled.start()
        cluster.wait_in_sync(3)
        eventually(lambda: knows_it_is_in_sync(reading), timeout=15)
        connection = connect(leader, "declarer", reads=False)
        connection.channel().queue_declare(STREAM, durable=True, arguments={"x-queue-type": "stream"})
        connection.close()
        publish(leader, STREAM, [b"before"])
        reader = connect(reading, "reader")
        assert [body for body, _ in consume(reader, 1, {"x-stream-offset": "first"})] == [b"before"]
        assert stalled.pid is not None
        os.kill(stalled.pid, signal.SIGSTOP)
        try:
            unconfirmed = connect(leader, "unconfirmed", reads=False)
            channel = unconfirmed.channel()
            for number in range(5):
                channel.basic_publish("", STREAM, f"new{number}".encode(), pika.BasicProperties(delivery_mode=2))
            on_disk = StreamReplica(stream_directory(reading))
            deadline = time.monotonic() + 2
            while on_disk.refresh() or on_disk.next_offset < 6:  # the reader's node has them all
                assert time.monotonic() < deadline, "the new messages did not reach the reading follower"
                time.sleep(0.01)
            on_disk.close()
            # Within the 3 s after which the stopped follower leaves the ISR: only what all have.
            shown = consume(reader, 6, {"x-stream-offset": "first"}, timeout=0.5)
            still_in_sync = Cluster.name_of(stalled) in cluster.in_sync()
            assert still_in_sync, "the stopped follower left the ISR too soon for this test (a slow machine)"
            assert [body for body, _ in shown] == [b"before"]
        finally:
            os.kill(stalled.pid, signal.SIGCONT)
        everything = consume(reader, 6, {"x-stream-offset": "first"})
        assert [body for body, _ in everything] == [b"before"] + [f"new{number}".encode() for number in range(5)]
        unconfirmed.close()
        reader.close()
    finally:
        cluster.stop()
