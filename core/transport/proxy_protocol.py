"""The PROXY protocol (HAProxy's, versions 1 and 2): a load balancer in front of the broker
opens each connection with a header naming the real client, so that logs, the management
API and the loopback-only rule see the client rather than the balancer.

A header is taken only from trusted sources, and auto-detected there: a trusted client
may connect directly too. From anyone else a header closes the connection.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import struct
from collections.abc import Callable, Iterable
from typing import Any, cast

from lavin.transport.unix import client_address, describe, local_address

log = logging.getLogger(__name__)

V1_PREFIX = b"PROXY "
V1_MAX_LENGTH = 107  # the spec's bound, CRLF included
V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"
V2_FIXED = struct.Struct("!12sBBH")  # signature, version and command, family, address length
V2_IPV4 = struct.Struct("!4s4sHH")
V2_IPV6 = struct.Struct("!16s16sHH")
V2_LOCAL, V2_PROXY = 0x20, 0x21
V2_UNSPEC, V2_TCP4, V2_TCP6 = 0x00, 0x11, 0x21
HEADER_TIMEOUT = 10.0  # seconds, as for the AMQP handshake

Address = tuple[str, int]


class MalformedHeader(Exception):
    pass


def header_length(data: bytes) -> int | None:
    """How long the PROXY header at the start of `data` is: 0 when `data` does not start
    with one, None while too little has arrived to tell. Raises MalformedHeader."""
    for prefix in (V1_PREFIX, V2_SIGNATURE):
        compared = min(len(data), len(prefix))
        if data[:compared] != prefix[:compared]:
            continue
        if len(data) < len(prefix):
            return None
        if prefix is V1_PREFIX:
            end = data.find(b"\r\n", 0, V1_MAX_LENGTH)
            if end < 0:
                if len(data) >= V1_MAX_LENGTH:
                    raise MalformedHeader(f"a version 1 header longer than {V1_MAX_LENGTH} bytes")
                return None
            return end + 2
        if len(data) < V2_FIXED.size:
            return None
        address_length: int = V2_FIXED.unpack_from(data)[3]
        return V2_FIXED.size + address_length
    return 0


def parse_header(header: bytes) -> Address | None:
    """The client's address a complete header names; None when it names none (a v1
    UNKNOWN, a v2 LOCAL command, an unspecified family): the connection is then direct."""
    if header.startswith(V1_PREFIX):
        return _parse_v1(header[len(V1_PREFIX) : -2].decode("ascii", "replace"))
    _, command, family, _ = V2_FIXED.unpack_from(header)
    if command == V2_LOCAL:
        return None
    if command != V2_PROXY:
        raise MalformedHeader(f"unknown version 2 command byte 0x{command:02x}")
    addresses = header[V2_FIXED.size :]
    if family == V2_UNSPEC:
        return None
    layout = {V2_TCP4: V2_IPV4, V2_TCP6: V2_IPV6}.get(family)
    if layout is None:
        raise MalformedHeader(f"unsupported version 2 address family 0x{family:02x}")
    if len(addresses) < layout.size:
        raise MalformedHeader("version 2 addresses shorter than their family")
    source, _, source_port, _ = layout.unpack_from(addresses)
    return str(ipaddress.ip_address(source)), source_port


def _parse_v1(text: str) -> Address | None:
    fields = text.split(" ")
    if fields[0] == "UNKNOWN":
        return None
    if len(fields) != 5 or fields[0] not in ("TCP4", "TCP6"):
        raise MalformedHeader(f"version 1 header {text!r} is not 'TCP4|TCP6 source destination sport dport'")
    try:
        source = ipaddress.ip_address(fields[1])
        ipaddress.ip_address(fields[2])
        ports = [int(port) for port in fields[3:]]
    except ValueError as exc:
        raise MalformedHeader(f"version 1 header {text!r}: {exc}") from None
    if source.version != (4 if fields[0] == "TCP4" else 6) or not all(0 <= port <= 65535 for port in ports):
        raise MalformedHeader(f"version 1 header {text!r} has a wrong address or port")
    return str(source), ports[0]


class TrustedSources:
    """Addresses and networks a PROXY header is accepted from; `everyone` for unix sockets,
    whose clients are local processes."""

    def __init__(self, sources: Iterable[str], everyone: bool = False) -> None:
        self.networks = [ipaddress.ip_network(source, strict=False) for source in sources]
        self.everyone = everyone

    def trust(self, peer: Any) -> bool:
        if self.everyone:
            return True
        if not isinstance(peer, tuple):
            return False
        try:
            address = ipaddress.ip_address(str(peer[0]).split("%", 1)[0])
        except ValueError:
            return False
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return any(address in network for network in self.networks)


class TransportView:
    """The socket's transport with other addresses: the client a PROXY header names, or a
    unix socket's client as a local one. Everything else is the transport's own methods,
    bound once, so writing through the view costs nothing more."""

    def __init__(self, transport: asyncio.Transport, peername: Address, sockname: Any) -> None:
        self._transport = transport
        self._extra = {"peername": peername, "sockname": sockname}
        self.write = transport.write
        self.writelines = transport.writelines
        self.close = transport.close
        self.abort = transport.abort
        self.is_closing = transport.is_closing
        self.pause_reading = transport.pause_reading
        self.resume_reading = transport.resume_reading
        self.is_reading = transport.is_reading
        self.set_write_buffer_limits = transport.set_write_buffer_limits
        self.get_write_buffer_size = transport.get_write_buffer_size
        self.get_write_buffer_limits = transport.get_write_buffer_limits
        self.can_write_eof = transport.can_write_eof
        self.write_eof = transport.write_eof
        self.get_protocol = transport.get_protocol
        self.set_protocol = transport.set_protocol

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name in self._extra:
            return self._extra[name]
        return self._transport.get_extra_info(name, default)


class ProxyHeaderReader(asyncio.Protocol):
    """Reads a PROXY header, if one comes, then hands the socket to the protocol `make`
    returns (which from then on gets the socket's data directly)."""

    def __init__(self, make: Callable[[], asyncio.Protocol], trusted: TrustedSources) -> None:
        self.make = make
        self.trusted = trusted
        self.transport: asyncio.Transport | None = None
        self.peer = ""
        self.peername: Any = None
        self.received = b""
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.peername = client_address(transport)
        self.peer = describe(self.peername)
        self._timer = asyncio.get_running_loop().call_later(HEADER_TIMEOUT, self._timed_out)

    def data_received(self, data: bytes) -> None:
        self.received += data
        try:
            length = header_length(self.received)
            if length is None:
                return
            if length and not self.trusted.trust(self.peername):
                log.warning("PROXY protocol header from untrusted source %s: closed", self.peer)
                self._close()
                return
            if length and len(self.received) < length:
                return
            claimed = parse_header(self.received[:length]) if length else None
        except MalformedHeader as exc:
            log.warning("malformed PROXY protocol header from %s: %s", self.peer, exc)
            self._close()
            return
        self._hand_over(claimed or self.peername, self.received[length:])

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()

    def _hand_over(self, peername: Address, rest: bytes) -> None:
        self._cancel_timer()
        transport = self.transport
        assert transport is not None
        protocol = self.make()
        transport.set_protocol(protocol)
        view = TransportView(transport, peername, local_address(transport))
        protocol.connection_made(cast(asyncio.Transport, view))
        if rest:
            protocol.data_received(rest)

    def _timed_out(self) -> None:
        self._timer = None
        if self.received:
            log.warning("malformed PROXY protocol header from %s: incomplete after %g s", self.peer, HEADER_TIMEOUT)
        else:
            log.warning("connection from %s did not finish the handshake in time", self.peer)
        if self.transport is not None:
            self.transport.abort()

    def _close(self) -> None:
        self._cancel_timer()
        if self.transport is not None:
            self.transport.close()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
