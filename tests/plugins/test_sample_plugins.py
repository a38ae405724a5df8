"""The sample third-party packages in tests/plugin_pkgs, used as their authors would: built
and installed into this environment, their own test suites run (Lavin's conformance kits),
then both types and the auth backend used from pika against a broker that enables them.
The shovel sample's file endpoints are checked by its own suite, through the shovel kits."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest
import requests
from broker_process import BrokerFactory
from helpers import closes_channel, wait_until

PLUGIN_PKGS = Path(__file__).resolve().parent.parent / "plugin_pkgs"
# distribution -> the type, auth backend or shovel endpoints it adds
SAMPLES = {
    "lavin-sample-exchange": "x-prefix",
    "lavin-sample-queue": "x-lifo",
    "lavin-sample-auth": "sample-auth",
    "lavin-sample-shovel": "file",
}


def run_quietly(*command: str, cwd: Path | None = None) -> str:
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.fixture(scope="session")
def sample_packages(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """The samples installed for the session; their copies the builds ran in, by name."""
    copies = {}
    for name in SAMPLES:
        # A copy, so the build leaves no build/ or egg-info in the source tree.
        copies[name] = tmp_path_factory.mktemp(name) / name
        shutil.copytree(PLUGIN_PKGS / name, copies[name])
    pip = (sys.executable, "-m", "pip", "--disable-pip-version-check")
    run_quietly(*pip, "install", "--quiet", "--no-deps", "--no-build-isolation", *map(str, copies.values()))
    yield copies
    run_quietly(*pip, "uninstall", "--yes", *SAMPLES)


@pytest.mark.parametrize("name", SAMPLES)
def test_sample_passes_its_own_suite(sample_packages: dict[str, Path], name: str) -> None:
    package = sample_packages[name]
    output = run_quietly(sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", cwd=package)
    assert "test_name_matches_its_entry_point PASSED" in output, output
    assert " failed" not in output and " error" not in output, output


@pytest.mark.usefixtures("sample_packages")
def test_prefix_exchange_routes_into_lifo_queue(broker_factory: BrokerFactory) -> None:
    # A broker process of its own: this one read the entry points before the install.
    enabled = ["--plugin", "x-prefix", "--plugin", "x-lifo"]
    broker = broker_factory(extra_args=enabled)
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        channel = connection.channel()
        channel.exchange_declare("regions", exchange_type="x-prefix")
        channel.queue_declare("europe", durable=True, arguments={"x-queue-type": "x-lifo"})
        channel.queue_bind("europe", "regions", routing_key="eu.")
        for routing_key in ["eu.fr", "us.ny", "eu.de", "eu.it"]:
            channel.basic_publish("regions", routing_key, routing_key.encode())
        # basic.get on the publishing channel sees every message published before it.
        received = [channel.basic_get("europe", auto_ack=True)[2] for _ in range(4)]
        assert received == [b"eu.it", b"eu.de", b"eu.fr", None]
    finally:
        connection.close()


@pytest.mark.usefixtures("sample_packages")
def test_sample_auth_backend_comes_before_the_internal_one(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    carol = {
        "password_sha256": hashlib.sha256(b"carol-pw").hexdigest(),
        "permissions": {"/": {"configure": "^carol\\.", "write": ".*", "read": ".*"}},
    }
    users_file = tmp_path / "users.json"
    users_file.write_text(json.dumps({"carol": carol}))
    ini = tmp_path / "lavin.ini"
    ini.write_text(
        "[main]\nplugins = sample-auth\nauth_backends = sample-auth, internal\n"
        f"[plugin.sample-auth]\nusers_file = {users_file}\n"
    )
    broker = broker_factory(extra_args=["--config", str(ini)])
    carol_url = broker.url.replace("guest:guest", "carol:carol-pw")
    connection = pika.BlockingConnection(pika.URLParameters(carol_url))
    try:
        channel = connection.channel()
        channel.queue_declare("carol.jobs")
        with closes_channel(403, "ACCESS_REFUSED - access to queue 'jobs' in vhost '/' refused for user 'carol'"):
            channel.queue_declare("jobs")
    finally:
        connection.close()
    pika.BlockingConnection(pika.URLParameters(broker.url)).close()  # guest: left to the internal backend
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        pika.BlockingConnection(pika.URLParameters(carol_url.replace("carol-pw", "guest")))
    assert "login of user 'carol' from 127.0.0.1 refused: wrong password for user 'carol'" in broker.output


@pytest.mark.usefixtures("sample_packages")
def test_a_shovel_picks_the_file_destination_by_its_scheme(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    target = tmp_path / "orders.jsonl"
    value = {"src-uri": "amqp://", "src-queue": "orders", "dest-uri": f"file://{target}"}
    not_enabled = broker_factory()
    refused = requests.put(f"{not_enabled.http_url}/api/parameters/shovel/%2F/to-file", json={"value": value},
                           auth=("guest", "guest"), timeout=10)  # fmt: skip
    assert refused.status_code == 400 and "scheme 'file' is not installed" in refused.text
    broker = broker_factory(extra_args=["--plugin", "file"])
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    channel = connection.channel()
    channel.queue_declare("orders", durable=True)
    channel.confirm_delivery()
    for number in range(3):
        channel.basic_publish("", "orders", f"order {number}".encode())
    response = requests.put(f"{broker.http_url}/api/parameters/shovel/%2F/to-file", json={"value": value},
                            auth=("guest", "guest"), timeout=10)  # fmt: skip
    assert response.status_code == 201, response.text
    wait_until(lambda: target.exists() and len(target.read_text().splitlines()) == 3, "three lines in the file", 15)
    assert [json.loads(line)["body"] for line in target.read_text().splitlines()] == ["order 0", "order 1", "order 2"]
    wait_until(lambda: channel.queue_declare("orders", passive=True).method.message_count == 0, "the queue to empty")
    connection.close()
