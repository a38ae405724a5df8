"""AMQP over WebSocket on the management listener (GET /ws/amqp, subprotocol "amqp"): a real
browser client library under Node, pika through a WebSocket-to-TCP adapter, flow control
both ways, and bad input, each against a real broker."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fcntl
import json
import os
import select
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pika
import pytest
import requests
from broker_process import BrokerFactory, BrokerProcess
from helpers import (
    Consumer,
    await_message,
    bodies,
    drain,
    eventually,
    numbered,
    open_session,
    process_for,
    process_until,
    unique_name,
)
from lavin.client import wire as wire_client
from pamqp import commands
from tls_certs import write_tls_files
from websocket_bridge import WebSocketBridge

MiB = 1024 * 1024
GUEST = ("guest", "guest")
NODE = shutil.which("node")
NPM = shutil.which("npm")
# Pinned: the test pins the client it was written against. `ws` stands in for the WebSocket
# that Node < 22 lacks.
NODE_PACKAGES = ("@cloudamqp/amqp-client@4.1.1", "ws@8.18.3")
NODE_CLIENT = Path(__file__).resolve().parent / "fixtures" / "websocket_client.mjs"
LOGIN_REFUSED = (
    403,
    "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. For details see the broker logfile.",
)


def websocket_url(broker: BrokerProcess) -> str:
    return broker.http_url.replace("http://", "ws://") + "/ws/amqp"


def connections(broker: BrokerProcess) -> list[dict[str, Any]]:
    reply = requests.get(broker.http_url + "/api/connections", auth=GUEST, timeout=5)
    reply.raise_for_status()
    listed: list[dict[str, Any]] = reply.json()
    return listed


def named(broker: BrokerProcess, name: str) -> list[dict[str, Any]]:
    return [listed for listed in connections(broker) if listed["client_properties"].get("connection_name") == name]


def named_parameters(url: str, name: str) -> pika.URLParameters:
    parameters = pika.URLParameters(url)
    parameters.client_properties = {"connection_name": name}
    return parameters


@pytest.fixture
def bridge(broker: BrokerProcess) -> Iterator[WebSocketBridge]:
    with WebSocketBridge(websocket_url(broker)) as adapter:
        yield adapter


def websocket_session(
    url: str, *messages: bytes, protocols: tuple[str, ...] = ("amqp",)
) -> tuple[bytes, int | None, str | None]:
    """Open a WebSocket, send `messages` as binary messages and return what came back until
    it closed: (binary payloads joined, close code, the subprotocol it agreed)."""

    async def run() -> tuple[bytes, int | None, str | None]:
        received = bytearray()
        async with (
            aiohttp.ClientSession() as session,
            session.ws_connect(url, protocols=protocols, max_msg_size=0) as websocket,
        ):
            try:
                for payload in messages:
                    await websocket.send_bytes(payload)
            except ConnectionError:  # the broker reset the socket while a message was still going out
                return bytes(received), aiohttp.WSCloseCode.ABNORMAL_CLOSURE.value, websocket.protocol
            while (message := await websocket.receive(timeout=10)).type is aiohttp.WSMsgType.BINARY:
                received += message.data
            return bytes(received), websocket.close_code, websocket.protocol

    return asyncio.run(run())


# --------------------------------------------------------------------------- Node


@pytest.fixture(scope="session")
def node_client() -> Path:
    """The Node script, next to its own node_modules in a cache shared by test runs (npm
    installs the pinned packages once)."""
    if NODE is None or NPM is None:
        pytest.skip("the Node WebSocket test needs node and npm on PATH (`make test` installs Debian's nodejs and npm)")
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lavin-tests" / "node-websocket"
    cache.mkdir(parents=True, exist_ok=True)
    installed = cache / ("installed-" + "-".join(NODE_PACKAGES).replace("/", "_"))
    with open(cache / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test run may be installing
        if not installed.exists():
            command = [NPM, "install", "--no-audit", "--no-fund", "--no-save", "--prefix", str(cache), *NODE_PACKAGES]
            try:
                done = subprocess.run(command, capture_output=True, text=True, timeout=300)
            except subprocess.TimeoutExpired:
                pytest.skip(f"npm install {' '.join(NODE_PACKAGES)} timed out")
            if done.returncode != 0:
                pytest.skip(f"npm install {' '.join(NODE_PACKAGES)} failed: {done.stderr.strip()[-500:]}")
            installed.touch()
    script = cache / NODE_CLIENT.name  # ES modules find their packages next to the script
    shutil.copyfile(NODE_CLIENT, script)
    return script


def read_json_line(process: subprocess.Popen[str], timeout: float = 20) -> Any:
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    line = process.stdout.readline() if ready else ""
    if not line:
        process.kill()
        _, errors = process.communicate()
        pytest.fail(f"the Node client said nothing: {errors}")
    return json.loads(line)


def test_node_amqp_client_publishes_and_consumes_over_websocket(broker: BrokerProcess, node_client: Path) -> None:
    queue = unique_name("ws-node")
    count = 25
    assert NODE is not None
    process = subprocess.Popen(
        [NODE, str(node_client), websocket_url(broker), queue, str(count)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert read_json_line(process) == {"connected": True}
        [listed] = named(broker, "node-websocket")
        assert (listed["user"], listed["vhost"], listed["state"]) == ("guest", "/", "running")
        assert listed["port"] == broker.http_port  # it came in on the management listener
        assert process.stdin is not None
        process.stdin.write("go\n")
        process.stdin.flush()
        result = read_json_line(process)
        assert process.wait(10) == 0
    finally:
        if process.poll() is None:
            process.kill()
    assert result == {
        "confirmed": count,
        "received": [f"message {index} #{index}" for index in range(count)],
        "redelivered": 0,
    }
    with open_session(broker.url) as session:
        assert session.channel.queue_declare(queue, passive=True).method.message_count == 0  # all acked
        session.channel.queue_delete(queue)
    assert named(broker, "node-websocket") == []


# --------------------------------------------------------------------------- pika through the adapter


def test_pika_over_websocket_publishes_with_confirms_and_consumes(
    broker: BrokerProcess, bridge: WebSocketBridge
) -> None:
    payloads = numbered("ws", 200)
    with open_session(bridge.url) as session:
        queue = session.declare_queue("ws-pika")
        session.channel.confirm_delivery()
        for payload in payloads:  # each waits for its confirm
            session.channel.basic_publish("", queue, payload, pika.BasicProperties(headers={"via": "websocket"}))
        session.channel.basic_qos(prefetch_count=100)
        consumer = Consumer(session.channel, queue)
        session.channel.basic_ack(consumer.wait_for(100)[99].delivery_tag, multiple=True)  # makes room for the rest
        deliveries = consumer.wait_for(len(payloads))
        session.channel.basic_ack(deliveries[-1].delivery_tag, multiple=True)
        assert consumer.bodies == payloads
        assert {delivery.properties.headers["via"] for delivery in deliveries} == {"websocket"}
        assert session.channel.queue_declare(queue, passive=True).method.message_count == 0
        with open_session(broker.url) as tcp:  # what came over WebSocket is there for TCP clients too
            tcp.channel.basic_publish("", queue, b"from tcp")
        assert consumer.wait_for(len(payloads) + 1)[-1].body == b"from tcp"


def test_a_message_of_several_megabytes_crosses_in_many_frames(broker: BrokerProcess, bridge: WebSocketBridge) -> None:
    body = os.urandom(5 * MiB)  # 40 frames at the default frame_max of 128 KiB
    with open_session(bridge.url) as session:
        queue = session.declare_queue("ws-large")
        session.channel.confirm_delivery()
        session.channel.basic_publish("", queue, body)
        with open_session(broker.url) as tcp:
            assert await_message(tcp.channel, queue, "the large message arrives").body == body
            tcp.channel.basic_publish("", queue, body[::-1])
        assert await_message(session.channel, queue, "the large message comes back").body == body[::-1]


def test_a_burst_of_publishes_arrives_whole_and_in_order(broker: BrokerProcess, bridge: WebSocketBridge) -> None:
    payloads = numbered("burst", 20_000)
    with open_session(bridge.url) as session:
        queue = session.declare_queue("ws-burst")
        for payload in payloads:  # no confirms: as fast as pika writes
            session.channel.basic_publish("", queue, payload)
        session.channel.basic_qos(prefetch_count=1000)
        consumer = Consumer(session.channel, queue, auto_ack=True)
        assert consumer.wait_for(len(payloads), timeout=30) and consumer.bodies == payloads


def test_a_resource_alarm_stops_reading_a_websocket_publisher(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    """Flow control from the broker to the client: a blocked publisher's WebSocket is not
    read, so what it goes on sending is not taken."""
    ini = tmp_path / "alarm.ini"
    ini.write_text("[main]\ndisk_free_limit.absolute = 1000000TB\n")
    broker = broker_factory(["--config", str(ini)])
    queue = unique_name("ws-blocked")
    reasons: list[str] = []
    with WebSocketBridge(websocket_url(broker)) as adapter, open_session(broker.url) as tcp:
        tcp.channel.queue_declare(queue)
        publisher = pika.BlockingConnection(pika.URLParameters(adapter.url))
        publisher.add_on_connection_blocked_callback(lambda _conn, frame: reasons.append(frame.method.reason))
        channel = publisher.channel()
        channel.basic_publish("", queue, b"first")  # content: the broker blocks it after this frame
        process_until(publisher, lambda: bool(reasons), "connection.blocked arrives")
        for payload in numbered("while-blocked", 200):
            channel.basic_publish("", queue, payload)
        process_for(publisher, 1.0)
        # Stored or not, "first" is all it took; consumers go on.
        assert bodies(drain(tcp.channel, queue)) in ([], [b"first"])


def test_a_websocket_client_that_does_not_read_holds_its_deliveries_back(
    broker: BrokerProcess, bridge: WebSocketBridge
) -> None:
    """Flow control from the client to the broker: while the client reads nothing, the broker
    stops delivering to it once its write buffer is full, instead of queueing every message
    in memory; when it reads again, everything arrives."""
    count = 2000
    body = b"x" * 16384  # 32 MiB in all, 256 deliveries (4 MiB) at a time
    with open_session(broker.url) as tcp:
        queue = tcp.declare_queue("ws-slow-reader")
        for _ in range(count):
            tcp.channel.basic_publish("", queue, body)
        client = wire_client.connect(bridge.url)
        bridge.pause_reading()
        client.send(commands.Basic.Consume(queue=queue), channel=wire_client.CHANNEL)
        time.sleep(2)
        state = requests.get(f"{broker.http_url}/api/queues/%2F/{queue}", auth=GUEST, timeout=5).json()
        # Held back: what fits in the socket buffers and the 4 MiB write buffer went out (768
        # messages); without flow control all of them are delivered into the broker's memory.
        assert state["messages_ready"] >= count // 3, {key: state[key] for key in ("messages_ready", "messages")}
        bridge.resume_reading()
        client.expect(commands.Basic.ConsumeOk, channel=wire_client.CHANNEL)
        for _ in range(count):
            delivery = client.next_delivery()
            assert delivery.body == body
            client.ack(delivery.delivery_tag)
        client.close()


# --------------------------------------------------------------------------- bad input


def upgrade_headers(**extra: str) -> dict[str, str]:
    key = base64.b64encode(os.urandom(16)).decode()
    upgrade = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13"}
    return {**upgrade, "Sec-WebSocket-Key": key, **extra}


def test_an_upgrade_that_does_not_offer_amqp_is_refused(broker: BrokerProcess) -> None:
    http_url = broker.http_url + "/ws/amqp"
    reply = requests.get(http_url, headers=upgrade_headers(**{"Sec-WebSocket-Protocol": "mqtt, stomp"}), timeout=5)
    assert reply.status_code == 400
    assert "subprotocol must be 'amqp'" in reply.text and "mqtt, stomp" in reply.text
    assert (
        "WebSocket upgrade from 127.0.0.1:" in broker.output and "refused: the WebSocket subprotocol" in broker.output
    )
    # Offered among others, or not asked for (browsers' `new WebSocket(url)`): accepted. AMQP
    # 0-8 in two messages gets the header of the version spoken, as over TCP.
    version_0_8 = (b"AMQP\x01\x01", b"\x00\x08")
    for offered, agreed in ((("mqtt", "amqp"), "amqp"), ((), None)):
        received, code, protocol = websocket_session(websocket_url(broker), *version_0_8, protocols=offered)
        assert (received, code, protocol) == (wire_client.PROTOCOL_HEADER, 1000, agreed)
    assert requests.get(http_url, timeout=5).status_code == 400  # not an upgrade at all


async def text_after_the_handshake_began(url: str) -> int | None:
    """Send the protocol header, wait for connection.start, send a text message; return the
    close code the broker answers with."""
    async with aiohttp.ClientSession() as session, session.ws_connect(url, protocols=("amqp",)) as websocket:
        await websocket.send_bytes(wire_client.PROTOCOL_HEADER)
        start = await websocket.receive(timeout=10)
        assert start.type is aiohttp.WSMsgType.BINARY and start.data.startswith(b"\x01\x00\x00")
        await websocket.send_str("hello")
        assert (await websocket.receive(timeout=10)).type is aiohttp.WSMsgType.CLOSE
        return websocket.close_code


def test_a_text_message_closes_that_websocket_only(broker: BrokerProcess, bridge: WebSocketBridge) -> None:
    with open_session(bridge.url) as over_websocket, open_session(broker.url) as over_tcp:
        queue = over_tcp.declare_queue("ws-text")
        assert asyncio.run(text_after_the_handshake_began(websocket_url(broker))) == 1003  # unsupported data
        assert "sent a text message, AMQP is binary: closed" in broker.output
        for session, body in ((over_websocket, b"still here"), (over_tcp, b"me too")):
            session.channel.basic_publish("", queue, body)
            assert await_message(session.channel, queue, "the others are not disturbed").body == body


def body_frame(payload_size: int) -> bytes:
    return b"\x03\x00\x01" + payload_size.to_bytes(4, "big") + b"x" * payload_size + b"\xce"


def test_a_message_over_one_frame_closes_the_websocket(broker: BrokerProcess) -> None:
    frame_max = 128 * 1024  # the default
    # A frame with a payload of frame_max in one message is taken, as over TCP: the AMQP
    # handshake refuses it, not the WebSocket.
    received, code, _ = websocket_session(websocket_url(broker), wire_client.PROTOCOL_HEADER, body_frame(frame_max))
    assert code == 1000 and b"CHANNEL_ERROR - expected 'channel.open'" in received
    assert "size 131080 exceeds limit" not in broker.output
    _, code, _ = websocket_session(websocket_url(broker), wire_client.PROTOCOL_HEADER, body_frame(frame_max + 1))
    # 1009, message too big; or 1006 when the socket's reset (the broker closes it with the
    # rest of the message unread) reaches the client before the close frame does, or while
    # the client is still sending the message.
    assert code in (1009, 1006)
    # Logged as the broker closes it: the line may come a moment after the close.
    eventually(lambda: "WebSocket from 127.0.0.1:" in broker.output and "size 131081 exceeds limit" in broker.output)


def test_the_wire_client_cuts_its_messages_to_the_frame_size(broker: BrokerProcess) -> None:
    address = wire_client.Address(port=broker.http_port, host="127.0.0.1", websocket_path="/ws/amqp")
    body = os.urandom(MiB)  # published in writes of several frames each
    with open_session(broker.url) as tcp:
        queue = tcp.declare_queue("ws-wire-large")
        connection = wire_client.connect(address)
        try:
            connection.publish(queue, [body, body[::-1]])
            assert await_message(tcp.channel, queue, "the first arrives").body == body
            assert await_message(tcp.channel, queue, "the second arrives").body == body[::-1]
        finally:
            wire_client.close_all([connection])


def resident_memory(pid: int) -> int:
    """The process's resident set in bytes (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for process {pid}")


def stream_one_huge_message(broker: BrokerProcess, size: int) -> int:
    """Upgrade a raw socket to /ws/amqp and, without logging in, send one binary message
    whose header claims `size` bytes, streaming its payload in 1 MiB chunks until the broker
    closes the socket. Returns how many payload bytes the broker let through."""
    with socket.create_connection(("127.0.0.1", broker.http_port), timeout=10) as raw:
        headers = upgrade_headers(**{"Host": "127.0.0.1", "Sec-WebSocket-Protocol": "amqp"})
        request = "GET /ws/amqp HTTP/1.1\r\n" + "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        raw.sendall(request.encode() + b"\r\n")
        assert raw.recv(4096).startswith(b"HTTP/1.1 101")
        mask = b"\x00\x00\x00\x00"  # a client must mask; a zero mask leaves the payload as it is
        raw.sendall(b"\x82\xff" + size.to_bytes(8, "big") + mask)
        chunk = b"x" * MiB
        sent = 0
        with contextlib.suppress(ConnectionError, TimeoutError):
            while sent < size:
                sent += raw.send(chunk)
        return sent


def test_an_unauthenticated_huge_message_is_refused_before_it_is_buffered(broker: BrokerProcess) -> None:
    assert broker.pid is not None
    with open_session(broker.url):  # the broker at its working size
        pass
    before = resident_memory(broker.pid)
    sent = stream_one_huge_message(broker, 200 * 1000 * 1000)
    assert sent < 50 * MiB  # closed at the header, not after the whole message
    eventually(lambda: "size 200000000 exceeds limit" in broker.output)
    assert resident_memory(broker.pid) - before < 8 * MiB


def test_garbage_gets_the_protocol_header_as_over_tcp(broker: BrokerProcess) -> None:
    garbage = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
    with socket.create_connection((broker.host, broker.port), timeout=5) as tcp:
        tcp.sendall(garbage)
        over_tcp = b""
        while chunk := tcp.recv(4096):
            over_tcp += chunk
    received, code, _ = websocket_session(websocket_url(broker), garbage)
    assert received == over_tcp == wire_client.PROTOCOL_HEADER
    assert code == 1000


def test_a_client_that_vanishes_mid_frame_leaves_no_connection(broker: BrokerProcess, bridge: WebSocketBridge) -> None:
    name = unique_name("ws-vanishing")
    connection = pika.BlockingConnection(named_parameters(bridge.url, name))
    channel = connection.channel()
    channel.queue_declare(name, exclusive=True)
    assert len(named(broker, name)) == 1
    half_a_publish = wire_client.method_frame(1, commands.Basic.Publish(exchange="", routing_key=name))[:12]
    bridge.vanish(half_a_publish)
    deadline = time.monotonic() + 10
    while named(broker, name) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert named(broker, name) == []
    with open_session(broker.url) as session, pytest.raises(pika.exceptions.ChannelClosedByBroker):
        session.channel.queue_declare(name, passive=True)  # its exclusive queue went with it
    with contextlib.suppress(pika.exceptions.AMQPError):
        connection.close()
    assert "Traceback" not in broker.output


def test_websocket_over_https_and_the_management_unix_socket(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    (tmp_path / "tls").mkdir()
    tls = write_tls_files(tmp_path / "tls")
    unix_path = tmp_path / "http.sock"
    broker = broker_factory([
        "--tls-cert", str(tls.server.cert), "--tls-key", str(tls.server.key), "--amqps-port", "0",
        "--https-port", "0", "--http-unix-path", str(unix_path),
    ])  # fmt: skip
    https_port = broker.listeners["https"]
    secure = WebSocketBridge(
        f"wss://localhost:{https_port}/ws/amqp", tls=ssl.create_default_context(cafile=str(tls.ca))
    )
    local = WebSocketBridge("ws://localhost/ws/amqp", unix_path=str(unix_path))
    for adapter, name in ((secure, "over-https"), (local, "over-unix")):
        with adapter, pika.BlockingConnection(named_parameters(adapter.url, name)) as connection:
            channel = connection.channel()
            channel.queue_declare(name, exclusive=True)
            channel.basic_publish("", name, name.encode())
            assert await_message(channel, name, f"a message goes round {name}").body == name.encode()
            [listed] = named(broker, name)
            assert listed["ssl"] is (name == "over-https")
            assert listed["peer_host"] == "127.0.0.1"  # a unix socket's client is a local one, as over AMQP


def test_a_wrong_password_gets_the_same_refusal_as_over_tcp(broker: BrokerProcess) -> None:
    refusals = []
    with WebSocketBridge(websocket_url(broker), password="wrong") as adapter:
        for url in (broker.url.replace("guest:guest", "guest:wrong"), adapter.url):
            with wire_client.Connection(url) as client:
                client.send_raw(wire_client.PROTOCOL_HEADER)
                client.start_ok()
                close = client.expect_connection_close()
                refusals.append((close.reply_code, close.reply_text))
    assert refusals == [LOGIN_REFUSED, LOGIN_REFUSED]


def test_the_broker_stops_promptly_with_websocket_clients_connected(broker_factory: BrokerFactory) -> None:
    broker = broker_factory()
    with WebSocketBridge(websocket_url(broker)) as adapter:
        connection = pika.BlockingConnection(pika.URLParameters(adapter.url))
        started = time.monotonic()
        assert broker.stop(timeout=15) == 0
        assert time.monotonic() - started < 5
        with contextlib.suppress(pika.exceptions.AMQPError):
            connection.close()
