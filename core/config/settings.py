"""Every setting of the broker, declared once: a field of `Config` with its config-file key,
its `lavin serve` flag and env var, its default, its check and its line in the docs.

To add a setting, add a field here, then run `python -m lavin.reference` to redraw the
docs' table; the loader, `lavin serve` and the checks
follow from the field. Settings are listed by topic: `lavin serve --help` shows the flags in
this order, and the docs' table sorts them by config-file section.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from lavin.config.checks import EveryItem, Needs, OneOf, Rule, Within
from lavin.config.declaration import Flag, IniKey, Setting, declared_settings, setting, settle
from lavin.config.values import (
    comma_list,
    every_comma_item,
    is_address_or_network,
    is_octal_mask,
    log_level_name,
    optional_path,
    parse_boolean,
    parse_bytes,
    tls_version_number,
)

MiB: Final = 1024 * 1024
LOG_LEVELS: Final = ("debug", "info", "warning", "error", "critical")
EVENT_LOOPS: Final = ("auto", "asyncio", "uvloop")
TLS_VERSIONS: Final = ("1.2", "1.3")
CERT_LOGIN_FIELDS: Final = ("common_name", "distinguished_name", "subject_alternative_name")
CERT_LOGIN_SAN_TYPES: Final = ("dns", "ip", "email", "uri")

# A listener port of -1 turns that listener off.
DISABLED_PORT: Final = -1
MAX_PORT: Final = 65535
PORT_OR_OFF: Final = Within(DISABLED_PORT, MAX_PORT, "{name} must be a port number, 0 for any free port or -1 for none")
NOT_NEGATIVE: Final = "{name} must not be negative"


@dataclass
class Config:
    # --- the broker as a whole ([main]) ----------------------------------------------------
    data_dir: Path = setting(
        Path("lavin-data"),
        "messages, definitions, users; created if missing; one broker at a time (it holds `<data_dir>/.lock`)",
        ini=IniKey("main", "data_dir", Path),
        flag=Flag("--data-dir", "DIR", "Where messages and definitions are stored.", path="directory"),
        convert=Path,
    )
    umask: str = setting(
        "0027",
        "octal file mode mask the broker sets at start-up, before it creates anything: the default leaves the data "
        "dir `0750` and its files `0640`, so other local users cannot read message bodies "
        "([security.md](security.md#running-lavin-as-its-own-user))",
        ini=IniKey("main", "umask", str),
        flag=Flag("--umask", "MASK", "Octal mask for the files and directories the broker creates."),
        check=Rule(is_octal_mask, "{name} must be an octal mask from 0000 to 0777, such as 0027"),
    )
    log_level: str = setting(
        "info",
        "`debug`, `info`, `warning`, `error`, `critical`",
        ini=IniKey("main", "log_level", str),
        flag=Flag("--log-level", "LEVEL"),
        convert=log_level_name,
        check=OneOf(LOG_LEVELS, ignore_case=True),
    )
    loop: str = setting(
        "auto",
        "event loop: `auto` uses uvloop when it can be imported, `asyncio` never does, `uvloop` fails if it is missing",
        flag=Flag("--loop", "LOOP", "Event loop; auto uses uvloop when it is installed."),
        check=OneOf(EVENT_LOOPS),
    )
    plugins: tuple[str, ...] = setting(
        (),
        "plugins to enable: any name `lavin plugins` lists, or a lifecycle plugin's dotted module path; the flag is "
        "repeatable, the env var a space-separated list, the key comma-separated; the flag or env var replaces the "
        "key's list ([cli.md](cli.md#which-plugins-run))",
        ini=IniKey("main", "plugins", comma_list),
        flag=Flag(
            "--plugin",
            "NAME",
            "Enable a plugin: any name `lavin plugins` lists (built-in types are always on), or a dotted module "
            "path of a lifecycle plugin. Repeatable; the env var takes a space-separated list.",
        ),
        convert=tuple,
    )
    segment_size: int = setting(
        8 * MiB,
        "bytes per segment file of every queue and stream, 4096 to 4 GiB; a stream's "
        "`x-stream-max-segment-size-bytes` overrides it",
        ini=IniKey("main", "segment_size", int),
        # Positions within a segment are u32.
        check=Within(4096, 2**32, "{name} must be between 4096 bytes and 4 GiB"),
    )
    auth_backends: tuple[str, ...] = setting(
        ("internal",),
        "comma-separated names from group `lavin.auth`, asked in order; `internal` is the user database in "
        "`users.json`",
        ini=IniKey("main", "auth_backends", comma_list),
        convert=tuple,
        check=Rule(bool, "{name} must name at least one backend"),
    )
    default_vhost: str = setting(
        "/",
        "vhost created on first start (when `vhosts.json` does not exist yet)",
        ini=IniKey("main", "default_vhost", str),
    )
    # The user created with the default vhost, as RabbitMQ's default_user, default_pass and
    # loopback_users = [default_user].
    default_user: str = setting(
        "guest",
        "user created on first start (when `users.json` does not exist yet), tagged `administrator`, with full "
        "permissions on the default vhost",
        ini=IniKey("main", "default_user", str),
        check=Rule(bool, "{name} must not be empty"),
    )
    default_password: str = setting(
        "guest",
        "that user's password, stored as a salted SHA-256 hash",
        ini=IniKey("main", "default_password", str),
    )
    default_user_only_loopback: bool = setting(
        True,
        "the default user may log in from loopback addresses (127.0.0.0/8, ::1) and unix sockets only, as "
        "RabbitMQ's `loopback_users`; behind a PROXY protocol header the address checked is the client's the "
        "header names",
        ini=IniKey("main", "default_user_only_loopback", parse_boolean),
    )
    consumer_timeout: int = setting(
        1_800_000,  # RabbitMQ's default, 30 minutes
        "ms a delivery may stay unacked before its channel is closed; 0 disables; a queue's `x-consumer-timeout` "
        "overrides it",
        ini=IniKey("main", "consumer_timeout", int),
        check=Within(0, None, "{name} must be 0 (disabled) or a positive number of milliseconds"),
    )
    max_queues: int = setting(
        0,
        "most queues the broker holds, all vhosts together (RabbitMQ's `cluster_queue_limit`); declaring one more "
        "is refused with 406; 0 means no limit",
        ini=IniKey("main", "max_queues", int),
        check=Within(0, None, "{name} must be 0 (no limit) or a positive number of queues"),
    )
    # Resource alarms, with RabbitMQ's names and defaults.
    vm_memory_high_watermark: float = setting(
        0.4,
        "memory alarm: publishers are blocked while the broker's resident memory is above this fraction of the "
        "machine's memory (RabbitMQ's setting; 0 blocks every publish)",
        ini=IniKey("main", "vm_memory_high_watermark.relative", float),
        check=Within(0, None, NOT_NEGATIVE),
    )
    vm_memory_high_watermark_absolute: int | None = setting(
        None,
        "the same threshold in bytes, which wins over the fraction; set it in a container, whose memory limit the "
        "fraction does not see",
        ini=IniKey("main", "vm_memory_high_watermark.absolute", parse_bytes),
        check=Within(0, None, "vm_memory_high_watermark must not be negative"),
    )
    disk_free_limit: int = setting(
        50_000_000,
        "disk alarm: publishers are blocked while the data dir's file system has fewer free bytes; 0 disables",
        ini=IniKey("main", "disk_free_limit.absolute", parse_bytes),
        check=Within(0, None, NOT_NEGATIVE),
        shown_default="`50000000` (`50MB`)",
    )
    control_unix_path: Path | None = setting(
        None,
        "the control socket `lavin ctl` talks to (LavinMQ's setting), created with mode 0600: only the broker's "
        "user and root can use it, without a password",
        ini=IniKey("main", "control_unix_path", optional_path),
        convert=optional_path,
        shown_default="`<data_dir>/control.sock`",
    )
    load_definitions: Path | None = setting(
        None,
        "a definitions file in RabbitMQ's JSON, imported on every start after users and vhosts load (RabbitMQ's "
        "`load_definitions`): additive, the file's users and permissions win; a file that cannot be read, or an "
        "object in it that fails, stops start-up",
        ini=IniKey("main", "load_definitions", optional_path),
        convert=optional_path,
    )
    collect_statistics_interval: int = setting(
        5000,
        "milliseconds between samples of the message rates the management API shows (RabbitMQ's name)",
        ini=IniKey("main", "collect_statistics_interval", int),
        check=Within(1, None, "{name} must be a positive number of milliseconds"),
    )

    # --- AMQP ([amqp]) ---------------------------------------------------------------------
    bind: str = setting(
        "127.0.0.1",
        "the [AMQP](#amqp) and [AMQPS](#amqps) listeners' address; `0.0.0.0` for every IPv4 interface",
        ini=IniKey("amqp", "bind", str),
        flag=Flag("--bind", "ADDRESS", "Address the AMQP listener binds to."),
    )
    amqp_port: int = setting(
        5672,
        "the AMQP listener's port; `0` any free port",
        ini=IniKey("amqp", "port", int),
        flag=Flag("--amqp-port", "PORT", "AMQP listener port."),
        check=Within(0, MAX_PORT, "amqp port {value} is out of range"),
    )
    amqps_port: int = setting(
        5671,
        "the AMQPS listener's port, open when `tls_cert` is set; `0` any free port, `-1` off",
        ini=IniKey("amqp", "tls_port", int),
        flag=Flag(
            "--amqps-port", "PORT", "AMQPS (AMQP over TLS) listener port, open when --tls-cert is set; -1: none."
        ),
        check=PORT_OR_OFF,
    )
    amqp_unix_path: Path | None = setting(
        None,
        "also take AMQP connections on this [unix socket](#unix-sockets)",
        ini=IniKey("amqp", "unix_path", optional_path),
        flag=Flag("--amqp-unix-path", "PATH", "Also take AMQP connections on this unix domain socket.", path="file"),
        convert=optional_path,
    )
    tcp_proxy_protocol: bool = setting(
        False,
        "accept a [PROXY protocol](#proxy-protocol) v1 or v2 header on the AMQP and AMQPS listeners, from "
        "`proxy_protocol_trusted_sources` only",
        ini=IniKey("amqp", "tcp_proxy_protocol", parse_boolean),
        check=Needs(
            "proxy_protocol_trusted_sources", "{name} needs proxy_protocol_trusted_sources (addresses or networks)"
        ),
    )
    proxy_protocol_trusted_sources: tuple[str, ...] = setting(
        (),
        "comma-separated addresses and networks (`10.0.0.5, 10.1.0.0/16, fd00::/8`) whose connections may start "
        "with a PROXY header; required by `tcp_proxy_protocol`",
        ini=IniKey("amqp", "proxy_protocol_trusted_sources", comma_list),
        convert=tuple,
        check=EveryItem(is_address_or_network, "{name}: {item!r} is not an address or network"),
    )
    heartbeat: int = setting(
        60,
        "seconds, the server's suggestion in `connection.tune`; 0 disables",
        ini=IniKey("amqp", "heartbeat", int),
        check=Within(0, 65535, "{name} must be between 0 and 65535 seconds"),
    )
    frame_max: int = setting(
        131072,
        "largest frame in bytes, offered in `connection.tune`",
        ini=IniKey("amqp", "frame_max", int),
        # 4096 is the smallest frame_max AMQP 0-9-1 allows a peer to insist on.
        check=Within(4096, 2**32 - 1, "{name} must be between 4096 and 4294967295"),
    )
    channel_max: int = setting(
        2047,
        "most channels per connection, offered in `connection.tune`",
        ini=IniKey("amqp", "channel_max", int),
        check=Within(0, 65535, "{name} must be between 0 and 65535"),
    )
    max_message_size: int = setting(
        128 * MiB,
        "larger bodies are refused",
        ini=IniKey("amqp", "max_message_size", int),
        check=Within(1, None, "{name} must be positive"),
    )
    max_unfinished_body_bytes: int = setting(
        128 * MiB,
        "most bytes of message bodies one connection may have under way at once, the declared sizes of the bodies "
        "its channels are still receiving added up; a content header that would go past it closes its channel "
        "with 406",
        ini=IniKey("amqp", "max_unfinished_body_bytes", int),
        check=Within(1, None, "{name} must be positive"),
    )

    # --- the management HTTP API and web UI ([mgmt], LavinMQ's names) ---------------------
    http_bind: str = setting(
        "127.0.0.1",
        "the [management HTTP](#http) and [HTTPS](#https) listeners' address",
        ini=IniKey("mgmt", "bind", str),
        flag=Flag("--http-bind", "ADDRESS", "Address the management HTTP API and web UI bind to."),
    )
    http_port: int = setting(
        15672,
        "the management API and web UI's port; `0` any free port, `-1` off",
        ini=IniKey("mgmt", "port", int),
        flag=Flag("--http-port", "PORT", "Management HTTP API and web UI port; -1: none."),
        check=PORT_OR_OFF,
    )
    https_port: int = setting(
        15671,
        "the same over HTTPS, open when `tls_cert` is set; `0` any free port, `-1` off",
        ini=IniKey("mgmt", "tls_port", int),
        flag=Flag("--https-port", "PORT", "Management API over HTTPS, open when --tls-cert is set; -1: none."),
        check=PORT_OR_OFF,
    )
    http_unix_path: Path | None = setting(
        None,
        "also serve the management API, web UI and WebSocket on this [unix socket](#unix-sockets)",
        ini=IniKey("mgmt", "unix_path", optional_path),
        flag=Flag("--http-unix-path", "PATH", "Also serve the management API on this unix domain socket.", path="file"),
        convert=optional_path,
    )
    http_max_connections: int = setting(
        1024,
        "most connections open at once on each HTTP listener (the management API's and the Prometheus "
        "endpoint's, each counting all its addresses), lowered to an eighth of the open file limit; past it a new "
        "connection is closed at once",
        ini=IniKey("mgmt", "max_connections", int),
        flag=Flag("--http-max-connections", "COUNT", "Most open connections per HTTP listener."),
        check=Within(1, None, "{name} must be positive"),
    )
    http_idle_timeout: int = setting(
        15,
        "seconds an HTTP connection may take to send a request's headers, from its opening or the previous "
        "response; an idle keep-alive, a silent or a slow client is then closed; a request body has as long, "
        "plus a second per MiB, else 408",
        ini=IniKey("mgmt", "idle_timeout", int),
        flag=Flag("--http-idle-timeout", "SECONDS", "Close HTTP connections that send no complete request headers."),
        check=Within(1, None, "{name} must be a positive number of seconds"),
    )

    # --- the unauthenticated Prometheus endpoint (RabbitMQ's port) ------------------------
    metrics_http_bind: str = setting(
        "127.0.0.1",
        "the [Prometheus endpoint](#prometheus)'s address",
        ini=IniKey("main", "metrics_http_bind", str),
        flag=Flag("--metrics-http-bind", "ADDRESS", "Address the Prometheus endpoint binds to."),
    )
    metrics_http_port: int = setting(
        15692,
        "its port; `0` any free port, `-1` off",
        ini=IniKey("main", "metrics_http_port", int),
        flag=Flag(
            "--metrics-http-port", "PORT", "Prometheus endpoint port (/metrics without authentication); -1: none."
        ),
        check=PORT_OR_OFF,
    )

    # --- TLS (LavinMQ's and RabbitMQ's names): AMQPS and HTTPS open when tls_cert is set ---
    tls_cert: Path | None = setting(
        None,
        "the server's certificate chain (PEM), leaf first; setting it opens the [AMQPS](#amqps) and "
        "[HTTPS](#https) listeners",
        ini=IniKey("main", "tls_cert", optional_path),
        flag=Flag(
            "--tls-cert",
            "FILE",
            "The server's certificate chain (PEM); turns on the AMQPS and HTTPS listeners.",
            path="file",
        ),
        convert=optional_path,
    )
    tls_key: Path | None = setting(
        None,
        "the certificate's private key (PEM); leave it out when the key is in the `tls_cert` file",
        ini=IniKey("main", "tls_key", optional_path),
        flag=Flag(
            "--tls-key",
            "FILE",
            "The certificate's private key (PEM), unless it is in the --tls-cert file.",
            path="file",
        ),
        convert=optional_path,
    )
    tls_ca_cert: Path | None = setting(
        None,
        "CA certificates (PEM) that client certificates are verified against; needed by `tls_verify_peer`",
        ini=IniKey("main", "tls_ca_cert", optional_path),
        flag=Flag(
            "--tls-ca-cert", "FILE", "CA certificates that client certificates are verified against (PEM).", path="file"
        ),
        convert=optional_path,
    )
    tls_min_version: str = setting(
        "1.2",
        "the oldest TLS version accepted: `1.2` or `1.3` (`TLSv1.2` and `TLSv1.3` are read too)",
        ini=IniKey("main", "tls_min_version", str),
        convert=tls_version_number,
        check=OneOf(TLS_VERSIONS),
    )
    tls_ciphers: str = setting(
        "",
        "OpenSSL cipher list for TLS 1.2 (`ECDHE+AESGCM:ECDHE+CHACHA20`); TLS 1.3's suites are OpenSSL's",
        ini=IniKey("main", "tls_ciphers", str),
        shown_default="OpenSSL's",
    )
    tls_verify_peer: bool = setting(
        False,
        "ask clients for a certificate and verify it against `tls_ca_cert` (RabbitMQ's `verify_peer`); a client "
        "with a certificate that does not verify is turned away",
        ini=IniKey("main", "tls_verify_peer", parse_boolean),
        check=Needs("tls_ca_cert", "{name} needs tls_ca_cert, the CA that signs client certificates"),
    )
    tls_fail_if_no_peer_cert: bool = setting(
        False,
        "with `tls_verify_peer`, also turn away clients that send no certificate (RabbitMQ's `fail_if_no_peer_cert`)",
        ini=IniKey("main", "tls_fail_if_no_peer_cert", parse_boolean),
    )
    # Where SASL EXTERNAL reads the user name from (RabbitMQ's ssl_cert_login_from, san_type, san_index).
    tls_cert_login_from: str = setting(
        "common_name",
        "where SASL EXTERNAL takes the user name from in the client's certificate: `common_name`, "
        "`distinguished_name` (RFC 4514, as `CN=alice,O=example`) or `subject_alternative_name` (RabbitMQ's "
        "`ssl_cert_login_from`)",
        ini=IniKey("main", "tls_cert_login_from", str),
        check=OneOf(CERT_LOGIN_FIELDS),
    )
    tls_cert_login_san_type: str = setting(
        "dns",
        "with `subject_alternative_name`: which kind, `dns`, `ip`, `email` or `uri`",
        ini=IniKey("main", "tls_cert_login_san_type", str),
        check=OneOf(CERT_LOGIN_SAN_TYPES),
    )
    tls_cert_login_san_index: int = setting(
        0,
        "with `subject_alternative_name`: which one of that kind, counted from 0",
        ini=IniKey("main", "tls_cert_login_san_index", int),
        check=Within(0, None, NOT_NEGATIVE),
    )

    # --- clustering ([clustering], LavinMQ's names): replicated nodes, leader elected on etcd ---
    clustering: bool = setting(
        False,
        "run as one node of a cluster: the node elected leader through etcd serves clients, the others replicate "
        "its data dir and take over when it goes ([clustering.md](clustering.md))",
        ini=IniKey("clustering", "enabled", parse_boolean),
        flag=Flag("--clustering", "", "Run as a node of a cluster (leader elected on etcd)."),
    )
    clustering_bind: str = setting(
        "127.0.0.1",
        "the replication listener's address, where followers connect to the leader",
        ini=IniKey("clustering", "bind", str),
        flag=Flag("--clustering-bind", "ADDRESS", "Address the replication listener binds to."),
    )
    clustering_port: int = setting(
        5679,
        "the replication listener's port; `0` any free port",
        ini=IniKey("clustering", "port", int),
        flag=Flag("--clustering-port", "PORT", "Port of the replication listener."),
        check=Within(0, MAX_PORT, "{name} must be a port number, or 0 for any free port"),
    )
    clustering_advertised_uri: str | None = setting(
        None,
        "where the other nodes reach this one, as `tcp://host:port` (default: the bind address and port, which "
        "only works when they are reachable as bound)",
        ini=IniKey("clustering", "advertised_uri", str),
        flag=Flag("--clustering-advertised-uri", "URI", "How the other nodes reach this node's replication port."),
    )
    clustering_etcd_endpoints: tuple[str, ...] = setting(
        ("http://127.0.0.1:2379",),
        "comma-separated etcd client URLs (`http://host:port`), tried in turn; the flag is repeatable",
        ini=IniKey("clustering", "etcd_endpoints", comma_list),
        flag=Flag("--clustering-etcd-endpoints", "URLS", "Comma-separated etcd client URLs."),
        convert=every_comma_item,
        check=Rule(bool, "{name} must name at least one etcd endpoint"),
    )
    clustering_etcd_prefix: str = setting(
        "lavin",
        "the etcd key prefix of this cluster: `<prefix>/leader`, `<prefix>/isr`, `<prefix>/clustering_secret`, "
        "`<prefix>/nodes/<id>`",
        ini=IniKey("clustering", "etcd_prefix", str),
        flag=Flag("--clustering-etcd-prefix", "PREFIX", "etcd key prefix of the cluster."),
        check=Rule(bool, "{name} must not be empty"),
    )
    clustering_on_leader_elected: str | None = setting(
        None,
        "shell command run when this node becomes the leader (to move a virtual IP, say)",
        ini=IniKey("clustering", "on_leader_elected", str),
        flag=Flag("--clustering-on-leader-elected", "COMMAND", "Shell command run when this node becomes leader."),
    )
    clustering_on_leader_lost: str | None = setting(
        None,
        "shell command run when this node stops being the leader",
        ini=IniKey("clustering", "on_leader_lost", str),
        flag=Flag("--clustering-on-leader-lost", "COMMAND", "Shell command run when this node stops being leader."),
    )

    # plugin name -> its `[plugin.NAME]` section, handed to the plugin's lavin_configure hook
    plugin_settings: dict[str, dict[str, str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        settle(self)

    @property
    def control_socket_path(self) -> Path:
        return self.control_unix_path or self.data_dir / "control.sock"


SETTINGS: Final = declared_settings(Config)

# `--config FILE`, the file the settings above are read from. Its option is made by lavin.ctl
# (the file must exist), for `lavin serve` and `lavin ctl`.
CONFIG_FILE_FLAG: Final = Flag(
    "--config",
    "FILE",
    "INI file with [main], [amqp], [mgmt] and [plugin.NAME] sections; flags and env vars override it.",
)
CONFIG_FILE: Final = Setting(
    None,
    "the INI file above; `lavin ctl --config` reads it too, for the control socket's path",
    flag=CONFIG_FILE_FLAG,
)
# `--ready-file FILE`, where `lavin serve` says which ports it bound (for port 0), once all
# its listeners are up; a flag of the command, not a setting of the broker.
READY_FILE_FLAG: Final = Flag(
    "--ready-file",
    "FILE",
    "Once listening, write the ports bound, as JSON, to this file (removed at shutdown). "
    "With port 0 the broker picks free ports; this file says which.",
)
READY_FILE: Final = Setting(
    None,
    "once listening, the broker writes the ports it bound there as JSON (removed at shutdown)",
    flag=READY_FILE_FLAG,
)
