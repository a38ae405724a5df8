"""The node's lease in etcd, the cluster's keys, and how the leader is chosen.

Every node holds a lease it keeps alive; its record `<prefix>/nodes/<name>` and, on the
leader, `<prefix>/leader` are put with it, so they vanish when the node dies. A node stands
for election only when etcd's ISR (`<prefix>/isr`) names it, or names nobody yet (a new
cluster); the first to create the leader key wins. A leader that has not heard back from
etcd for FENCE_AFTER seconds steps down before its lease can have run out (TTL seconds after
the last keep-alive etcd answered), so two leaders never serve at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from dataclasses import asdict, dataclass
from typing import Final

from lavin.clustering.etcd import EtcdClient, EtcdError

log = logging.getLogger(__name__)

LEASE_TTL: Final = 6  # seconds etcd keeps a lease without a keep-alive
KEEP_ALIVE_INTERVAL: Final = 1.0
FENCE_AFTER: Final = LEASE_TTL * 0.6  # seconds without an answer from etcd before a leader steps down


@dataclass(frozen=True)
class NodeRecord:
    """What the other nodes and clients need to reach a node."""

    name: str
    replication: str  # host:port of its replication listener
    amqp: str | None
    http: str | None

    def encode(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @staticmethod
    def decode(text: str) -> NodeRecord | None:
        try:
            fields = json.loads(text)
            return NodeRecord(str(fields["name"]), str(fields["replication"]), fields.get("amqp"), fields.get("http"))
        except (ValueError, KeyError, TypeError):
            return None


class ClusterKeys:
    def __init__(self, prefix: str) -> None:
        prefix = prefix.rstrip("/")
        self.leader = f"{prefix}/leader"
        self.isr = f"{prefix}/isr"
        self.secret = f"{prefix}/clustering_secret"
        self.nodes = f"{prefix}/nodes/"

    def node(self, name: str) -> str:
        return self.nodes + name


async def shared_secret(etcd: EtcdClient, keys: ClusterKeys) -> str:
    """The cluster's secret: the first node makes it, every node reads it."""
    await etcd.put_if_absent(keys.secret, secrets.token_hex(32))
    stored = await etcd.get(keys.secret)
    if stored is None:
        raise EtcdError("the clustering secret vanished as it was written")
    return stored.value


def encode_isr(names: list[str]) -> str:
    return json.dumps(names, separators=(",", ":"))


def decode_isr(text: str | None) -> list[str] | None:
    if text is None:
        return None
    try:
        names = json.loads(text)
    except ValueError:
        return None
    return [str(name) for name in names] if isinstance(names, list) else None


class NodeLease:
    """This node's lease, kept alive for as long as the node runs."""

    def __init__(self, etcd: EtcdClient) -> None:
        self.etcd = etcd
        self.lease_id = 0
        self.answered_at = 0.0  # loop time of the last keep-alive etcd answered (sent at)
        self.renewed = asyncio.Event()  # set whenever a new lease was granted

    async def grant(self) -> None:
        loop = asyncio.get_running_loop()
        sent = loop.time()
        self.lease_id = await self.etcd.grant_lease(LEASE_TTL)
        self.answered_at = sent
        self.renewed.set()

    def fenced(self) -> bool:
        """True when etcd may have let the lease run out by now, or soon."""
        return asyncio.get_running_loop().time() - self.answered_at > FENCE_AFTER

    async def keep_alive(self) -> None:
        """Forever: keep the lease alive; grant a new one when etcd lost it."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(KEEP_ALIVE_INTERVAL)
            sent = loop.time()
            try:
                if self.lease_id and await self.etcd.keep_alive(self.lease_id) > 0:
                    self.answered_at = sent
                    continue
                log.warning("The node's etcd lease ran out; granting a new one")
                self.lease_id = 0
                await self.grant()
            except EtcdError as exc:
                log.warning("etcd did not answer the lease keep-alive: %s", exc)

    async def revoke(self) -> None:
        if self.lease_id:
            try:
                await self.etcd.revoke_lease(self.lease_id)
            except EtcdError as exc:
                log.warning("Could not revoke the node's lease: %s", exc)
            self.lease_id = 0
