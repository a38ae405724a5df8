"""TLS on the server side of a stream, with `ssl.MemoryBIO`: the protocol the event loop
sees decrypts what arrives and hands the plain bytes to the wrapped protocol (the AMQP
connection, or aiohttp's request handler), which writes through a `TlsTransport`.

Done here rather than by the event loop's `ssl=` so that a failed or stalled handshake is
logged with its reason, a certificate reload only changes which context the next
connection starts with, and the PROXY protocol can come before the handshake.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from typing import Any, cast

from lavin.transport.tls import TlsCertificates
from lavin.transport.unix import client_address, describe

log = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT = 10.0  # seconds, as for the AMQP handshake
READ_SIZE = 256 * 1024


class TlsServerProtocol(asyncio.Protocol):
    def __init__(self, certificates: TlsCertificates, app: asyncio.Protocol) -> None:
        self.certificates = certificates
        self.app = app
        self.raw: asyncio.Transport | None = None
        self.incoming = ssl.MemoryBIO()
        self.outgoing = ssl.MemoryBIO()
        self.ssl: ssl.SSLObject | None = None
        self.app_transport: TlsTransport | None = None  # set once the handshake is done
        self._timer: asyncio.TimerHandle | None = None
        self.peer = ""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        raw = cast(asyncio.Transport, transport)
        self.raw = raw
        self.peer = describe(client_address(raw))
        self.ssl = self.certificates.context.wrap_bio(self.incoming, self.outgoing, server_side=True)
        self._timer = asyncio.get_running_loop().call_later(HANDSHAKE_TIMEOUT, self._handshake_timed_out)

    def data_received(self, data: bytes) -> None:
        self.incoming.write(data)
        if self.app_transport is None and not self._handshake():
            return
        self._read()

    def eof_received(self) -> bool | None:
        return None  # the transport closes itself; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()
        if self.app_transport is not None:
            self.app.connection_lost(exc)

    def pause_writing(self) -> None:
        if self.app_transport is not None:
            self.app.pause_writing()

    def resume_writing(self) -> None:
        if self.app_transport is not None:
            self.app.resume_writing()

    def _handshake(self) -> bool:
        """Go on with the handshake; True once it is done and the app was told."""
        tls = self.ssl
        if tls is None:
            return False
        try:
            tls.do_handshake()
        except ssl.SSLWantReadError:
            self.flush()
            return False
        except ssl.SSLError as exc:
            self.flush()  # the alert that tells the client why
            log.warning("TLS handshake with %s failed: %s", self.peer, describe_ssl_error(exc))
            self._abort()
            return False
        self._cancel_timer()
        self.flush()
        self.app_transport = TlsTransport(self)
        self.app.connection_made(self.app_transport)
        return True

    def _read(self) -> None:
        """Hand everything that decrypts now to the app, in one call when it can."""
        tls = self.ssl
        if tls is None:
            return
        chunks: list[bytes] = []
        while True:
            try:
                chunk = tls.read(READ_SIZE)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:  # the client's close_notify: answered by closing
                self.close()
                break
            except ssl.SSLError as exc:
                log.warning("TLS error on the connection from %s: %s", self.peer, describe_ssl_error(exc))
                self._abort()
                return
            if not chunk:
                break
            chunks.append(chunk)
            if not self.incoming.pending and not tls.pending():
                break
        if self.outgoing.pending:  # a key update or session ticket to answer
            self.flush()
        if chunks:
            self.app.data_received(chunks[0] if len(chunks) == 1 else b"".join(chunks))

    def write(self, data: bytes | bytearray | memoryview) -> None:
        tls = self.ssl
        raw = self.raw
        if tls is None or raw is None or raw.is_closing():
            return
        view = memoryview(data)
        written = 0
        while written < len(view):
            written += tls.write(view[written:])
        raw.write(self.outgoing.read())

    def flush(self) -> None:
        raw = self.raw
        if self.outgoing.pending and raw is not None and not raw.is_closing():
            raw.write(self.outgoing.read())

    def close(self) -> None:
        """close_notify, then close the socket once what is buffered is written."""
        tls = self.ssl
        if tls is not None and self.app_transport is not None:
            # SSLWantReadError: the client's close_notify is not waited for.
            with contextlib.suppress(ssl.SSLError):
                tls.unwrap()
            self.flush()
        if self.raw is not None:
            self.raw.close()

    def _abort(self) -> None:
        if self.raw is not None:
            self.raw.close()  # writes the alert already buffered, then closes

    def _handshake_timed_out(self) -> None:
        self._timer = None
        if self.app_transport is None:
            log.warning("TLS handshake with %s timed out", self.peer)
            if self.raw is not None:
                self.raw.abort()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def describe_ssl_error(exc: ssl.SSLError) -> str:
    """OpenSSL's reason in words: "certificate verify failed: certificate has expired",
    "wrong version number"."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"certificate verify failed: {exc.verify_message}"
    reason = exc.reason
    if reason:
        return str(reason).lower().replace("_", " ")
    return str(exc) or type(exc).__name__


class TlsTransport(asyncio.Transport):
    """What the app writes to: encrypted into the socket; the rest is the socket's."""

    def __init__(self, stream: TlsServerProtocol) -> None:
        super().__init__()
        self._stream = stream
        raw = stream.raw
        assert raw is not None  # made once the handshake is done, on an open socket
        self._raw: asyncio.Transport = raw

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._stream.write(data)

    def writelines(self, list_of_data: Any) -> None:
        self._stream.write(b"".join(list_of_data))

    def close(self) -> None:
        self._stream.close()

    def abort(self) -> None:
        self._raw.abort()

    def is_closing(self) -> bool:
        return self._raw.is_closing()

    def can_write_eof(self) -> bool:
        return False

    def pause_reading(self) -> None:
        self._raw.pause_reading()

    def resume_reading(self) -> None:
        self._raw.resume_reading()

    def is_reading(self) -> bool:
        return self._raw.is_reading()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._raw.set_write_buffer_limits(high, low)

    def get_write_buffer_size(self) -> int:
        return self._raw.get_write_buffer_size()

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._raw.get_write_buffer_limits()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._stream.app = cast(asyncio.Protocol, protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._stream.app

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        tls = self._stream.ssl
        if tls is not None:
            if name == "ssl_object":
                return tls
            if name == "sslcontext":
                return tls.context
            if name == "peercert":
                return tls.getpeercert()
            if name == "cipher":
                return tls.cipher()
            if name == "compression":
                return tls.compression()
        return self._raw.get_extra_info(name, default)
