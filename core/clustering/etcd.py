"""An asyncio client for etcd's v3 JSON gateway: the few calls leader election needs.

The gateway takes JSON over HTTP POST (`/v3/kv/range`, `/v3/kv/txn`, `/v3/lease/grant`...),
with keys and values in base64 and int64 fields as JSON strings. It needs no generated gRPC
stubs and no dependency beyond aiohttp (docs/dependencies.md, "etcd client").

Every failure, an unreachable cluster, a timeout, an etcd restart midway or an error
answer, surfaces as `EtcdError`, never as an aiohttp exception.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

# etcd's answers to these calls are a few hundred bytes; a peer sending more is not etcd.
MAX_ANSWER_BYTES = 1024 * 1024

# gRPC codes that say "this member cannot answer now" (no leader, member stopping, request
# timed out inside etcd): another endpoint may do better.
_GRPC_UNAVAILABLE = 14
_GRPC_DEADLINE_EXCEEDED = 4
_GRPC_NOT_FOUND = 5


class EtcdError(Exception):
    """etcd could not be reached on any endpoint, did not answer in time, or answered an error."""


class _LeaseNotFound(EtcdError):
    """The lease to revoke is already gone."""


class _EndpointDown(Exception):
    """One endpoint failed in a way that another endpoint may not: try the next one."""


@dataclass(frozen=True)
class KeyValue:
    key: str
    value: str
    create_revision: int
    mod_revision: int
    lease: int


@dataclass(frozen=True)
class EndpointStatus:
    endpoint: str
    healthy: bool
    version: str | None
    error: str | None


def normalize_endpoint(endpoint: str) -> str:
    """ "host:port" or "http://host:port" (or https) as a base URL without a trailing slash."""
    url = endpoint.strip().rstrip("/")
    if "://" not in url:
        url = f"http://{url}"
    scheme, _, rest = url.partition("://")
    if scheme not in ("http", "https") or not rest:
        raise ValueError(f"not an etcd endpoint (http://host:port or host:port): {endpoint!r}")
    return url


def _encode(text: str) -> str:
    return base64.b64encode(text.encode()).decode("ascii")


def _decode(field: object) -> str:
    if not isinstance(field, str):
        raise EtcdError(f"etcd answered a non-string where base64 was expected: {field!r:.80}")
    try:
        return base64.b64decode(field, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError) as error:
        raise EtcdError(f"etcd answered a key or value that is not base64 of UTF-8: {error}") from None


def _int(answer: dict[str, Any], name: str) -> int:
    """An int64 field: a JSON string (or number), absent when it is 0."""
    field = answer.get(name, 0)
    if isinstance(field, bool) or not isinstance(field, (str, int)):
        raise EtcdError(f"etcd answered a non-integer {name}: {field!r:.80}")
    try:
        return int(field)
    except ValueError:
        raise EtcdError(f"etcd answered a non-integer {name}: {field!r:.80}") from None


def _error_of(answer: dict[str, Any]) -> tuple[int, str] | None:
    """The gRPC code and message of an error answer (unary or streaming shape), else None."""
    error = answer.get("error")
    if error is None:
        return None
    if isinstance(error, dict):  # a streaming call's error: {"error": {"grpc_code", "message"}}
        return _int(error, "grpc_code"), str(error.get("message", ""))
    return _int(answer, "code"), str(answer.get("message", error))


class EtcdClient:
    """A client of one etcd cluster, over any of its members' client URLs."""

    def __init__(self, endpoints: Sequence[str], *, request_timeout: float = 2.0) -> None:
        if isinstance(endpoints, str) or not endpoints:
            raise ValueError("EtcdClient needs a non-empty list of endpoints")
        self._endpoints = [normalize_endpoint(endpoint) for endpoint in endpoints]
        self._request_timeout = request_timeout
        self._session: aiohttp.ClientSession | None = None
        self._closed = False
        self._preferred = 0  # the endpoint that answered last is tried first

    @property
    def endpoints(self) -> list[str]:
        return list(self._endpoints)

    async def close(self) -> None:
        self._closed = True
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    async def get(self, key: str) -> KeyValue | None:
        answer = await self._call("/v3/kv/range", {"key": _encode(key)})
        kvs = answer.get("kvs") or []
        if not isinstance(kvs, list) or not kvs or not isinstance(kvs[0], dict):
            return None
        found = kvs[0]
        return KeyValue(
            key=_decode(found.get("key", "")),
            value=_decode(found.get("value", "")),
            create_revision=_int(found, "create_revision"),
            mod_revision=_int(found, "mod_revision"),
            lease=_int(found, "lease"),
        )

    async def put(self, key: str, value: str, *, lease: int = 0) -> None:
        await self._call("/v3/kv/put", self._put_request(key, value, lease))

    async def put_if_absent(self, key: str, value: str, *, lease: int = 0) -> bool:
        compare = {"key": _encode(key), "target": "CREATE", "result": "EQUAL", "create_revision": "0"}
        return await self._txn(compare, {"request_put": self._put_request(key, value, lease)})

    async def put_if_equal(self, key: str, value: str, *, guard_key: str, guard_value: str) -> bool:
        compare = {"key": _encode(guard_key), "target": "VALUE", "result": "EQUAL", "value": _encode(guard_value)}
        return await self._txn(compare, {"request_put": self._put_request(key, value, 0)})

    async def delete_if_equal(self, key: str, value: str) -> bool:
        compare = {"key": _encode(key), "target": "VALUE", "result": "EQUAL", "value": _encode(value)}
        return await self._txn(compare, {"request_delete_range": {"key": _encode(key)}})

    async def grant_lease(self, ttl: int) -> int:
        answer = await self._call("/v3/lease/grant", {"TTL": str(ttl)})
        lease_id = _int(answer, "ID")
        if lease_id == 0:
            raise EtcdError(f"etcd granted no lease of {ttl} s")
        return lease_id

    async def keep_alive(self, lease_id: int) -> int:
        answer = await self._call("/v3/lease/keepalive", {"ID": str(lease_id)})
        result = answer.get("result", answer)  # a streaming call wraps each answer in "result"
        if not isinstance(result, dict):
            raise EtcdError("etcd answered a keep-alive without a result")
        return _int(result, "TTL")

    async def revoke_lease(self, lease_id: int) -> None:
        with contextlib.suppress(_LeaseNotFound):  # already expired or revoked: what revoking wanted
            await self._call("/v3/lease/revoke", {"ID": str(lease_id)})

    async def endpoint_statuses(self) -> list[EndpointStatus]:
        return list(await asyncio.gather(*(self._status(endpoint) for endpoint in self._endpoints)))

    async def _status(self, endpoint: str) -> EndpointStatus:
        try:
            answer = await self._post(endpoint, "/v3/maintenance/status", {})
            version = answer.get("version")
            version = version if isinstance(version, str) else None
            leader = _int(answer, "leader")
        except (_EndpointDown, EtcdError) as error:
            return EndpointStatus(endpoint, healthy=False, version=None, error=str(error))
        if alarms := answer.get("errors"):
            return EndpointStatus(endpoint, healthy=False, version=version, error=f"{alarms!s:.200}")
        if leader == 0:
            return EndpointStatus(endpoint, healthy=False, version=version, error="the member has no leader")
        return EndpointStatus(endpoint, healthy=True, version=version, error=None)

    @staticmethod
    def _put_request(key: str, value: str, lease: int) -> dict[str, str]:
        request = {"key": _encode(key), "value": _encode(value)}
        if lease:
            request["lease"] = str(lease)
        return request

    async def _txn(self, compare: dict[str, str], success: dict[str, Any]) -> bool:
        answer = await self._call("/v3/kv/txn", {"compare": [compare], "success": [success]})
        return answer.get("succeeded") is True  # proto3 JSON leaves out a false bool

    async def _call(self, path: str, request: dict[str, Any]) -> dict[str, Any]:
        """Ask the preferred endpoint, then each other one in turn; EtcdError when none answers."""
        failures: list[str] = []
        count = len(self._endpoints)
        for attempt in range(count):
            index = (self._preferred + attempt) % count
            try:
                answer = await self._post(self._endpoints[index], path, request)
            except _EndpointDown as failure:
                failures.append(str(failure))
                continue
            self._preferred = index
            return answer
        raise EtcdError(f"no etcd endpoint answered {path}: " + "; ".join(failures))

    async def _post(self, endpoint: str, path: str, request: dict[str, Any]) -> dict[str, Any]:
        if self._closed:
            raise EtcdError("the etcd client is closed")
        url = endpoint + path
        try:
            async with asyncio.timeout(self._request_timeout):
                async with self._open_session().post(url, json=request) as response:
                    status = response.status
                    body = await _read_capped(response, url)
        except TimeoutError:
            raise _EndpointDown(f"{url}: no answer within {self._request_timeout} s") from None
        except (aiohttp.ClientError, OSError) as error:
            raise _EndpointDown(f"{url}: {type(error).__name__}: {error}") from None
        try:
            answer = json.loads(body)
        except (ValueError, RecursionError):  # not JSON, or nested deeper than the parser goes
            answer = None
        if not isinstance(answer, dict):
            if status != 200:
                raise _EndpointDown(f"{url}: HTTP {status}")
            raise EtcdError(f"{url}: the answer is not a JSON object")
        failure = _error_of(answer)
        if failure is None:
            if status == 200:
                return answer
            failure = (0, f"HTTP {status}")
        code, message = failure
        if code in (_GRPC_UNAVAILABLE, _GRPC_DEADLINE_EXCEEDED):
            raise _EndpointDown(f"{url}: {message:.200}")
        if code == _GRPC_NOT_FOUND and path == "/v3/lease/revoke":
            raise _LeaseNotFound(message)
        raise EtcdError(f"{url}: etcd answered an error (code {code}): {message:.200}")

    def _open_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        return self._session


async def _read_capped(response: aiohttp.ClientResponse, url: str) -> bytes:
    body = bytearray()
    while chunk := await response.content.read(64 * 1024):
        body += chunk
        if len(body) > MAX_ANSWER_BYTES:
            raise EtcdError(f"{url}: an answer over {MAX_ANSWER_BYTES} bytes")
    return bytes(body)
