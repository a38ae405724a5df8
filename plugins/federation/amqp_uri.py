"""AMQP URIs as RabbitMQ reads them: `amqp[s]://user:password@host:port/vhost?query`.

An empty host (`amqp://`, `amqp:///vhost`) means the broker the link runs in; an empty
path means the default vhost the caller gives (the link's own vhost). The vhost is one
percent-decoded path segment, so `/` is written `%2F`.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from urllib.parse import parse_qs, quote, unquote, urlsplit

from lavin.api import InvalidEndpoint

PORTS = {"amqp": 5672, "amqps": 5671}
DEFAULT_HEARTBEAT = 60  # seconds asked for unless the URI says `heartbeat`
DEFAULT_CONNECTION_TIMEOUT = 30.0  # seconds for TCP, TLS and the whole handshake


@dataclass(frozen=True)
class AmqpUri:
    scheme: str
    host: str  # "" for this broker
    port: int
    username: str
    password: str = field(repr=False)
    vhost: str
    heartbeat: int = DEFAULT_HEARTBEAT
    connection_timeout: float = DEFAULT_CONNECTION_TIMEOUT
    verify_peer: bool = True
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    server_name: str | None = None

    @property
    def is_local(self) -> bool:
        return not self.host

    def redacted(self) -> str:
        """The URI with the password left out, for status and headers."""
        user = f"{quote(self.username, safe='')}@" if self.username and not self.is_local else ""
        host = f"[{self.host}]" if ":" in self.host else self.host
        port = f":{self.port}" if self.host else ""
        return f"{self.scheme}://{user}{host}{port}/{quote(self.vhost, safe='')}"

    def tls_context(self) -> ssl.SSLContext | None:
        if self.scheme != "amqps":
            return None
        context = ssl.create_default_context(cafile=self.ca_file)
        if not self.verify_peer:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.cert_file is not None:
            context.load_cert_chain(self.cert_file, self.key_file)
        return context


def parse_uri(uri: object, default_vhost: str = "/") -> AmqpUri:
    """Parse `uri`, raising InvalidEndpoint with what is wrong."""
    if not isinstance(uri, str):
        raise InvalidEndpoint(f"URI must be a string, not {uri!r}")
    try:
        parts = urlsplit(uri)
        port = parts.port
    except ValueError as error:
        raise InvalidEndpoint(f"Unable to parse URI {uri!r}: {error}") from None
    if parts.scheme not in PORTS:
        raise InvalidEndpoint(f"Unable to parse URI {uri!r}: the scheme must be amqp or amqps")
    if parts.fragment:
        raise InvalidEndpoint(f"Unable to parse URI {uri!r}: a fragment is not allowed")
    path = parts.path.removeprefix("/")
    if "/" in path:
        raise InvalidEndpoint(f"Unable to parse URI {uri!r}: the vhost must be one path segment (write / as %2F)")
    query = _query(uri, parts.query)
    verify = query.get("verify", "verify_peer")
    if verify not in ("verify_peer", "verify_none"):
        raise InvalidEndpoint(f"Unable to parse URI {uri!r}: verify must be verify_peer or verify_none")
    timeout_ms = _number(uri, query, "connection_timeout", 0, minimum=1)
    return AmqpUri(
        scheme=parts.scheme,
        host=parts.hostname or "",
        port=port or PORTS[parts.scheme],
        username=unquote(parts.username) if parts.username is not None else "guest",
        password=unquote(parts.password) if parts.password is not None else "guest",
        vhost=unquote(path) if path else default_vhost,
        heartbeat=_number(uri, query, "heartbeat", DEFAULT_HEARTBEAT, minimum=0),
        connection_timeout=timeout_ms / 1000 if timeout_ms else DEFAULT_CONNECTION_TIMEOUT,
        verify_peer=verify == "verify_peer",
        ca_file=query.get("cacertfile"),
        cert_file=query.get("certfile"),
        key_file=query.get("keyfile"),
        server_name=query.get("server_name_indication"),
    )


def _query(uri: str, query: str) -> dict[str, str]:
    try:
        values = parse_qs(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError as error:
        raise InvalidEndpoint(f"Unable to parse URI {uri!r}: {error}") from None
    return {key: found[-1] for key, found in values.items()}


def _number(uri: str, query: dict[str, str], key: str, default: int, *, minimum: int) -> int:
    text = query.get(key)
    if text is None:
        return default
    if not text.isdigit() or int(text) < minimum:
        raise InvalidEndpoint(f"Unable to parse URI {uri!r}: {key} must be an integer >= {minimum}, not {text!r}")
    return int(text)
