"""What a follower serves on the node's ports: AMQP clients passed through to the leader
(or stream reads served here, for the clients that ask),
and a small management app (the cluster's nodes, an overview; every other path answers
that this node is a follower and where the leader is) on the HTTP port and the control
socket."""

from __future__ import annotations

from lavin.broker.runtime.cluster_status import ClusterStatusSource
from lavin.clustering.proxy import ClientSide, LeaderAmqp
from lavin.clustering.start_gate import FollowerAmqp, FollowerPort, FollowerReads
from lavin.config import Config
from lavin.listeners.connection_gate import capped_to_descriptors
from lavin.listeners.control_socket import ControlSocket
from lavin.listeners.http import HttpLimits, HttpListener
from lavin.listeners.prebound import PreboundSockets
from lavin.management.follower_app import build_follower_app


class FollowerFront:
    def __init__(
        self,
        config: Config,
        prebound: PreboundSockets,
        leader_amqp: LeaderAmqp,
        status: ClusterStatusSource,
        reads: FollowerReads,
    ) -> None:
        self.config = config
        self.prebound = prebound
        self.leader_amqp = leader_amqp
        self.status = status
        self.reads = reads
        self._amqp: FollowerAmqp | None = None
        self._http: HttpListener | None = None
        self._control: ControlSocket | None = None

    async def start(self) -> None:
        """Serve the node's ports as a follower (once; again after `stop`)."""
        if self._amqp is not None:
            return
        config = self.config
        clients: set[ClientSide] = set()
        self._amqp = FollowerAmqp(FollowerPort(config, self.leader_amqp, self.reads, clients))
        self._amqp.start(self.prebound)
        if self.prebound.port("http") is not None:
            limits = HttpLimits(capped_to_descriptors(config.http_max_connections), config.http_idle_timeout)
            app = build_follower_app(self.status, config.data_dir, trusted=False)
            self._http = HttpListener(
                app, config.http_bind, 0, "cluster follower's management API", limits, prebound=(self.prebound, "http")
            )
            await self._http.start()
        control_app = build_follower_app(self.status, config.data_dir, trusted=True)
        self._control = ControlSocket(
            control_app, config.control_socket_path, configured=config.control_unix_path is not None
        )
        await self._control.start()

    async def stop(self) -> None:
        if self._amqp is not None:
            self._amqp.stop()
            self._amqp = None
        if self._http is not None:
            await self._http.stop()
            self._http = None
        if self._control is not None:
            await self._control.stop()
            self._control = None
