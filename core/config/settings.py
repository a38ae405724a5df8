"""Broker settings: a plain dataclass plus a LavinMQ-style INI loader.

Precedence is command line > environment > config file > defaults. The CLI resolves the
first two (click knows where each value came from) and hands them to `resolve_config`.

Which plugins are installed is read here too, from package metadata only: `lavin plugins`
lists them without importing any plugin code, and the plugin registry picks from them.
"""

from __future__ import annotations

import configparser
import ipaddress
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Final

log = logging.getLogger(__name__)

MiB = 1024 * 1024
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
EVENT_LOOPS = ("auto", "asyncio", "uvloop")
# LavinMQ's level names, so its config files work unchanged.
LOG_LEVEL_ALIASES = {"warn": "warning", "fatal": "critical"}
EXCHANGE_GROUP = "lavin.exchanges"
QUEUE_GROUP = "lavin.queues"
AUTH_GROUP = "lavin.auth"
HOOK_PLUGIN_GROUP = "lavin.plugins"
# Lavin's own entry points in these groups are loaded without being enabled: the core
# exchange types, queue types and auth backend, as RabbitMQ's core types need no plugin.
ALWAYS_ON_GROUPS = (EXCHANGE_GROUP, QUEUE_GROUP, AUTH_GROUP)
# The entry-point groups plugins are installed in: `lavin plugins` lists them and the
# `plugins` setting may name any of their entry points.
PLUGIN_GROUPS = (
    *ALWAYS_ON_GROUPS,
    HOOK_PLUGIN_GROUP,
    "lavin.shovel.sources",
    "lavin.shovel.destinations",
)
CORE_DISTRIBUTION = "lavin"
# `[plugin.NAME]` sections of the INI file hold the settings of plugin NAME.
PLUGIN_SECTION_PREFIX = "plugin."


class StartupError(Exception):
    """A setting, plugin or data directory the broker cannot start with.

    The CLI prints the message and exits non-zero, without a traceback.
    """


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


@dataclass(frozen=True)
class InstalledPlugin:
    """One entry point of a plugin group, read from package metadata without importing it."""

    group: str
    name: str
    distribution: str
    version: str

    @property
    def always_on(self) -> bool:
        """Loaded whatever the `plugins` setting says; every other plugin must be named there."""
        return self.distribution == CORE_DISTRIBUTION and self.group in ALWAYS_ON_GROUPS


def installed_plugins() -> list[InstalledPlugin]:
    """Every entry point of every plugin group, by group (in PLUGIN_GROUPS order), then name."""
    found = []
    for group in PLUGIN_GROUPS:
        for entry_point in sorted(entry_points(group=group), key=lambda ep: ep.name):
            dist = entry_point.dist
            name, version = (dist.name, dist.version) if dist is not None else ("?", "?")
            found.append(InstalledPlugin(group, entry_point.name, name, version))
    return found


def _optional_path(text: str) -> Path | None:
    return Path(text) if text else None


def _comma_list(text: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in text.split(",") if item.strip())


def parse_boolean(text: str) -> bool:
    """INI booleans as configparser reads them: true/false, yes/no, on/off, 1/0."""
    value = configparser.ConfigParser.BOOLEAN_STATES.get(text.lower())
    if value is None:
        raise ValueError("expected true or false")
    return value


# RabbitMQ's information units, in any case: decimal (kB, MB, ...) and binary (K, Ki, KiB, ...).
BYTE_UNITS: Mapping[str, int] = {
    "": 1,
    **{letter + "b": 1000**power for power, letter in enumerate("kmgt", 1)},
    **{letter + suffix: 1024**power for power, letter in enumerate("kmgt", 1) for suffix in ("", "i", "ib")},
}


def parse_bytes(text: str) -> int:
    """A number of bytes with an optional unit, as RabbitMQ's config takes it: `50000000`,
    `50MB` (10^6 each), `512MiB`, `512Mi` or `512M` (2^20 each)."""
    match = re.fullmatch(r"(\d+)\s*([A-Za-z]*)", text)
    if match is None or match[2].lower() not in BYTE_UNITS:
        raise ValueError("expected a number of bytes with an optional unit (kB, MB, GB, TB, KiB, MiB, GiB, TiB)")
    return int(match[1]) * BYTE_UNITS[match[2].lower()]


# INI (section, key) -> Config field and how to parse the text.
INI_KEYS: Mapping[tuple[str, str], tuple[str, Callable[[str], Any]]] = {
    ("main", "data_dir"): ("data_dir", Path),
    ("main", "plugins"): ("plugins", _comma_list),
    ("main", "log_level"): ("log_level", str),
    ("main", "segment_size"): ("segment_size", int),
    ("main", "auth_backends"): ("auth_backends", _comma_list),
    ("main", "default_vhost"): ("default_vhost", str),
    ("main", "default_user"): ("default_user", str),
    ("main", "default_password"): ("default_password", str),
    ("main", "default_user_only_loopback"): ("default_user_only_loopback", parse_boolean),
    ("main", "consumer_timeout"): ("consumer_timeout", int),
    ("main", "max_queues"): ("max_queues", int),
    ("main", "vm_memory_high_watermark.relative"): ("vm_memory_high_watermark", float),
    ("main", "vm_memory_high_watermark.absolute"): ("vm_memory_high_watermark_absolute", parse_bytes),
    ("main", "disk_free_limit.absolute"): ("disk_free_limit", parse_bytes),
    ("main", "control_unix_path"): ("control_unix_path", _optional_path),
    ("main", "load_definitions"): ("load_definitions", _optional_path),
    ("main", "metrics_http_bind"): ("metrics_http_bind", str),
    ("main", "metrics_http_port"): ("metrics_http_port", int),
    ("main", "collect_statistics_interval"): ("collect_statistics_interval", int),
    ("main", "tls_cert"): ("tls_cert", _optional_path),
    ("main", "tls_key"): ("tls_key", _optional_path),
    ("main", "tls_ca_cert"): ("tls_ca_cert", _optional_path),
    ("main", "tls_min_version"): ("tls_min_version", str),
    ("main", "tls_ciphers"): ("tls_ciphers", str),
    ("main", "tls_verify_peer"): ("tls_verify_peer", parse_boolean),
    ("main", "tls_fail_if_no_peer_cert"): ("tls_fail_if_no_peer_cert", parse_boolean),
    ("main", "tls_cert_login_from"): ("tls_cert_login_from", str),
    ("main", "tls_cert_login_san_type"): ("tls_cert_login_san_type", str),
    ("main", "tls_cert_login_san_index"): ("tls_cert_login_san_index", int),
    ("mgmt", "bind"): ("http_bind", str),
    ("mgmt", "port"): ("http_port", int),
    ("mgmt", "tls_port"): ("https_port", int),
    ("mgmt", "unix_path"): ("http_unix_path", _optional_path),
    ("amqp", "bind"): ("bind", str),
    ("amqp", "port"): ("amqp_port", int),
    ("amqp", "tls_port"): ("amqps_port", int),
    ("amqp", "unix_path"): ("amqp_unix_path", _optional_path),
    ("amqp", "tcp_proxy_protocol"): ("tcp_proxy_protocol", parse_boolean),
    ("amqp", "proxy_protocol_trusted_sources"): ("proxy_protocol_trusted_sources", _comma_list),
    ("amqp", "heartbeat"): ("heartbeat", int),
    ("amqp", "frame_max"): ("frame_max", int),
    ("amqp", "channel_max"): ("channel_max", int),
    ("amqp", "max_message_size"): ("max_message_size", int),
}


def read_config_file(path: Path) -> dict[str, Any]:
    """Config field values set in an INI file. Unknown keys are logged and skipped, so a
    LavinMQ config file with settings Lavin lacks still loads."""
    parser = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=("#", ";"))
    try:
        with open(path, encoding="utf-8") as file:
            parser.read_file(file)
    except (OSError, configparser.Error) as exc:
        raise StartupError(f"cannot read config file {path}: {exc}") from exc
    values: dict[str, Any] = {}
    plugin_settings: dict[str, dict[str, str]] = {}
    for section in parser.sections():
        if section.startswith(PLUGIN_SECTION_PREFIX):
            name = section.removeprefix(PLUGIN_SECTION_PREFIX)
            plugin_settings[name] = {key: text.strip() for key, text in parser.items(section)}
        else:
            values.update(_known_settings(path, section, parser.items(section)))
    if plugin_settings:
        values["plugin_settings"] = plugin_settings
    return values


def _known_settings(path: Path, section: str, items: Iterable[tuple[str, str]]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for key, text in items:
        target = INI_KEYS.get((section, key))
        if target is None:
            log.warning("%s: ignoring unknown setting [%s] %s", path, section, key)
            continue
        field_name, parse = target
        try:
            values[field_name] = parse(text.strip())
        except ValueError as exc:
            raise StartupError(f"{path}: [{section}] {key} = {text!r}: {exc}") from exc
    return values


def resolve_config(explicit: Mapping[str, Any], config_file: Path | None = None) -> Config:
    """Defaults, overlaid by the config file, overlaid by explicit (CLI or env) values."""
    known = {f.name for f in fields(Config)}
    unknown = set(explicit) - known
    if unknown:
        raise StartupError(f"unknown settings: {', '.join(sorted(unknown))}")
    values = read_config_file(config_file) if config_file is not None else {}
    values.update(explicit)
    return Config(**values)
