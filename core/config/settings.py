"""Broker settings: a plain dataclass, checked when it is made."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from lavin.config.errors import StartupError

MiB = 1024 * 1024
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
EVENT_LOOPS = ("auto", "asyncio", "uvloop")
# LavinMQ's level names, so its config files work unchanged.
LOG_LEVEL_ALIASES = {"warn": "warning", "fatal": "critical"}
TLS_VERSIONS = ("1.2", "1.3")
CERT_LOGIN_FIELDS = ("common_name", "distinguished_name", "subject_alternative_name")
CERT_LOGIN_SAN_TYPES = ("dns", "ip", "email", "uri")

# A listener port of -1 turns that listener off.
DISABLED_PORT: Final = -1
MAX_PORT: Final = 65535


@dataclass
class Config:
    data_dir: Path = Path("lavin-data")
    bind: str = "127.0.0.1"
    amqp_port: int = 5672
    plugins: tuple[str, ...] = ()
    log_level: str = "info"
    loop: str = "auto"
    heartbeat: int = 60  # seconds; the server's suggestion in connection.tune
    frame_max: int = 131072
    channel_max: int = 2047
    max_message_size: int = 128 * MiB
    segment_size: int = 8 * MiB
    auth_backends: tuple[str, ...] = ("internal",)
    default_vhost: str = "/"
    # The user created with the default vhost on the first start (users.json absent), as
    # RabbitMQ's default_user, default_pass and loopback_users = [default_user].
    default_user: str = "guest"
    default_password: str = "guest"
    default_user_only_loopback: bool = True
    # ms a delivery may stay unacknowledged before its channel is closed (RabbitMQ's
    # default, 30 minutes); 0 disables the check. A queue's x-consumer-timeout overrides it.
    consumer_timeout: int = 1_800_000
    # Queues the broker holds at most, across vhosts (RabbitMQ's cluster_queue_limit); 0: no limit.
    max_queues: int = 0
    # Resource alarms, with RabbitMQ's names and defaults: publishers are blocked while the
    # broker's resident memory is above the high watermark (a fraction of the machine's
    # memory, or bytes when the absolute one is set) or the data dir's file system has
    # fewer free bytes than disk_free_limit.
    vm_memory_high_watermark: float = 0.4
    vm_memory_high_watermark_absolute: int | None = None
    disk_free_limit: int = 50_000_000
    # The control socket `lavin ctl` talks to (LavinMQ's control_unix_path); None: <data_dir>/control.sock.
    control_unix_path: Path | None = None
    # A definitions file (RabbitMQ's JSON) imported on every start, after users and vhosts load.
    load_definitions: Path | None = None
    # The management HTTP API and web UI ([mgmt] bind / port, LavinMQ's names) and the
    # unauthenticated Prometheus endpoint (RabbitMQ's port). Port 0: any free port; -1: off.
    http_bind: str = "127.0.0.1"
    http_port: int = 15672
    metrics_http_bind: str = "127.0.0.1"
    metrics_http_port: int = 15692
    # ms between samples of the message statistics (RabbitMQ's collect_statistics_interval).
    collect_statistics_interval: int = 5000
    # TLS (LavinMQ's and RabbitMQ's names): the AMQPS and HTTPS listeners open only when a
    # certificate is set. The key may sit in the certificate file.
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_ca_cert: Path | None = None
    tls_min_version: str = "1.2"
    tls_ciphers: str = ""  # OpenSSL's cipher list for TLS 1.2; "" keeps OpenSSL's
    # Ask clients for a certificate and verify it against tls_ca_cert; refuse clients without one.
    tls_verify_peer: bool = False
    tls_fail_if_no_peer_cert: bool = False
    # Where SASL EXTERNAL reads the user name from (RabbitMQ's ssl_cert_login_from, san_type, san_index).
    tls_cert_login_from: str = "common_name"
    tls_cert_login_san_type: str = "dns"
    tls_cert_login_san_index: int = 0
    amqps_port: int = 5671
    https_port: int = 15671
    amqp_unix_path: Path | None = None
    http_unix_path: Path | None = None
    # PROXY protocol v1/v2 headers, accepted from these addresses or networks only.
    tcp_proxy_protocol: bool = False
    proxy_protocol_trusted_sources: tuple[str, ...] = ()
    # plugin name -> its `[plugin.NAME]` section, handed to the plugin's lavin_configure hook
    plugin_settings: dict[str, dict[str, str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.data_dir = Path(self.data_dir)
        self.control_unix_path = Path(self.control_unix_path) if self.control_unix_path else None
        self.load_definitions = Path(self.load_definitions) if self.load_definitions else None
        for name in ("tls_cert", "tls_key", "tls_ca_cert", "amqp_unix_path", "http_unix_path"):
            value = getattr(self, name)
            setattr(self, name, Path(value) if value else None)
        self.proxy_protocol_trusted_sources = tuple(self.proxy_protocol_trusted_sources)
        self.log_level = LOG_LEVEL_ALIASES.get(self.log_level.lower(), self.log_level.lower())
        self.plugins = tuple(self.plugins)
        self.auth_backends = tuple(self.auth_backends)
        if self.log_level not in LOG_LEVELS:
            raise StartupError(f"log_level must be one of {', '.join(LOG_LEVELS)}")
        if self.loop not in EVENT_LOOPS:
            raise StartupError(f"loop must be one of {', '.join(EVENT_LOOPS)}")
        if not 0 <= self.amqp_port <= 65535:
            raise StartupError(f"amqp port {self.amqp_port} is out of range")
        if self.heartbeat < 0 or self.heartbeat > 65535:
            raise StartupError("heartbeat must be between 0 and 65535 seconds")
        # 4096 is the smallest frame_max AMQP 0-9-1 allows a peer to insist on.
        if not 4096 <= self.frame_max <= 2**32 - 1:
            raise StartupError("frame_max must be between 4096 and 4294967295")
        if not 0 <= self.channel_max <= 65535:
            raise StartupError("channel_max must be between 0 and 65535")
        if self.max_message_size <= 0:
            raise StartupError("max_message_size must be positive")
        # Positions within a segment are u32.
        if not 4096 <= self.segment_size <= 2**32:
            raise StartupError("segment_size must be between 4096 bytes and 4 GiB")
        if self.consumer_timeout < 0:
            raise StartupError("consumer_timeout must be 0 (disabled) or a positive number of milliseconds")
        if self.max_queues < 0:
            raise StartupError("max_queues must be 0 (no limit) or a positive number of queues")
        if self.vm_memory_high_watermark < 0 or (self.vm_memory_high_watermark_absolute or 0) < 0:
            raise StartupError("vm_memory_high_watermark must not be negative")
        if self.disk_free_limit < 0:
            raise StartupError("disk_free_limit must not be negative")
        if self.collect_statistics_interval <= 0:
            raise StartupError("collect_statistics_interval must be a positive number of milliseconds")
        if not self.auth_backends:
            raise StartupError("auth_backends must name at least one backend")
        if not self.default_user:
            raise StartupError("default_user must not be empty")
        self._check_tls()
        if self.tcp_proxy_protocol and not self.proxy_protocol_trusted_sources:
            raise StartupError("tcp_proxy_protocol needs proxy_protocol_trusted_sources (addresses or networks)")
        for source in self.proxy_protocol_trusted_sources:
            try:
                ipaddress.ip_network(source, strict=False)
            except ValueError:
                raise StartupError(f"proxy_protocol_trusted_sources: {source!r} is not an address or network") from None
        for name in ("http_port", "metrics_http_port", "amqps_port", "https_port"):
            if not DISABLED_PORT <= getattr(self, name) <= MAX_PORT:
                raise StartupError(f"{name} must be a port number, 0 for any free port or -1 for none")

    def _check_tls(self) -> None:
        self.tls_min_version = self.tls_min_version.removeprefix("TLSv")
        if self.tls_min_version not in TLS_VERSIONS:
            raise StartupError(f"tls_min_version must be one of {', '.join(TLS_VERSIONS)}")
        if self.tls_cert_login_from not in CERT_LOGIN_FIELDS:
            raise StartupError(f"tls_cert_login_from must be one of {', '.join(CERT_LOGIN_FIELDS)}")
        if self.tls_cert_login_san_type not in CERT_LOGIN_SAN_TYPES:
            raise StartupError(f"tls_cert_login_san_type must be one of {', '.join(CERT_LOGIN_SAN_TYPES)}")
        if self.tls_cert_login_san_index < 0:
            raise StartupError("tls_cert_login_san_index must not be negative")
        if self.tls_verify_peer and self.tls_ca_cert is None:
            raise StartupError("tls_verify_peer needs tls_ca_cert, the CA that signs client certificates")

    @property
    def control_socket_path(self) -> Path:
        return self.control_unix_path or self.data_dir / "control.sock"
