"""A cluster node: one `lavin serve --clustering` process.

It binds its AMQP, HTTP and replication ports once, holds a lease in etcd, and takes one
role at a time: the leader runs the broker on its data dir and streams every change to the
followers; a follower replicates the leader's data dir and passes its clients through to
the leader. Losing the leadership (etcd cut off, the lease gone) stops the broker and
makes the node a follower again; nothing of it ends the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import socket
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Final

from lavin.broker.runtime.cluster_status import FOLLOWER, LEADER, ClusterMember, ClusterState, EtcdHealth
from lavin.clustering import wire
from lavin.clustering.election import ClusterKeys, NodeLease, NodeRecord, decode_isr, encode_isr, shared_secret
from lavin.clustering.etcd import EtcdClient, EtcdError
from lavin.clustering.follower import Follower, LeaderAddress
from lavin.clustering.front import FollowerFront
from lavin.clustering.hooks import run_hook
from lavin.clustering.leader import ReplicationServer
from lavin.clustering.read_horizon import ReadHorizons, ReplicationMark
from lavin.clustering.replicas import InSyncReplicas
from lavin.clustering.stream import ChangeStream
from lavin.config import DISABLED_PORT, Config
from lavin.listeners.prebound import PreboundSockets
from lavin.plugin_registry import Registry
from lavin.readiness import notify_systemd, remove_ready_file, write_ready_file
from lavin.server import STOP_SIGNALS, ClusterAttachments, start_broker
from lavin.storage.changes import CHANGES
from lavin.storage.clean_shutdown import take_clean_shutdown_mark

log = logging.getLogger(__name__)

IDENTITY_FILE: Final = ".clustering_node"  # this node's name; not replicated
POLL_INTERVAL: Final = 0.5  # seconds between looks at the leader key
REFRESH_INTERVAL: Final = 1.0  # seconds between reads of the cluster's records
RETRY_DELAY: Final = 1.0
HAND_OVER_TIMEOUT: Final = 2.0  # seconds a stopping leader waits for its followers to catch up


def node_name(data_dir: Path) -> str:
    """This node's name, made once and kept in its data dir (not replicated)."""
    path = data_dir / IDENTITY_FILE
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        name = f"lavin-{secrets.token_hex(3)}@{socket.gethostname()}"
        partial = path.with_name(IDENTITY_FILE + ".partial")
        partial.write_text(name + "\n")
        partial.replace(path)
        return name


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.removeprefix("tcp://").rpartition(":")
    return host.strip("[]"), int(port)


def reachable_host(bind: str, advertised: str) -> str:
    return advertised if bind in ("0.0.0.0", "::", "") else bind


async def run_cluster_node(config: Config, registry: Registry, ready_file: Path | None) -> None:
    node = ClusterNode(config, registry, ready_file)
    loop = asyncio.get_running_loop()
    for signum in STOP_SIGNALS:
        loop.add_signal_handler(signum, node.stop_requested.set)
    try:
        await node.run()
    finally:
        for signum in STOP_SIGNALS:
            loop.remove_signal_handler(signum)


class ClusterNode:
    def __init__(self, config: Config, registry: Registry, ready_file: Path | None) -> None:
        self.config = config
        self.registry = registry
        self.ready_file = ready_file
        self.name = node_name(config.data_dir)
        self.prebound = PreboundSockets()
        self.etcd = EtcdClient(config.clustering_etcd_endpoints)
        self.keys = ClusterKeys(config.clustering_etcd_prefix)
        self.lease = NodeLease(self.etcd)
        self.stop_requested = asyncio.Event()
        self.secret = ""
        self.record = NodeRecord(self.name, "", None, None)
        self.leader: NodeRecord | None = None
        self.records: dict[str, NodeRecord] = {}
        self.isr: tuple[str, ...] = ()
        self.etcd_health: tuple[EtcdHealth, ...] = ()
        self.progress = (0, 0, False)  # a follower's: stream bytes written, bytes sent, in sync
        self.replicas: InSyncReplicas | None = None
        self.front = FollowerFront(config, self.prebound, self.leader_amqp, self.status, self)
        self._follower: Follower | None = None  # the current replication link
        self.read_horizons = ReadHorizons(self.replication_mark)
        self._ready = False

    # --- the node's life -------------------------------------------------------------------
    async def run(self) -> None:
        # Replication changes the files with no broker on them: a mark of the clean shutdown
        # of a single node run here before must not outlive this start.
        take_clean_shutdown_mark(self.config.data_dir)
        await self._bind()
        background: list[asyncio.Task[None]] = []
        try:
            if not await self._until_etcd(self._join):
                return
            background = [asyncio.ensure_future(self.lease.keep_alive()), asyncio.ensure_future(self._refresh())]
            while not self.stop_requested.is_set():
                await self._next_role()
        finally:
            notify_systemd("STOPPING=1")
            for task in background:
                task.cancel()
            await self.front.stop()
            await self.lease.revoke()
            await self.etcd.close()
            await self.prebound.close()
            if self.ready_file is not None:
                remove_ready_file(self.ready_file)

    async def _bind(self) -> None:
        config = self.config
        amqp_port = await self.prebound.bind("amqp", config.bind, config.amqp_port)
        http_port = None
        if config.http_port != DISABLED_PORT:
            http_port = await self.prebound.bind("http", config.http_bind, config.http_port)
        replication_port = await self.prebound.bind("clustering", config.clustering_bind, config.clustering_port)
        if config.clustering_advertised_uri:
            advertised_host, advertised_port = split_address(config.clustering_advertised_uri)
        else:
            advertised_host, advertised_port = config.clustering_bind, replication_port
        http = None if http_port is None else f"{reachable_host(config.http_bind, advertised_host)}:{http_port}"
        self.record = NodeRecord(
            self.name,
            f"{advertised_host}:{advertised_port}",
            f"{reachable_host(config.bind, advertised_host)}:{amqp_port}",
            http,
        )
        log.info("Cluster node %s; replication listener on %s:%s", self.name, config.clustering_bind, replication_port)

    async def _join(self) -> None:
        self.secret = await shared_secret(self.etcd, self.keys)
        await self.lease.grant()
        await self.etcd.put(self.keys.node(self.name), self.record.encode(), lease=self.lease.lease_id)

    async def _until_etcd(self, step: Callable[[], Awaitable[None]]) -> bool:
        """Run `step` until etcd answers it; False when the node is asked to stop first."""
        while not self.stop_requested.is_set():
            try:
                await step()
                return True
            except EtcdError as exc:
                log.warning("etcd: %s; trying again", exc)
                await self._pause(RETRY_DELAY)
        return False

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop_requested.wait(), seconds)

    async def _refresh(self) -> None:
        """What the status shows: the nodes' records, the ISR, etcd's health; and this
        node's own record again after a new lease."""
        while True:
            try:
                if self.lease.renewed.is_set():
                    self.lease.renewed.clear()
                    await self.etcd.put(self.keys.node(self.name), self.record.encode(), lease=self.lease.lease_id)
                listed = await self.etcd.get_prefix(self.keys.nodes)
                self.records = {
                    record.name: record for kv in listed if (record := NodeRecord.decode(kv.value)) is not None
                }
                isr = await self.etcd.get(self.keys.isr)
                self.isr = tuple(decode_isr(None if isr is None else isr.value) or ())
            except EtcdError as exc:
                log.debug("etcd: %s", exc)
            statuses = await self.etcd.endpoint_statuses()
            self.etcd_health = tuple(
                EtcdHealth(status.endpoint, status.healthy, status.version or status.error or "") for status in statuses
            )
            await asyncio.sleep(REFRESH_INTERVAL)

    def _write_ready(self, serving: Sequence[tuple[str, str, int]] = ()) -> None:
        """Once, when the node first has a role: the ports it holds for its life, and those a
        leader's broker opened besides (`serving`: the Prometheus listener)."""
        if self._ready:
            return
        self._ready = True
        if self.ready_file is not None:
            held = [
                (protocol, bind, port)
                for protocol, bind in (
                    ("amqp", self.config.bind),
                    ("http", self.config.http_bind),
                    ("clustering", self.config.clustering_bind),
                )
                if (port := self.prebound.port(protocol)) is not None
            ]
            others = [listener for listener in serving if listener[0] not in ("amqp", "http")]
            write_ready_file(self.ready_file, held + others)
        notify_systemd("READY=1")

    # --- choosing a role -------------------------------------------------------------------
    async def _next_role(self) -> None:
        try:
            current = await self.etcd.get(self.keys.leader)
            if current is None:
                if await self._eligible() and await self.etcd.put_if_absent(
                    self.keys.leader, self.record.encode(), lease=self.lease.lease_id
                ):
                    await self._lead()
                    return
            else:
                leader = NodeRecord.decode(current.value)
                if leader is not None and leader.name == self.name:
                    if current.lease == self.lease.lease_id:
                        await self._lead()
                        return
                    # Left by this node's previous run: its lease runs out soon.
                elif leader is not None:
                    await self._follow(leader, current.value)
                    return
        except EtcdError as exc:
            log.warning("etcd: %s", exc)
        await self.front.start()
        self._write_ready()
        await self._pause(POLL_INTERVAL)

    async def _eligible(self) -> bool:
        """A node may lead when its data dir is whole and etcd's ISR names it (or nobody)."""
        if not Follower.consistent(self.config.data_dir):
            return False
        stored = await self.etcd.get(self.keys.isr)
        isr = decode_isr(None if stored is None else stored.value)
        return not isr or self.name in isr

    async def _publish_isr(self, names: list[str]) -> bool:
        """Write the ISR, only while the leader key is this node's."""
        try:
            written = await self.etcd.put_if_equal(
                self.keys.isr,
                encode_isr(names),
                guard_key=self.keys.leader,
                guard_value=self.record.encode(),
            )
        except EtcdError as exc:
            log.warning("Could not write the in-sync replicas to etcd: %s", exc)
            return False
        if written:
            self.isr = tuple(names)
        return written

    # --- leading ---------------------------------------------------------------------------
    async def _lead(self) -> None:
        if not await self._publish_isr([self.name]):
            await self._pause(RETRY_DELAY)
            return
        log.info("Node %s is the leader", self.name)
        self.leader = self.record
        await self.front.stop()
        run_hook(self.config.clustering_on_leader_elected, "on_leader_elected")
        stream = ChangeStream(self.config.data_dir, asyncio.get_running_loop())
        replicas = self.replicas = InSyncReplicas(stream, self.name, self._publish_isr)
        CHANGES.sink = stream
        server = ReplicationServer(self.config.data_dir, self.secret, stream, replicas)
        try:
            running = await start_broker(
                self.config,
                self.registry,
                self.stop_requested.set,
                ClusterAttachments(self.name, self.prebound, replicas, self.status),
            )
        except BaseException:
            CHANGES.sink = None
            self.replicas = None
            raise
        server.start(self.prebound)
        self._write_ready(running.broker.listeners)
        watch = asyncio.ensure_future(replicas.watch())
        why = await self._hold_leadership()
        watch.cancel()
        await running.stop()
        if why is None:  # stopping: let the followers write what the shutdown wrote
            await self._hand_over(replicas)
        server.stop()
        CHANGES.sink = None
        self.replicas = None
        self.leader = None
        if why is not None:
            log.warning("Node %s stepped down: %s", self.name, why)
            run_hook(self.config.clustering_on_leader_lost, "on_leader_lost")
        else:
            with contextlib.suppress(EtcdError):
                await self.etcd.delete_if_equal(self.keys.leader, self.record.encode())

    async def _hold_leadership(self) -> str | None:
        """Until the node is asked to stop (None) or must step down (why)."""
        checked = 0.0
        loop = asyncio.get_running_loop()
        while True:
            await self._pause(POLL_INTERVAL / 2)
            if self.stop_requested.is_set():
                return None
            if self.lease.fenced():
                return "etcd has not answered for too long; the lease may run out"
            if loop.time() - checked < POLL_INTERVAL:
                continue
            checked = loop.time()
            try:
                current = await self.etcd.get(self.keys.leader)
            except EtcdError:
                continue  # the fence above decides
            if current is None or current.value != self.record.encode() or current.lease != self.lease.lease_id:
                return "the leader key is not this node's any more"

    async def _hand_over(self, replicas: InSyncReplicas) -> None:
        deadline = asyncio.get_running_loop().time() + HAND_OVER_TIMEOUT
        while replicas.members and replicas.replicated() < replicas.position:
            if asyncio.get_running_loop().time() > deadline:
                return
            await asyncio.sleep(0.05)

    # --- following -------------------------------------------------------------------------
    async def _follow(self, leader: NodeRecord, leader_value: str) -> None:
        self.leader = leader
        await self.front.start()
        self._write_ready()
        follower = self._follower = Follower(self.config.data_dir, self.name, self.secret, self._progressed)
        host, port = split_address(leader.replication)
        task = asyncio.ensure_future(follower.run(LeaderAddress(host, port)))
        try:
            while not task.done() and not self.stop_requested.is_set():
                await asyncio.wait({task}, timeout=POLL_INTERVAL)
                with contextlib.suppress(EtcdError):
                    current = await self.etcd.get(self.keys.leader)
                    if current is None or current.value != leader_value:
                        break
        finally:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            except (OSError, TimeoutError, wire.ProtocolError) as exc:  # look at the leader key again
                log.warning("Replication from %s ended: %s", leader.name, exc)
                await self._pause(RETRY_DELAY)
            self.progress = (0, 0, False)
            self._follower = None
            self.leader = None  # until the leader key names one again: clients are not passed to a gone leader

    def _progressed(self, written: int, sent: int, in_sync: bool) -> None:
        self.progress = (written, sent, in_sync)

    # --- what the node knows ---------------------------------------------------------------
    def leader_amqp(self) -> tuple[str, int] | None:
        leader = self.leader
        if leader is None or leader.amqp is None or leader.name == self.name:
            return None
        return split_address(leader.amqp)

    def reads_allowed(self) -> bool:
        """A follower serves stream reads while etcd's ISR names it and its data dir is whole."""
        return self.name in self.isr and Follower.consistent(self.config.data_dir)

    def replication_mark(self) -> ReplicationMark | None:
        """Where the current link's stream stands, once it made the data dir whole (any thread)."""
        follower = self._follower
        if follower is None or not follower.whole:
            return None
        return ReplicationMark(follower, follower.applying_to, follower.replicated)

    def status(self) -> ClusterState:
        leader = self.leader.name if self.leader is not None else None
        records = dict(self.records)
        records[self.name] = self.record
        members = []
        for name, record in sorted(records.items()):
            lag_bytes: int | None = None
            lag_seconds: float | None = None
            replica = None if self.replicas is None else self.replicas.replicas.get(name)
            if replica is not None and self.replicas is not None:
                lag_bytes, lag_seconds = self.replicas.lag(replica)
            elif name == self.name and leader != self.name:
                written, sent, _ = self.progress
                lag_bytes = max(0, sent - written)
            members.append(
                ClusterMember(
                    name=name,
                    role=LEADER if name == leader else FOLLOWER,
                    in_sync=name in self.isr,
                    replication_uri=f"tcp://{record.replication}",
                    amqp=record.amqp,
                    http=record.http,
                    lag_bytes=lag_bytes,
                    lag_seconds=lag_seconds,
                )
            )
        return ClusterState(self.name, leader, tuple(members), self.isr, self.etcd_health)
