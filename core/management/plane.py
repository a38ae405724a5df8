"""The management plane's listeners: the control socket (`lavin ctl`), the management
HTTP API and web UI, and the Prometheus endpoint."""

from __future__ import annotations

from lavin.broker.broker import Broker
from lavin.config import DISABLED_PORT, Config
from lavin.management.app import build_app
from lavin.management.control_socket import ControlSocket
from lavin.management.listener import HttpListener
from lavin.management.metrics_routes import build_metrics_app
from lavin.management.metrics_sources import ConnectionChurn


class ManagementPlane:
    def __init__(self, broker: Broker, config: Config) -> None:
        self.broker = broker
        self.churn = ConnectionChurn()  # counted from now on, for the metrics
        self.churn.register(broker)
        self.control = ControlSocket(
            broker, config.control_socket_path, configured=config.control_unix_path is not None
        )
        self.http: HttpListener | None = None
        if config.http_port != DISABLED_PORT:
            app = build_app(broker, trusted=False)
            self.http = HttpListener(app, config.http_bind, config.http_port, "management API and web UI")
        self.metrics: HttpListener | None = None
        if config.metrics_http_port != DISABLED_PORT:
            self.metrics = HttpListener(
                build_metrics_app(broker), config.metrics_http_bind, config.metrics_http_port, "Prometheus metrics"
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
