"""The management plane's listeners: the control socket (`lavin ctl`), the management
HTTP API and web UI (over TCP, TLS and a unix socket; AMQP over WebSocket too), and the
Prometheus endpoint."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from lavin.broker.broker import Broker
from lavin.config import DISABLED_PORT, Config
from lavin.listeners.connection_gate import capped_to_descriptors
from lavin.listeners.control_socket import ControlSocket
from lavin.listeners.http import HttpLimits, HttpListener
from lavin.listeners.prebound import PreboundSockets
from lavin.management.app import build_app
from lavin.management.prometheus.routes import build_metrics_app
from lavin.management.prometheus.sources import ConnectionChurn
from lavin.transport.tls import TlsCertificates


class ManagementPlane:
    def __init__(
        self,
        broker: Broker,
        config: Config,
        *,
        certificates: TlsCertificates | None = None,
        amqp_connection: Callable[[], asyncio.Protocol] | None = None,
        stop_broker: Callable[[], None] | None = None,
        prebound: PreboundSockets | None = None,
    ) -> None:
        """`prebound`: a cluster node's listeners (`http`), served instead of binding;
        `certificates`: the HTTPS listener's, which the API reloads; `amqp_connection`
        makes the AMQP connection a WebSocket on /ws/amqp carries; `stop_broker` is what
        `lavin ctl stop` calls through the control socket."""
        self.broker = broker
        self.churn = ConnectionChurn()  # counted from now on, for the metrics
        self.churn.register(broker)
        control_app = build_app(broker, trusted=True, certificates=certificates, stop_broker=stop_broker)
        self.control = ControlSocket(
            control_app, config.control_socket_path, configured=config.control_unix_path is not None
        )
        limits = HttpLimits(capped_to_descriptors(config.http_max_connections), config.http_idle_timeout)
        self.http: HttpListener | None = None
        https = None
        if certificates is not None and config.https_port != DISABLED_PORT:
            https = (config.https_port, certificates)
        http_port = None if config.http_port == DISABLED_PORT else config.http_port
        if http_port is not None or https is not None or config.http_unix_path is not None:
            app = build_app(
                broker, trusted=False, certificates=certificates, websocket_protocol_factory=amqp_connection
            )
            self.http = HttpListener(
                app,
                config.http_bind,
                http_port,
                "management API and web UI",
                limits,
                tls=https,
                unix_path=config.http_unix_path,
                prebound=None if prebound is None else (prebound, "http"),
            )
        self.metrics: HttpListener | None = None
        if config.metrics_http_port != DISABLED_PORT:
            self.metrics = HttpListener(
                build_metrics_app(broker),
                config.metrics_http_bind,
                config.metrics_http_port,
                "Prometheus metrics",
                limits,
            )

    @property
    def listeners(self) -> list[HttpListener]:
        return [listener for listener in (self.http, self.metrics) if listener is not None]

    async def start(self) -> None:
        """Open every listener; if one cannot open, close those that did (StartupError)."""
        try:
            await self.control.start()
            for listener in self.listeners:
                await listener.start()
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        for listener in self.listeners:
            await listener.stop()
        await self.control.stop()
        self.churn.unregister(self.broker)
