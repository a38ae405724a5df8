"""AMQP and the management API over unix sockets, and the PROXY protocol (v1 and v2) on the
AMQP, AMQPS and unix listeners, against real brokers.

pika dials TCP only and knows nothing of PROXY headers, so a small relay stands between it
and the broker: a loopback TCP listener that connects each client it accepts to the broker
(a unix socket or a TCP port), optionally sends a PROXY header there first, then copies the
bytes both ways. Bad headers go out on raw sockets.
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import socket
import ssl
import stat
import struct
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import aiohttp
import pika
import pytest
import requests
from broker_process import BrokerFactory, BrokerProcess, stop_quietly
from control_helpers import ctl_ok
from helpers import unique_name, wait_until
from tls_certs import write_tls_files

GUEST = ("guest", "guest")
REMOTE_USER = ("remote", "far-away")  # a user allowed from anywhere, on vhost /
AMQP_PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
# How long the broker waits for a PROXY header (as for the AMQP handshake), plus slack.
HEADER_TIMEOUT = 10.0
EOF_TIMEOUT = HEADER_TIMEOUT + 5.0
GUEST_REFUSED = "user 'guest' can only connect via localhost"

# --------------------------------------------------------------------------- PROXY headers

V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"
V2_PROXY = 0x21  # version 2, command PROXY
V2_LOCAL = 0x20  # version 2, command LOCAL
V2_TCP4 = 0x11
V2_TCP6 = 0x21


def proxy_v1(source: str, source_port: int, destination: str = "127.0.0.1", destination_port: int = 5672) -> bytes:
    """The human-readable header: `PROXY TCP4 src dst sport dport\\r\\n`."""
    family = "TCP6" if ":" in source else "TCP4"
    return f"PROXY {family} {source} {destination} {source_port} {destination_port}\r\n".encode()


def proxy_v2(
    source: str, source_port: int, destination: str = "127.0.0.1", destination_port: int = 5672, tlvs: bytes = b""
) -> bytes:
    """The binary header: signature, version/command, family/transport, length, addresses,
    then any type-length-value extensions (which a receiver skips unless it knows them)."""
    client = ipaddress.ip_address(source)
    server = ipaddress.ip_address(destination)
    if client.version == 6 and server.version == 4:
        server = ipaddress.IPv6Address(f"::ffff:{server}")
    family = V2_TCP6 if client.version == 6 else V2_TCP4
    addresses = client.packed + server.packed + struct.pack(">HH", source_port, destination_port)
    return v2_header(V2_PROXY, family, addresses + tlvs)


def proxy_v2_with_tlvs(source: str, source_port: int, destination: str = "127.0.0.1", port: int = 5672) -> bytes:
    """As AWS NLB and HAProxy send it: an authority (PP2_TYPE_AUTHORITY) and a NOOP TLV."""
    authority = b"broker.example.com"
    tlvs = b"\x02" + struct.pack(">H", len(authority)) + authority + b"\x04" + struct.pack(">H", 3) + bytes(3)
    return proxy_v2(source, source_port, destination, port, tlvs)


def v2_header(command: int, family: int, payload: bytes, length: int | None = None) -> bytes:
    size = len(payload) if length is None else length
    return V2_SIGNATURE + bytes([command, family]) + struct.pack(">H", size) + payload


V2_LOCAL_HEADER = v2_header(V2_LOCAL, 0x00, b"")  # a load balancer's health check: no addresses

# --------------------------------------------------------------------------- a relay for pika


class Relay:
    """A loopback TCP listener that connects every client it accepts to `target` (a unix
    socket's path, or a TCP (host, port)), sends `preamble` there, then relays both ways."""

    def __init__(self, target: Path | tuple[str, int], preamble: bytes = b"") -> None:
        self.target = target
        self.preamble = preamble
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.upstream_ports: list[int] = []  # the relay's own ports towards a TCP target
        self._sockets: list[socket.socket] = [self.listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def __enter__(self) -> Relay:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        with suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in accept
        for sock in self._sockets:
            sock.close()

    def _dial(self) -> socket.socket:
        if isinstance(self.target, Path):
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(str(self.target))
            return upstream
        upstream = socket.create_connection(self.target)
        self.upstream_ports.append(upstream.getsockname()[1])
        return upstream

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:  # closed
                return
            self._sockets.append(client)
            try:
                upstream = self._dial()
            except OSError:
                client.close()
                continue
            self._sockets.append(upstream)
            upstream.sendall(self.preamble)  # before any byte of the client's: the header leads
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=pump, args=(source, sink), daemon=True).start()


def pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy until the source ends, then end the sink's direction too."""
    with suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


# --------------------------------------------------------------------------- clients


def pika_connection(
    port: int,
    name: str,
    credentials: tuple[str, str] = GUEST,
    ssl_options: pika.SSLOptions | None = None,
) -> pika.BlockingConnection:
    """pika on a loopback port, naming the connection `name` for the management API."""
    parameters = pika.ConnectionParameters(
        "127.0.0.1",
        port,
        "/",
        pika.PlainCredentials(*credentials),
        client_properties={"connection_name": name},
        connection_attempts=1,
        ssl_options=ssl_options,
    )
    return pika.BlockingConnection(parameters)


def round_trip_message(connection: pika.BlockingConnection) -> None:
    """Publish a confirmed message through the connection and consume it back."""
    channel = connection.channel()
    queue = channel.queue_declare("", exclusive=True).method.queue
    channel.confirm_delivery()
    body = unique_name("body").encode()
    channel.basic_publish("", queue, body)
    for method, _, received in channel.consume(queue, auto_ack=True, inactivity_timeout=5):
        assert method is not None, "the message did not come back"
        assert received == body
        break
    channel.cancel()
    channel.close()


def listed_connection(broker: BrokerProcess, name: str) -> dict[str, Any]:
    """The connection `name` as GET /api/connections shows it."""
    response = requests.get(f"{broker.http_url}/api/connections", auth=GUEST, timeout=10)
    assert response.status_code == 200, response.text
    found = [c for c in response.json() if c.get("user_provided_name") == name]
    assert len(found) == 1, response.json()
    return found[0]


def closed_by_broker(payload: bytes, port: int, within: float = HEADER_TIMEOUT / 2) -> tuple[bytes, int]:
    """Send `payload` on a new loopback connection; what the broker sent before it closed
    the connection (which it must do within `within` seconds), and the client's port (the
    PEER of the broker's log lines)."""
    with socket.create_connection(("127.0.0.1", port), timeout=within) as sock:
        client_port = sock.getsockname()[1]
        sock.sendall(payload)
        try:
            return read_until_eof(sock), client_port
        except TimeoutError:
            pytest.fail(f"the broker did not close the connection within {within} s")


def read_until_eof(sock: socket.socket) -> bytes:
    received = b""
    with suppress(ConnectionResetError):
        while data := sock.recv(4096):
            received += data
    return received


@contextmanager
def bystander(port: int) -> Iterator[pika.BlockingConnection]:
    """A connection opened before a bad one; the test checks that it still works after."""
    connection = pika_connection(port, unique_name("bystander"))
    try:
        yield connection
        round_trip_message(connection)
    finally:
        connection.close()


def wait_for_log(broker: BrokerProcess, line: str) -> None:
    wait_until(lambda: line in broker.output, f"the broker logs {line!r}")


# --------------------------------------------------------------------------- brokers


@pytest.fixture(scope="module")
def socket_dir() -> Iterator[Path]:
    """A short directory: a unix socket's path must fit in 107 bytes, pytest's tmp dirs may not."""
    with tempfile.TemporaryDirectory(prefix="lavin-", dir="/tmp") as directory:
        yield Path(directory)


def proxy_ini(directory: Path, trusted: str) -> Path:
    ini = directory / "proxy.ini"
    ini.write_text(f"[amqp]\ntcp_proxy_protocol = true\nproxy_protocol_trusted_sources = {trusted}\n")
    return ini


@pytest.fixture(scope="module")
def unix_broker(tmp_path_factory: pytest.TempPathFactory, socket_dir: Path) -> Iterator[BrokerProcess]:
    """A broker with AMQP and the management API on unix sockets too; no PROXY config."""
    arguments = ["--amqp-unix-path", str(socket_dir / "amqp.sock"), "--http-unix-path", str(socket_dir / "http.sock")]
    process = BrokerProcess(tmp_path_factory.mktemp("unix") / "data", extra_args=arguments)
    process.start()
    wait_for_log(process, "Listening on http+unix://")
    wait_for_log(process, "Listening on amqp+unix://")
    yield process
    stop_quietly(process)


@pytest.fixture(scope="module")
def proxied_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker taking PROXY headers from 127.0.0.1, with a user allowed from anywhere."""
    directory = tmp_path_factory.mktemp("proxy")
    process = BrokerProcess(directory / "data", extra_args=["--config", str(proxy_ini(directory, "127.0.0.1"))])
    process.start()
    ctl_ok(process, "add_user", *REMOTE_USER)
    ctl_ok(process, "set_permissions", "-p", "/", REMOTE_USER[0], ".*", ".*", ".*")
    yield process
    stop_quietly(process)


# --------------------------------------------------------------------------- unix sockets


def test_amqp_over_a_unix_socket_publishes_and_consumes(unix_broker: BrokerProcess, socket_dir: Path) -> None:
    path = socket_dir / "amqp.sock"
    assert f"Listening on amqp+unix://{path}" in unix_broker.output
    assert stat.S_ISSOCK(path.stat().st_mode)
    with Relay(path) as relay:
        # guest logs in: a unix-socket client is local, as a loopback one is
        connection = pika_connection(relay.port, unique_name("unix"))
        try:
            round_trip_message(connection)
        finally:
            connection.close()


def test_the_management_api_over_a_unix_socket(unix_broker: BrokerProcess, socket_dir: Path) -> None:
    path = socket_dir / "http.sock"
    assert f"Listening on http+unix://{path}" in unix_broker.output

    async def get(headers: dict[str, str]) -> tuple[int, Any]:
        connector = aiohttp.UnixConnector(path=str(path))
        timeout = aiohttp.ClientTimeout(total=10)
        async with (
            aiohttp.ClientSession(connector=connector, timeout=timeout) as session,
            session.get("http://localhost/api/overview", headers=headers) as response,
        ):
            body = await response.json() if response.status == 200 else None
            return response.status, body

    basic_auth = "Basic " + base64.b64encode(":".join(GUEST).encode()).decode()
    status, overview = asyncio.run(get({"Authorization": basic_auth}))
    assert status == 200, "guest logs in: a unix-socket client is local"
    assert overview["object_totals"]["queues"] >= 0
    assert asyncio.run(get({}))[0] == 401  # the same authentication as on TCP


def test_a_proxy_header_on_the_unix_socket_names_the_client(unix_broker: BrokerProcess, socket_dir: Path) -> None:
    """Unix-socket clients may always send a header (as LavinMQ): a local proxy in front."""
    with (
        Relay(socket_dir / "amqp.sock", proxy_v1("192.0.2.44", 40044)) as relay,
        pytest.raises(pika.exceptions.ProbableAuthenticationError, match="403"),
    ):
        pika_connection(relay.port, unique_name("unix-proxied"))
    wait_for_log(unix_broker, f"login of user 'guest' from 192.0.2.44 refused: {GUEST_REFUSED}")


def test_socket_files_left_by_a_dead_broker_are_taken_over_and_removed_on_stop(
    broker_factory: BrokerFactory, socket_dir: Path
) -> None:
    paths = [socket_dir / "left-amqp.sock", socket_dir / "left-http.sock"]
    for path in paths:  # bound, never listened on, never unlinked: as a killed broker leaves them
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as left:
            left.bind(str(path))
    broker = broker_factory(["--amqp-unix-path", str(paths[0]), "--http-unix-path", str(paths[1])])
    wait_for_log(broker, f"Listening on http+unix://{paths[1]}")
    wait_for_log(broker, f"Listening on amqp+unix://{paths[0]}")
    with Relay(paths[0]) as relay:
        pika_connection(relay.port, unique_name("taken-over")).close()
    assert broker.stop() == 0
    assert not any(path.exists() for path in paths)


def test_a_path_in_use_stops_start_up(broker_factory: BrokerFactory, socket_dir: Path) -> None:
    regular_file = socket_dir / "regular"
    regular_file.write_text("not a socket")
    with pytest.raises(RuntimeError, match=f"{regular_file} exists and is not a socket"):
        broker_factory(["--amqp-unix-path", str(regular_file)])
    assert regular_file.read_text() == "not a socket"
    listened = socket_dir / "listened.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as other_process:
        other_process.bind(str(listened))
        other_process.listen()
        with pytest.raises(RuntimeError, match=f"{listened} is in use by another process"):
            broker_factory(["--http-unix-path", str(listened)])


# --------------------------------------------------------------------------- PROXY from a trusted source

CLAIMS = [
    pytest.param(proxy_v1, "192.0.2.10", 40001, id="v1-tcp4"),
    pytest.param(proxy_v1, "2001:db8::31", 40002, id="v1-tcp6"),
    pytest.param(proxy_v2, "198.51.100.20", 40003, id="v2-tcp4"),
    pytest.param(proxy_v2, "2001:db8::30", 40004, id="v2-tcp6"),
    pytest.param(proxy_v2_with_tlvs, "203.0.113.40", 40005, id="v2-tcp4-with-tlvs"),
]


@pytest.mark.parametrize(("header", "host", "port"), CLAIMS)
def test_the_claimed_address_is_the_connections_peer(
    proxied_broker: BrokerProcess, header: Any, host: str, port: int
) -> None:
    name = unique_name("proxied")
    with Relay(("127.0.0.1", proxied_broker.port), header(host, port, "127.0.0.1", proxied_broker.port)) as relay:
        connection = pika_connection(relay.port, name, REMOTE_USER)
        try:
            round_trip_message(connection)
            listed = listed_connection(proxied_broker, name)
            assert (listed["peer_host"], listed["peer_port"]) == (host, port)
        finally:
            connection.close()
    if ":" not in host:
        assert f"accepting AMQP connection {host}:{port} -> 127.0.0.1:{proxied_broker.port}" in proxied_broker.output


@pytest.mark.parametrize("header", [proxy_v1, proxy_v2])
def test_guest_is_refused_when_the_claimed_address_is_not_loopback(proxied_broker: BrokerProcess, header: Any) -> None:
    host = "192.0.2.77" if header is proxy_v1 else "192.0.2.78"
    with (
        Relay(("127.0.0.1", proxied_broker.port), header(host, 40077)) as relay,
        pytest.raises(pika.exceptions.ProbableAuthenticationError, match="403"),
    ):
        pika_connection(relay.port, unique_name("guest-far"))
    wait_for_log(proxied_broker, f"login of user 'guest' from {host} refused: {GUEST_REFUSED}")


def test_guest_may_log_in_when_the_claimed_address_is_loopback(proxied_broker: BrokerProcess) -> None:
    name = unique_name("guest-near")
    with Relay(("127.0.0.1", proxied_broker.port), proxy_v2("127.0.0.9", 40009)) as relay:
        connection = pika_connection(relay.port, name)
        try:
            listed = listed_connection(proxied_broker, name)
            assert (listed["peer_host"], listed["peer_port"]) == ("127.0.0.9", 40009)
        finally:
            connection.close()


def test_a_trusted_source_may_connect_without_a_header(proxied_broker: BrokerProcess) -> None:
    name = unique_name("direct")
    connection = pika_connection(proxied_broker.port, name)
    try:
        round_trip_message(connection)
        assert listed_connection(proxied_broker, name)["peer_host"] == "127.0.0.1"
    finally:
        connection.close()


@pytest.mark.parametrize(
    "header", [pytest.param(V2_LOCAL_HEADER, id="v2-local"), pytest.param(b"PROXY UNKNOWN\r\n", id="v1-unknown")]
)
def test_a_header_without_a_client_is_a_direct_connection(proxied_broker: BrokerProcess, header: bytes) -> None:
    """Load balancers' health checks send a v2 LOCAL command (or v1 UNKNOWN): the
    connection's own addresses stand."""
    name = unique_name("local")
    with Relay(("127.0.0.1", proxied_broker.port), header) as relay:
        connection = pika_connection(relay.port, name)
        try:
            round_trip_message(connection)
            listed = listed_connection(proxied_broker, name)
            assert (listed["peer_host"], listed["peer_port"]) == ("127.0.0.1", relay.upstream_ports[0])
        finally:
            connection.close()


@pytest.mark.parametrize("header", [proxy_v1, proxy_v2])
def test_a_header_arriving_in_pieces_is_put_together(proxied_broker: BrokerProcess, header: Any) -> None:
    data = header("192.0.2.60", 40060) + AMQP_PROTOCOL_HEADER  # the last piece holds the AMQP header too
    with socket.create_connection(("127.0.0.1", proxied_broker.port), timeout=5) as sock:
        for piece in (data[:3], data[3:14], data[14:]):
            sock.sendall(piece)
            time.sleep(0.05)
        start = sock.recv(7)
    assert start[0] == 1, start  # a method frame: connection.start
    wait_for_log(proxied_broker, f"accepting AMQP connection 192.0.2.60:40060 -> 127.0.0.1:{proxied_broker.port}")


MALFORMED = [
    pytest.param(b"PROXY TCP4 not-an-address 127.0.0.1 40000 5672\r\n", id="v1-bad-address"),
    pytest.param(b"PROXY TCP4 192.0.2.1 127.0.0.1 40000\r\n", id="v1-missing-field"),
    pytest.param(b"PROXY UDP4 192.0.2.1 127.0.0.1 40000 5672\r\n", id="v1-unknown-protocol"),
    pytest.param(b"PROXY TCP4 192.0.2.1 127.0.0.1 70000 5672\r\n", id="v1-bad-port"),
    pytest.param(b"PROXY TCP4 " + b"1" * 200, id="v1-longer-than-107-bytes"),  # closed before any CRLF
    pytest.param(v2_header(V2_PROXY, V2_TCP4, bytes(4)), id="v2-length-short-of-the-addresses"),
    pytest.param(v2_header(V2_PROXY, 0x41, bytes(12)), id="v2-unknown-family"),
    pytest.param(v2_header(0x11, V2_TCP4, bytes(12)), id="v2-unknown-version"),
    pytest.param(v2_header(0x2F, V2_TCP4, bytes(12)), id="v2-unknown-command"),
]


@pytest.mark.parametrize("payload", MALFORMED)
def test_a_malformed_header_closes_that_connection_only(proxied_broker: BrokerProcess, payload: bytes) -> None:
    with bystander(proxied_broker.port):
        received, client_port = closed_by_broker(payload + AMQP_PROTOCOL_HEADER, proxied_broker.port)
        assert received == b""
        wait_for_log(proxied_broker, f"malformed PROXY protocol header from 127.0.0.1:{client_port}: ")


def test_a_header_that_never_completes_times_out(proxied_broker: BrokerProcess) -> None:
    with bystander(proxied_broker.port):
        started = time.monotonic()
        received, client_port = closed_by_broker(b"PROXY TCP4 192.0.2.1 127.0.0.1", proxied_broker.port, EOF_TIMEOUT)
        waited = time.monotonic() - started
        assert received == b""
        assert HEADER_TIMEOUT - 1 <= waited <= EOF_TIMEOUT, waited
        wait_for_log(proxied_broker, f"malformed PROXY protocol header from 127.0.0.1:{client_port}: ")


# --------------------------------------------------------------------------- PROXY refused


@pytest.mark.parametrize("header", [proxy_v1, proxy_v2])
def test_a_header_from_an_untrusted_source_closes_that_connection(
    broker_factory: BrokerFactory, tmp_path: Path, header: Any
) -> None:
    broker = broker_factory(["--config", str(proxy_ini(tmp_path, "10.0.0.0/8, 192.168.1.1"))])
    with bystander(broker.port):  # a client without a header is welcome from anywhere
        received, client_port = closed_by_broker(header("192.0.2.5", 40005) + AMQP_PROTOCOL_HEADER, broker.port)
        assert received == b""
        wait_for_log(broker, f"PROXY protocol header from untrusted source 127.0.0.1:{client_port}: closed")
    assert "192.0.2.5" not in broker.output


@pytest.mark.parametrize("header", [proxy_v1, proxy_v2])
def test_a_header_on_the_plain_port_without_the_feature_closes_that_connection(
    broker: BrokerProcess, header: Any
) -> None:
    with bystander(broker.port):
        received, client_port = closed_by_broker(header("192.0.2.6", 40006) + AMQP_PROTOCOL_HEADER, broker.port)
        assert received == AMQP_PROTOCOL_HEADER  # the spec's answer to a protocol header it does not speak
        line = f"PROXY protocol header from 127.0.0.1:{client_port}, where tcp_proxy_protocol is off: closed"
        wait_for_log(broker, line)


# --------------------------------------------------------------------------- PROXY and TLS


def test_a_proxy_header_comes_before_the_tls_handshake(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    tls_files = write_tls_files(tmp_path)
    tls_arguments = ["--tls-cert", str(tls_files.server.cert), "--tls-key", str(tls_files.server.key)]
    config = ["--config", str(proxy_ini(tmp_path, "127.0.0.1"))]
    broker = broker_factory([*config, *tls_arguments, "--amqps-port", "0"])
    amqps_port = broker.listeners["amqp/ssl"]
    context = ssl.create_default_context(cafile=str(tls_files.ca))
    tls = pika.SSLOptions(context, "localhost")
    proxied, direct = unique_name("tls-proxied"), unique_name("tls-direct")
    with Relay(("127.0.0.1", amqps_port), proxy_v1("127.7.7.7", 47000, "127.0.0.1", amqps_port)) as relay:
        connection = pika_connection(relay.port, proxied, ssl_options=tls)
        try:
            round_trip_message(connection)
            listed = listed_connection(broker, proxied)
            assert (listed["peer_host"], listed["peer_port"]) == ("127.7.7.7", 47000)
        finally:
            connection.close()
    # a trusted source may still start with the TLS handshake itself
    connection = pika_connection(amqps_port, direct, ssl_options=tls)
    try:
        round_trip_message(connection)
        assert listed_connection(broker, direct)["peer_host"] == "127.0.0.1"
    finally:
        connection.close()
