"""lavin.clustering.etcd against a real etcd: the calls leader election makes, and its failures."""

from __future__ import annotations

import asyncio
import http.server
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import TypeVar

import pytest
from lavin.clustering.etcd import EtcdClient, EtcdError
from lavin.testing.etcd_server import EtcdServer
from tcp_proxy import CuttableProxy

T = TypeVar("T")


def run(endpoints: Sequence[str], body: Callable[[EtcdClient], Awaitable[T]], timeout: float = 2.0) -> T:
    async def main() -> T:
        client = EtcdClient(endpoints, request_timeout=timeout)
        try:
            return await body(client)
        finally:
            await client.close()

    return asyncio.run(main())


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on: connections are refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def test_get_put_and_put_if_absent(etcd: EtcdServer) -> None:
    async def body(client: EtcdClient) -> None:
        assert await client.get("lavin/leader") is None
        await client.put("lavin/leader", "node-1 ünïcode")
        found = await client.get("lavin/leader")
        assert found is not None
        assert (found.key, found.value, found.lease) == ("lavin/leader", "node-1 ünïcode", 0)
        assert found.create_revision == found.mod_revision > 0
        await client.put("lavin/leader", "node-2")
        changed = await client.get("lavin/leader")
        assert changed is not None
        assert changed.value == "node-2"
        assert (changed.create_revision, changed.mod_revision) == (found.create_revision, found.mod_revision + 1)

        assert await client.put_if_absent("lavin/isr", "a") is True
        assert await client.put_if_absent("lavin/isr", "b") is False
        isr = await client.get("lavin/isr")
        assert isr is not None
        assert isr.value == "a"

    run([etcd.endpoint], body)


def test_put_if_equal_checks_the_guard_key(etcd: EtcdServer) -> None:
    async def body(client: EtcdClient) -> None:
        await client.put("lavin/leader", "node-1")
        assert await client.put_if_equal("lavin/isr", "node-1,node-2", guard_key="lavin/leader", guard_value="node-1")
        assert not await client.put_if_equal("lavin/isr", "node-3", guard_key="lavin/leader", guard_value="node-3")
        assert not await client.put_if_equal("lavin/isr", "node-3", guard_key="lavin/nothing", guard_value="")
        isr = await client.get("lavin/isr")
        assert isr is not None
        assert isr.value == "node-1,node-2"

    run([etcd.endpoint], body)


def test_delete_if_equal_deletes_only_the_expected_value(etcd: EtcdServer) -> None:
    async def body(client: EtcdClient) -> None:
        await client.put("lavin/leader", "node-2")
        assert await client.delete_if_equal("lavin/leader", "node-1") is False
        assert await client.get("lavin/leader") is not None
        assert await client.delete_if_equal("lavin/leader", "node-2") is True
        assert await client.get("lavin/leader") is None
        assert await client.delete_if_equal("lavin/leader", "node-2") is False

    run([etcd.endpoint], body)


def test_a_revoked_lease_takes_its_keys_along(etcd: EtcdServer) -> None:
    async def body(client: EtcdClient) -> None:
        lease = await client.grant_lease(10)
        assert lease > 0
        assert await client.put_if_absent("lavin/leader", "node-1", lease=lease)
        leader = await client.get("lavin/leader")
        assert leader is not None
        assert leader.lease == lease
        assert 0 < await client.keep_alive(lease) <= 10
        await client.revoke_lease(lease)
        assert await client.keep_alive(lease) == 0
        assert await client.get("lavin/leader") is None
        await client.revoke_lease(lease)  # already gone: no error

    run([etcd.endpoint], body)


def test_a_leased_key_disappears_without_keep_alives(etcd: EtcdServer) -> None:
    async def body(client: EtcdClient) -> float:
        lease = await client.grant_lease(2)
        await client.put("lavin/leader", "node-1", lease=lease)
        granted = time.monotonic()
        await asyncio.sleep(1.0)
        assert await client.get("lavin/leader") is not None
        while await client.get("lavin/leader") is not None:
            assert time.monotonic() - granted < 6, "the leased key outlived its TTL"
            await asyncio.sleep(0.1)
        return time.monotonic() - granted

    assert run([etcd.endpoint], body) >= 1.5


def test_a_dead_first_endpoint_is_skipped(etcd: EtcdServer, closed_port: int) -> None:
    async def body(client: EtcdClient) -> None:
        for round_ in range(3):
            await client.put("lavin/key", str(round_))
            found = await client.get("lavin/key")
            assert found is not None
            assert found.value == str(round_)

    run([f"127.0.0.1:{closed_port}", etcd.endpoint], body)


def test_a_killed_etcd_gives_etcd_error_then_a_restarted_one_answers_again(etcd: EtcdServer) -> None:
    async def body(client: EtcdClient) -> None:
        await client.put("lavin/leader", "node-1")
        etcd.kill()
        started = time.monotonic()
        with pytest.raises(EtcdError, match="no etcd endpoint answered"):
            await client.get("lavin/leader")
        assert time.monotonic() - started < 2.5
        etcd.restart()
        leader = await client.get("lavin/leader")
        assert leader is not None
        assert leader.value == "node-1"
        etcd.stop()
        with pytest.raises(EtcdError):
            await client.grant_lease(5)
        etcd.restart()
        assert await client.grant_lease(5) > 0

    run([etcd.endpoint], body)


def test_a_silent_endpoint_times_out_with_etcd_error() -> None:
    # A listener that never accepts: the kernel completes the handshake, nobody answers.
    with socket.create_server(("127.0.0.1", 0)) as silent:
        endpoint = f"127.0.0.1:{silent.getsockname()[1]}"

        async def body(client: EtcdClient) -> None:
            started = time.monotonic()
            with pytest.raises(EtcdError, match=r"no answer within 0\.5 s"):
                await client.keep_alive(1)
            assert 0.4 < time.monotonic() - started < 2.0

        run([endpoint], body, timeout=0.5)


def test_endpoint_statuses_report_the_dead_and_the_live(etcd: EtcdServer, closed_port: int) -> None:
    dead = f"http://127.0.0.1:{closed_port}"
    statuses = run([dead, etcd.endpoint], lambda client: client.endpoint_statuses())
    assert [status.endpoint for status in statuses] == [dead, etcd.endpoint]
    assert not statuses[0].healthy
    assert statuses[0].version is None
    assert statuses[0].error
    assert statuses[1].healthy
    assert statuses[1].version and statuses[1].version[0].isdigit()
    assert statuses[1].error is None


def test_a_cut_proxy_gives_etcd_error_until_restored(etcd: EtcdServer) -> None:
    with CuttableProxy("127.0.0.1", etcd.client_port) as proxy:

        async def body(client: EtcdClient) -> None:
            await client.put("lavin/leader", "node-1")
            proxy.cut()
            await asyncio.sleep(0.1)  # the client sees its pooled connection end
            for _ in range(3):  # new connections are refused too
                with pytest.raises(EtcdError):
                    await client.get("lavin/leader")
            proxy.restore()
            leader = await client.get("lavin/leader")
            assert leader is not None
            assert leader.value == "node-1"

        run([f"127.0.0.1:{proxy.port}"], body)


class _BadAnswers(http.server.BaseHTTPRequestHandler):
    """Answers each path with something etcd never sends."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path == "/v3/kv/txn":  # hang up without an answer
            self.close_connection = True
            return
        answers = {
            "/v3/kv/range": b'{"kvs": [{"key": "%%%", "value": ""}]}',
            "/v3/kv/put": b"not json",
            "/v3/lease/grant": b"[" * 100_000,
            "/v3/lease/keepalive": b"x" * (2 * 1024 * 1024),
        }
        answer = answers.get(self.path, b"{}")
        self.send_response(200)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def bad_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _BadAnswers)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda client: client.get("k"), "not base64"),
        (lambda client: client.put("k", "v"), "not a JSON object"),
        (lambda client: client.grant_lease(5), "not a JSON object"),
        (lambda client: client.keep_alive(1), "an answer over 1048576 bytes"),
        (lambda client: client.delete_if_equal("k", "v"), "ServerDisconnectedError"),
    ],
)
def test_answers_etcd_never_sends_give_etcd_error(
    bad_server: str, call: Callable[[EtcdClient], Awaitable[object]], message: str
) -> None:
    async def body(client: EtcdClient) -> None:
        with pytest.raises(EtcdError, match=message):
            await call(client)

    run([bad_server], body)
