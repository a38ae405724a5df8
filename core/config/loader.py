"""The config file, INI in LavinMQ's layout, and the order in which settings are taken.

Precedence is command line > environment > config file > defaults. The CLI resolves the
first two (click knows where each value came from) and hands them to `resolve_config`.
"""

from __future__ import annotations

import configparser
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any, Final

from lavin.config.errors import StartupError
from lavin.config.settings import Config
from lavin.config.values import comma_list, optional_path, parse_boolean, parse_bytes

log = logging.getLogger(__name__)

# `[plugin.NAME]` sections of the INI file hold the settings of plugin NAME.
PLUGIN_SECTION_PREFIX: Final = "plugin."

# INI (section, key) -> Config field and how to parse the text.
INI_KEYS: Mapping[tuple[str, str], tuple[str, Callable[[str], Any]]] = {
    ("main", "data_dir"): ("data_dir", Path),
    ("main", "plugins"): ("plugins", comma_list),
    ("main", "log_level"): ("log_level", str),
    ("main", "segment_size"): ("segment_size", int),
    ("main", "auth_backends"): ("auth_backends", comma_list),
    ("main", "default_vhost"): ("default_vhost", str),
    ("main", "default_user"): ("default_user", str),
    ("main", "default_password"): ("default_password", str),
    ("main", "default_user_only_loopback"): ("default_user_only_loopback", parse_boolean),
    ("main", "consumer_timeout"): ("consumer_timeout", int),
    ("main", "max_queues"): ("max_queues", int),
    ("main", "vm_memory_high_watermark.relative"): ("vm_memory_high_watermark", float),
    ("main", "vm_memory_high_watermark.absolute"): ("vm_memory_high_watermark_absolute", parse_bytes),
    ("main", "disk_free_limit.absolute"): ("disk_free_limit", parse_bytes),
    ("main", "control_unix_path"): ("control_unix_path", optional_path),
    ("main", "load_definitions"): ("load_definitions", optional_path),
    ("main", "metrics_http_bind"): ("metrics_http_bind", str),
    ("main", "metrics_http_port"): ("metrics_http_port", int),
    ("main", "collect_statistics_interval"): ("collect_statistics_interval", int),
    ("main", "tls_cert"): ("tls_cert", optional_path),
    ("main", "tls_key"): ("tls_key", optional_path),
    ("main", "tls_ca_cert"): ("tls_ca_cert", optional_path),
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
    ("mgmt", "unix_path"): ("http_unix_path", optional_path),
    ("amqp", "bind"): ("bind", str),
    ("amqp", "port"): ("amqp_port", int),
    ("amqp", "tls_port"): ("amqps_port", int),
    ("amqp", "unix_path"): ("amqp_unix_path", optional_path),
    ("amqp", "tcp_proxy_protocol"): ("tcp_proxy_protocol", parse_boolean),
    ("amqp", "proxy_protocol_trusted_sources"): ("proxy_protocol_trusted_sources", comma_list),
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
