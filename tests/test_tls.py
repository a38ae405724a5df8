"""AMQPS, mutual TLS with SASL EXTERNAL, certificate reload and HTTPS, against broker child
processes with certificates made at run time (tls_certs.py), through pika, requests, the
standard library's ssl and raw sockets.

One broker per distinct configuration, shared by the tests of a module that do not
disturb each other: every test uses names of its own."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pika
import pytest
import requests
from broker_process import BrokerFactory, BrokerProcess, hermetic_env, stop_quietly
from control_helpers import ctl, ctl_ok
from cryptography import x509
from helpers import closes_channel, eventually, unique_name
from lavin.client.wire import CAPABILITIES, PROTOCOL_HEADER, Connection
from pamqp import commands
from tls_certs import (
    CLIENT_USER,
    SAN_CLIENT_DNS,
    SAN_CLIENT_EMAIL,
    UNKNOWN_USER,
    CertPair,
    TlsFiles,
    write_tls_files,
)

HOST = "127.0.0.1"
SERVER_NAME = "localhost"  # the server certificate's DNS name; its IP SAN is HOST
GUEST = pika.PlainCredentials("guest", "guest")
EXTERNAL = pika.credentials.ExternalCredentials()
NO_CERT_TEXT = "ACCESS_REFUSED - EXTERNAL login refused: connection peer presented no TLS (x.509) certificate"
LOGIN_REFUSED_TEXT = (
    "ACCESS_REFUSED - Login was refused using authentication mechanism EXTERNAL. For details see the broker logfile."
)
RELOADED = "TLS certificates reloaded"
NOT_RELOADED = "TLS certificates not reloaded, keeping the current ones: "
LIVE_CERT, LIVE_KEY = "live.crt", "live.key"  # the reloadable broker's files
HANDSHAKE_TIMEOUT = 10.0  # seconds a client may take to start TLS, as for the AMQP handshake
TIMEOUT = 5.0


@dataclass
class TlsBroker:
    process: BrokerProcess
    amqps_port: int
    https_port: int
    config: Path

    @property
    def https_url(self) -> str:
        return f"https://{HOST}:{self.https_port}"


# --------------------------------------------------------------------------- set-up


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return write_tls_files(tmp_path_factory.mktemp("tls"))


def write_config(directory: Path, main: Mapping[str, str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "lavin.ini"
    path.write_text("[main]\n" + "".join(f"{key} = {value}\n" for key, value in main.items()))
    return path


def tls_settings(files: TlsFiles, **extra: str) -> dict[str, str]:
    return {
        "tls_cert": str(files.server.cert),
        "tls_key": str(files.server.key),
        "tls_ca_cert": str(files.ca),
        **extra,
    }


def start_tls_broker(directory: Path, main: Mapping[str, str]) -> TlsBroker:
    """A broker with these [main] settings in its config file, on AMQPS and HTTPS ports it
    picks; returned once both TLS listeners are up (they are in its ready file)."""
    config = write_config(directory, {"data_dir": str(directory / "data"), **main})
    args = ["--config", str(config), "--amqps-port", "0", "--https-port", "0"]
    process = BrokerProcess(directory / "data", extra_args=args)
    process.start()
    return TlsBroker(process, process.listeners["amqp/ssl"], process.listeners["https"], config)


@contextmanager
def tls_broker(directory: Path, main: Mapping[str, str]) -> Iterator[TlsBroker]:
    broker = start_tls_broker(directory, main)
    try:
        yield broker
    finally:
        stop_quietly(broker.process)
    assert "Traceback" not in broker.process.output


@pytest.fixture(scope="module")
def mtls(tmp_path_factory: pytest.TempPathFactory, tls_files: TlsFiles) -> Iterator[TlsBroker]:
    """Client certificates asked for and verified, not required; CLIENT_USER may use
    only the queues named after it."""
    settings = tls_settings(tls_files, tls_verify_peer="true", tls_fail_if_no_peer_cert="false")
    with tls_broker(tmp_path_factory.mktemp("mtls"), settings) as broker:
        own = f"^{CLIENT_USER}\\."
        publish = f"^({CLIENT_USER}\\..*|amq\\.default)$"
        ctl_ok(broker.process, "add_user", CLIENT_USER, "not-used-with-external")
        ctl_ok(broker.process, "set_permissions", CLIENT_USER, own, publish, own)
        yield broker


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory, tls_files: TlsFiles) -> Iterator[TlsBroker]:
    """A client certificate required, and TLS 1.3 at least."""
    settings = tls_settings(tls_files, tls_verify_peer="true", tls_fail_if_no_peer_cert="true", tls_min_version="1.3")
    with tls_broker(tmp_path_factory.mktemp("strict"), settings) as broker:
        yield broker


@pytest.fixture(scope="module")
def reloadable(tmp_path_factory: pytest.TempPathFactory, tls_files: TlsFiles) -> Iterator[TlsBroker]:
    """A broker whose certificate files (LIVE_CERT, LIVE_KEY next to its config) the tests replace."""
    directory = tmp_path_factory.mktemp("reload")
    install(tls_files.server, directory)
    settings = tls_settings(tls_files, tls_cert=str(directory / LIVE_CERT), tls_key=str(directory / LIVE_KEY))
    with tls_broker(directory, settings) as broker:
        yield broker


def install(source: CertPair, directory: Path) -> None:
    shutil.copyfile(source.cert, directory / LIVE_CERT)
    shutil.copyfile(source.key, directory / LIVE_KEY)


# --------------------------------------------------------------------------- clients


def client_context(
    files: TlsFiles, cert: CertPair | None = None, *, maximum_version: ssl.TLSVersion | None = None
) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(files.ca))
    if cert is not None:
        context.load_cert_chain(cert.cert, cert.key)
    if maximum_version is not None:
        context.maximum_version = maximum_version
    return context


def connect_tls(
    broker: TlsBroker,
    context: ssl.SSLContext,
    credentials: pika.credentials.PlainCredentials | pika.credentials.ExternalCredentials = GUEST,
    name: str | None = None,
) -> pika.BlockingConnection:
    parameters = pika.ConnectionParameters(
        HOST,
        broker.amqps_port,
        credentials=credentials,
        ssl_options=pika.SSLOptions(context, SERVER_NAME),
        connection_attempts=1,
        socket_timeout=TIMEOUT,
        client_properties={"connection_name": name} if name else None,
    )
    return pika.BlockingConnection(parameters)


def round_trip_messages(connection: pika.BlockingConnection, queue: str, count: int = 3) -> None:
    """Publish `count` confirmed messages to `queue` and consume them back, in order."""
    channel = connection.channel()
    channel.confirm_delivery()
    channel.queue_declare(queue, auto_delete=True)
    sent = [f"{queue}-{n}".encode() for n in range(count)]
    for body in sent:
        channel.basic_publish("", queue, body)
    received: list[bytes] = []
    for _method, _properties, body in channel.consume(queue, auto_ack=True, inactivity_timeout=TIMEOUT):
        assert body is not None, f"{queue}: got {received}, expected {sent}"
        received.append(body)
        if len(received) == count:
            break
    channel.cancel()
    assert received == sent
    channel.close()


@contextmanager
def survivor(broker: TlsBroker, context: ssl.SSLContext) -> Iterator[None]:
    """A good TLS connection opened before the block, which must still work after it."""
    connection = connect_tls(broker, context)
    try:
        round_trip_messages(connection, unique_name("before"))
        yield
        round_trip_messages(connection, unique_name("after"))
    finally:
        connection.close()


def tls_wire_connection(port: int, context: ssl.SSLContext) -> Connection:
    """A `lavin.client.wire` connection over TLS, to read the broker's replies frame by frame."""
    connection = Connection(f"amqp://unused:unused@{HOST}:{port}/%2F", timeout=TIMEOUT)
    connection.sock = context.wrap_socket(connection.sock, server_hostname=SERVER_NAME)
    return connection


def external_refusal(port: int, context: ssl.SSLContext) -> tuple[int, str]:
    """The connection.close that answers an EXTERNAL login, which the broker must offer."""
    with tls_wire_connection(port, context) as connection:
        connection.send_raw(PROTOCOL_HEADER)
        start = connection.expect(commands.Connection.Start)
        assert "EXTERNAL" in start.mechanisms.split()
        # As pika does: an empty response, and the capability that asks for a connection.close.
        properties = {"capabilities": dict(CAPABILITIES)}
        connection.send(commands.Connection.StartOk(client_properties=properties, mechanism="EXTERNAL", response=""))
        close = connection.expect_connection_close()
    return close.reply_code, close.reply_text


def api_connection(broker: TlsBroker, files: TlsFiles, name: str) -> dict[str, Any]:
    """The management API's view, over HTTPS, of the connection with this connection_name."""

    def find() -> dict[str, Any] | None:
        url = f"{broker.https_url}/api/connections"
        response = requests.get(url, auth=("guest", "guest"), verify=str(files.ca), timeout=TIMEOUT)
        response.raise_for_status()
        return next((each for each in response.json() if each.get("user_provided_name") == name), None)

    return eventually(find)


def peer_name(sock: socket.socket) -> str:
    """How the broker names this client in its log."""
    host, port = sock.getsockname()[:2]
    return f"{host}:{port}"


def log_line(process: BrokerProcess, text: str, timeout: float = TIMEOUT) -> str:
    """The broker's first log line that contains `text`, once it is written."""
    deadline = time.monotonic() + timeout
    while True:
        found = next((line for line in process.output.splitlines() if text in line), None)
        if found is not None:
            return found
        if time.monotonic() > deadline:
            tail = "\n".join(process.output.splitlines()[-15:])
            pytest.fail(f"no log line with {text!r} after {timeout}s; the log ends with:\n{tail}")
        time.sleep(0.05)


def read_until_closed(sock: socket.socket, timeout: float = TIMEOUT) -> bytes:
    """Everything the broker sends until it closes the connection, which it must do in time."""
    sock.settimeout(timeout)
    received = b""
    while True:
        try:
            data = sock.recv(4096)
        except (ConnectionResetError, ssl.SSLError):  # ssl: the broker's alert, or its abrupt close
            return received
        if not data:
            return received
        received += data


def failed_tls_client(port: int, context: ssl.SSLContext) -> str:
    """Try an AMQP connection over TLS that the broker must refuse, during or right after
    the handshake (TLS 1.3 sends the client certificate after the client's handshake is
    done); return the client's name in the broker's log."""
    with closing(socket.create_connection((HOST, port), timeout=TIMEOUT)) as raw:
        peer = peer_name(raw)
        try:
            tls = context.wrap_socket(raw, server_hostname=SERVER_NAME)
        except (ssl.SSLError, ConnectionResetError):
            return peer
        with tls:
            try:
                tls.sendall(PROTOCOL_HEADER)
            except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
                return peer
            received = read_until_closed(tls)
        assert not received, f"the broker answered a refused TLS client: {received!r}"
    return peer


def served_serial(port: int, files: TlsFiles) -> int:
    """The serial number of the certificate a new TLS connection is shown."""
    context = client_context(files)
    with context.wrap_socket(
        socket.create_connection((HOST, port), timeout=TIMEOUT), server_hostname=SERVER_NAME
    ) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


# --------------------------------------------------------------------------- AMQPS


def test_pika_over_tls_publishes_consumes_and_shows_as_ssl_in_the_api(mtls: TlsBroker, tls_files: TlsFiles) -> None:
    name = unique_name("tls-plain-login")
    connection = connect_tls(mtls, client_context(tls_files), name=name)
    round_trip_messages(connection, unique_name("tls-queue"), count=10)
    shown = api_connection(mtls, tls_files, name)
    assert shown["ssl"] is True
    assert shown["ssl_protocol"] == "tlsv1.3"  # RabbitMQ's spelling; Python's client prefers TLS 1.3
    assert (shown["user"], shown["auth_mechanism"], shown["port"]) == ("guest", "PLAIN", mtls.amqps_port)
    connection.close()


def test_external_is_offered_on_tls_connections_only(mtls: TlsBroker) -> None:
    with Connection(f"amqp://guest:guest@{HOST}:{mtls.process.port}/%2F", timeout=TIMEOUT) as plain:
        plain.send_raw(PROTOCOL_HEADER)
        start = plain.expect(commands.Connection.Start)
    assert "EXTERNAL" not in start.mechanisms.split()
    assert "PLAIN" in start.mechanisms.split()


def test_external_logs_in_as_the_client_certificates_cn_with_its_permissions(
    mtls: TlsBroker, tls_files: TlsFiles
) -> None:
    name = unique_name("tls-external")
    connection = connect_tls(mtls, client_context(tls_files, tls_files.client), EXTERNAL, name)
    round_trip_messages(connection, unique_name(f"{CLIENT_USER}."))
    shown = api_connection(mtls, tls_files, name)
    assert (shown["user"], shown["auth_mechanism"], shown["ssl"]) == (CLIENT_USER, "EXTERNAL", True)
    channel = connection.channel()
    refused = f"ACCESS_REFUSED - access to queue 'not-hers' in vhost '/' refused for user '{CLIENT_USER}'"
    with closes_channel(403, refused):
        channel.queue_declare("not-hers")
    connection.close()


def test_external_with_a_certificate_of_no_known_user_is_refused(mtls: TlsBroker, tls_files: TlsFiles) -> None:
    refusal = external_refusal(mtls.amqps_port, client_context(tls_files, tls_files.unknown_client))
    assert refusal == (403, LOGIN_REFUSED_TEXT)
    log_line(mtls.process, f"login of unknown user '{UNKNOWN_USER}'")  # the broker says whom it refused


def test_external_without_a_client_certificate_is_refused(mtls: TlsBroker, tls_files: TlsFiles) -> None:
    assert external_refusal(mtls.amqps_port, client_context(tls_files)) == (403, NO_CERT_TEXT)


@pytest.mark.parametrize(
    ("san_type", "user"), [("dns", SAN_CLIENT_DNS), ("email", SAN_CLIENT_EMAIL)], ids=["dns", "email"]
)
def test_external_takes_the_user_from_a_subject_alternative_name(
    tmp_path: Path, tls_files: TlsFiles, san_type: str, user: str
) -> None:
    settings = tls_settings(
        tls_files,
        tls_verify_peer="true",
        tls_cert_login_from="subject_alternative_name",
        tls_cert_login_san_type=san_type,
    )
    with tls_broker(tmp_path, settings) as broker:
        ctl_ok(broker.process, "add_user", user, "not-used-with-external")
        ctl_ok(broker.process, "set_permissions", user, ".*", ".*", ".*")
        name = unique_name("tls-san")
        connection = connect_tls(broker, client_context(tls_files, tls_files.san_client), EXTERNAL, name)
        round_trip_messages(connection, unique_name("san"))
        assert api_connection(broker, tls_files, name)["user"] == user
        connection.close()


# --------------------------------------------------------------------------- bad clients


def test_a_plain_amqp_client_on_the_tls_port_is_closed(mtls: TlsBroker, tls_files: TlsFiles) -> None:
    with survivor(mtls, client_context(tls_files)):
        with closing(socket.create_connection((HOST, mtls.amqps_port), timeout=TIMEOUT)) as plain:
            peer = peer_name(plain)
            plain.sendall(PROTOCOL_HEADER)
            answer = read_until_closed(plain)
        assert not answer.startswith(b"\x01"), "the broker spoke AMQP on its TLS port"
        log_line(mtls.process, f"TLS handshake with {peer} failed: ")


def test_a_tls_client_on_the_plain_port_is_closed(mtls: TlsBroker, tls_files: TlsFiles) -> None:
    context = client_context(tls_files)
    with survivor(mtls, context):
        with closing(socket.create_connection((HOST, mtls.process.port), timeout=TIMEOUT)) as raw:
            peer = peer_name(raw)
            with pytest.raises((ssl.SSLError, ConnectionResetError)):
                context.wrap_socket(raw, server_hostname=SERVER_NAME)
        log_line(mtls.process, f"TLS handshake from {peer} on the plain AMQP port: closed")


@pytest.mark.parametrize(
    ("cert", "reason"),
    [
        ("expired_client", "certificate has expired"),
        ("self_signed_client", "self-signed certificate"),
        ("other_ca_client", "unable to get local issuer certificate"),
    ],
    ids=["expired", "self-signed", "wrong-ca"],
)
def test_a_bad_client_certificate_is_refused(strict: TlsBroker, tls_files: TlsFiles, cert: str, reason: str) -> None:
    with survivor(strict, client_context(tls_files, tls_files.client)):
        peer = failed_tls_client(strict.amqps_port, client_context(tls_files, getattr(tls_files, cert)))
        line = log_line(strict.process, f"TLS handshake with {peer} failed: ")
    assert "certificate verify failed" in line
    assert reason in line


def test_no_client_certificate_is_refused_when_one_is_required(strict: TlsBroker, tls_files: TlsFiles) -> None:
    with survivor(strict, client_context(tls_files, tls_files.client)):
        peer = failed_tls_client(strict.amqps_port, client_context(tls_files))
        line = log_line(strict.process, f"TLS handshake with {peer} failed: ")
    assert "peer did not return a certificate" in line


def test_a_tls_1_2_client_is_refused_when_1_3_is_the_minimum(strict: TlsBroker, tls_files: TlsFiles) -> None:
    old = client_context(tls_files, tls_files.client, maximum_version=ssl.TLSVersion.TLSv1_2)
    with survivor(strict, client_context(tls_files, tls_files.client)):
        with closing(socket.create_connection((HOST, strict.amqps_port), timeout=TIMEOUT)) as raw:
            peer = peer_name(raw)
            with pytest.raises(ssl.SSLError, match="protocol version"):
                old.wrap_socket(raw, server_hostname=SERVER_NAME)
        log_line(strict.process, f"TLS handshake with {peer} failed: ")


def test_a_client_that_never_starts_tls_is_closed_after_the_handshake_timeout(
    mtls: TlsBroker, tls_files: TlsFiles
) -> None:
    with survivor(mtls, client_context(tls_files)):
        with closing(socket.create_connection((HOST, mtls.amqps_port), timeout=TIMEOUT)) as silent:
            peer = peer_name(silent)
            started = time.monotonic()
            assert read_until_closed(silent, timeout=HANDSHAKE_TIMEOUT + 5) == b""
            waited = time.monotonic() - started
        assert HANDSHAKE_TIMEOUT - 1 < waited < HANDSHAKE_TIMEOUT + 3
        log_line(mtls.process, f"TLS handshake with {peer} timed out")


# --------------------------------------------------------------------------- reload


def served_pair(broker: TlsBroker, files: TlsFiles) -> CertPair:
    serial = served_serial(broker.amqps_port, files)
    return next(pair for pair in (files.server, files.reloaded_server) if pair.serial == serial)


def the_other(files: TlsFiles, pair: CertPair) -> CertPair:
    return files.reloaded_server if pair == files.server else files.server


def test_sighup_reloads_the_certificate_and_open_connections_keep_working(
    reloadable: TlsBroker, tls_files: TlsFiles
) -> None:
    connection = connect_tls(reloadable, client_context(tls_files))
    round_trip_messages(connection, unique_name("before-reload"))
    target = the_other(tls_files, served_pair(reloadable, tls_files))
    install(target, reloadable.config.parent)
    reloads = reloadable.process.output.count(RELOADED)
    assert reloadable.process.pid is not None
    os.kill(reloadable.process.pid, signal.SIGHUP)
    eventually(lambda: reloadable.process.output.count(RELOADED) > reloads)
    assert served_serial(reloadable.amqps_port, tls_files) == target.serial
    round_trip_messages(connection, unique_name("after-reload"))
    connection.close()
    connection = connect_tls(reloadable, client_context(tls_files))
    round_trip_messages(connection, unique_name("new-after-reload"))
    connection.close()


def test_ctl_reload_tls_reloads_the_certificate(reloadable: TlsBroker, tls_files: TlsFiles) -> None:
    connection = connect_tls(reloadable, client_context(tls_files))
    target = the_other(tls_files, served_pair(reloadable, tls_files))
    install(target, reloadable.config.parent)
    result = ctl(reloadable.process, "reload_tls")
    assert result.returncode == 0, result.stderr
    assert served_serial(reloadable.amqps_port, tls_files) == target.serial
    round_trip_messages(connection, unique_name("ctl-reload"))
    connection.close()
    target = the_other(tls_files, target)
    install(target, reloadable.config.parent)
    result = ctl_with_config(reloadable, "reload_tls")
    assert result.returncode == 0, result.stderr
    assert served_serial(reloadable.amqps_port, tls_files) == target.serial


def ctl_with_config(broker: TlsBroker, *args: str) -> subprocess.CompletedProcess[str]:
    """`lavin ctl --config FILE ARGS`: the config file's data_dir leads to the broker."""
    return subprocess.run(
        [sys.executable, "-m", "lavin", "ctl", "--config", str(broker.config), *args],
        capture_output=True, text=True, timeout=30, env=hermetic_env(),
    )  # fmt: skip


def test_a_reload_with_a_broken_key_keeps_the_current_certificate(reloadable: TlsBroker, tls_files: TlsFiles) -> None:
    current = served_pair(reloadable, tls_files)
    directory = reloadable.config.parent
    shutil.copyfile(the_other(tls_files, current).cert, directory / LIVE_CERT)
    (directory / LIVE_KEY).write_text("-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n")
    process = reloadable.process
    try:
        failures = process.output.count(NOT_RELOADED)
        result = ctl(reloadable.process, "reload_tls")
        assert result.returncode != 0
        assert NOT_RELOADED in result.stderr
        assert process.output.count(NOT_RELOADED) == failures + 1
        assert reloadable.process.pid is not None
        os.kill(reloadable.process.pid, signal.SIGHUP)
        eventually(lambda: process.output.count(NOT_RELOADED) == failures + 2)
        assert reloadable.process.running
        assert served_serial(reloadable.amqps_port, tls_files) == current.serial
        connection = connect_tls(reloadable, client_context(tls_files))
        round_trip_messages(connection, unique_name("kept"))
        connection.close()
    finally:
        install(current, directory)


# --------------------------------------------------------------------------- HTTPS


def test_the_management_api_answers_over_https(mtls: TlsBroker, tls_files: TlsFiles) -> None:
    response = requests.get(
        f"{mtls.https_url}/api/overview", auth=("guest", "guest"), verify=str(tls_files.ca), timeout=TIMEOUT
    )
    assert response.status_code == 200
    listeners = {(each["protocol"], each["port"]) for each in response.json()["listeners"]}
    assert {("amqp/ssl", mtls.amqps_port), ("https", mtls.https_port)} <= listeners  # RabbitMQ's names


def test_plain_http_on_the_https_port_fails_and_the_http_port_keeps_working(mtls: TlsBroker) -> None:
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.get(f"http://{HOST}:{mtls.https_port}/api/overview", auth=("guest", "guest"), timeout=TIMEOUT)
    response = requests.get(f"{mtls.process.http_url}/api/overview", auth=("guest", "guest"), timeout=TIMEOUT)
    assert response.status_code == 200


# --------------------------------------------------------------------------- off


def test_no_tls_listener_without_a_certificate(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(["--amqps-port", "0", "--https-port", "0"])
    assert set(broker.listeners) == {"amqp", "http", "http/prometheus"}
    assert "Listening on amqps://" not in broker.output
    assert "Listening on https://" not in broker.output
    assert any("amqps" in line.lower() and "tls_cert" in line for line in broker.output.splitlines()), broker.output
