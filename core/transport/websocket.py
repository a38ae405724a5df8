"""AMQP over WebSocket (subprotocol "amqp", as LavinMQ and RabbitMQ Web-AMQP): binary
messages carry the AMQP byte stream in any chunking, and the AMQP connection sees an
asyncio stream transport, flow control included, as over TCP.

What the connection writes in one pass of the event loop goes out as one binary message.
Its writes are whole frames, so every message holds whole frames: browser clients such as
@cloudamqp/amqp-client reassemble frames split across messages, but not every client does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Final

from aiohttp import WSCloseCode, WSMsgType, hdrs, web
from lavin.transport.unix import client_address, describe, local_address

log = logging.getLogger(__name__)

SUBPROTOCOL: Final = "amqp"
CLOSE_TIMEOUT: Final = 10.0  # seconds to send what is buffered and the close frame, then the socket is dropped
DEFAULT_HIGH_WATER: Final = 64 * 1024  # asyncio's defaults for a stream transport
DEFAULT_LOW_WATER: Final = DEFAULT_HIGH_WATER // 4
AMQP_FRAME_OVERHEAD: Final = 8  # an AMQP frame's 7-byte header and frame-end octet


def add_amqp_websocket_route(
    app: web.Application, path: str, protocol_factory: Callable[[], asyncio.Protocol], *, frame_max: int
) -> None:
    """Serve AMQP over WebSocket at `path`; when the app shuts down, its WebSockets are
    closed (1001, going away) so that the shutdown does not wait for the clients.
    A message is held to one frame of the broker's `frame_max` (a payload of up to frame_max
    and its framing), as over TCP: aiohttp buffers a message whole before handing it on, so
    a larger limit would let a client that has not logged in make the broker hold that
    much. The negotiated frame_max is never larger, and the AMQP parser holds each frame to it."""
    app[OPEN_WEBSOCKETS] = set()
    max_message_size = frame_max + AMQP_FRAME_OVERHEAD + 1  # aiohttp refuses a message of max_msg_size itself

    async def handle(request: web.Request) -> web.StreamResponse:
        return await serve_amqp_websocket(request, protocol_factory, max_message_size=max_message_size)

    app.router.add_get(path, handle)
    app.on_shutdown.append(_close_open_websockets)


async def serve_amqp_websocket(
    request: web.Request, protocol_factory: Callable[[], asyncio.Protocol], *, max_message_size: int = 0
) -> web.StreamResponse:
    """Upgrade to a WebSocket and run one AMQP connection over it until either side ends it.
    `max_message_size`: the largest WebSocket message taken (0: any); a larger one closes
    the WebSocket with 1009."""
    http = request.transport
    assert http is not None  # a request being handled has its connection
    offered = [
        name.strip() for value in request.headers.getall(hdrs.SEC_WEBSOCKET_PROTOCOL, []) for name in value.split(",")
    ]
    if offered and SUBPROTOCOL not in offered:
        reason = f"the WebSocket subprotocol must be '{SUBPROTOCOL}', the client offered {', '.join(offered)!r}"
        log.warning("WebSocket upgrade from %s refused: %s", describe(client_address(http)), reason)
        return web.Response(status=400, text=reason)
    websocket = web.WebSocketResponse(protocols=(SUBPROTOCOL,), compress=False, max_msg_size=max_message_size)
    await websocket.prepare(request)
    protocol = protocol_factory()
    transport = WebSocketTransport(websocket, http, protocol)
    open_websockets = request.app[OPEN_WEBSOCKETS]
    open_websockets.add(transport)
    error: Exception | None = None
    try:
        protocol.connection_made(transport)
        error = await transport.relay_incoming()
    finally:
        try:
            await transport.finish()
        finally:
            open_websockets.discard(transport)
            protocol.connection_lost(error)
    return websocket


class WebSocketTransport(asyncio.Transport):
    """What the AMQP connection writes to and pauses: binary messages on one WebSocket.
    The bytes not yet handed to the socket count against the write buffer limits."""

    def __init__(self, websocket: web.WebSocketResponse, http: asyncio.Transport, protocol: asyncio.Protocol) -> None:
        super().__init__()
        self._websocket = websocket
        self._http = http  # the HTTP connection the WebSocket runs on
        self._peername = client_address(http)
        self._sockname = local_address(http)
        self._protocol = protocol
        self._loop = asyncio.get_running_loop()
        self._pending: list[bytes] = []
        self._unsent = 0  # bytes written and not yet taken by the socket
        self._high_water = DEFAULT_HIGH_WATER
        self._low_water = DEFAULT_LOW_WATER
        self._writing_paused = False
        self._sender: asyncio.Task[None] | None = None
        self._reading = asyncio.Event()  # clear while the protocol paused reading
        self._reading.set()
        self._closing = False
        self._closer: asyncio.Task[None] | None = None
        self._close_code = WSCloseCode.OK

    # ---- reading -------------------------------------------------------------------------

    async def relay_incoming(self) -> Exception | None:
        """Hand binary messages to the protocol until the WebSocket ends or a side closes it;
        a message is not read while reading is paused, so the client's TCP window fills.
        Returns the error that ended it, if any."""
        websocket = self._websocket
        while not self._closing:
            if not self._reading.is_set():
                await self._reading.wait()
                continue
            message = await websocket.receive()
            if message.type is WSMsgType.BINARY:
                self._protocol.data_received(message.data)
            elif message.type is WSMsgType.TEXT:
                log.warning("WebSocket from %s sent a text message, AMQP is binary: closed", describe(self._peername))
                self.end(WSCloseCode.UNSUPPORTED_DATA)
                return None
            elif message.type is WSMsgType.ERROR:  # aiohttp closed it already (1009 for a message too big)
                log.warning("WebSocket from %s closed: %s", describe(self._peername), message.data)
                return message.data if isinstance(message.data, Exception) else None
            else:  # closed by the client or by close(), or the socket is gone
                return None
        return None

    def pause_reading(self) -> None:
        self._reading.clear()

    def resume_reading(self) -> None:
        self._reading.set()

    # ---- writing -------------------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing or not data:
            return
        self._pending.append(bytes(data))
        self._unsent += len(data)
        if self._sender is None:  # runs after this pass: what else it writes joins the message
            self._sender = self._loop.create_task(self._send_pending())
        if not self._writing_paused and self._unsent > self._high_water:
            self._writing_paused = True
            self._protocol.pause_writing()

    async def _send_pending(self) -> None:
        try:
            while self._pending:
                data = b"".join(self._pending)
                self._pending.clear()
                await self._websocket.send_bytes(data)  # waits while the socket's buffer is full
                self._unsent -= len(data)
                if self._writing_paused and self._unsent <= self._low_water:
                    self._writing_paused = False
                    self._protocol.resume_writing()
        except ConnectionError:  # the socket is gone: as a TCP transport whose write failed
            self.abort()
        finally:
            self._sender = None

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        if high is None:
            high = DEFAULT_HIGH_WATER if low is None else 4 * low
        if low is None:
            low = high // 4
        if not high >= low >= 0:
            raise ValueError(f"high ({high!r}) must be >= low ({low!r}) must be >= 0")
        self._high_water = high
        self._low_water = low

    def get_write_buffer_size(self) -> int:
        return self._unsent + self._http.get_write_buffer_size()

    # ---- closing -------------------------------------------------------------------------

    def close(self) -> None:
        """Send what is buffered, then the close frame (1000)."""
        self.end(WSCloseCode.OK)

    def end(self, code: WSCloseCode) -> None:
        """Close with `code` once what is buffered is sent."""
        if self._closer is None:
            self._close_code = code
            self._begin_closing()

    def abort(self) -> None:
        """Drop the socket at once; what is buffered is lost."""
        self._closing = True
        self._pending.clear()
        self._reading.set()  # a paused reader must see it
        self._http.abort()

    def is_closing(self) -> bool:
        return self._closing

    async def finish(self) -> None:
        """Close (if not closed yet) and wait until the closing is done."""
        await self._begin_closing()

    def _begin_closing(self) -> asyncio.Task[None]:
        self._closing = True
        self._reading.set()  # a paused reader must see it
        if self._closer is None:
            self._closer = self._loop.create_task(self._flush_and_close())
        return self._closer

    async def _flush_and_close(self) -> None:
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT):
                if self._sender is not None:
                    await self._sender
                await self._websocket.close(code=self._close_code)
        except TimeoutError:  # a client that does not read holds no socket forever
            self._http.abort()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        """The HTTP connection's: its peer and local addresses, TLS details."""
        if name == "peername":
            return self._peername
        if name == "sockname":
            return self._sockname
        return self._http.get_extra_info(name, default)


OPEN_WEBSOCKETS: Final = web.AppKey("open_amqp_websockets", set[WebSocketTransport])


async def _close_open_websockets(app: web.Application) -> None:
    open_websockets = app[OPEN_WEBSOCKETS]
    for transport in list(open_websockets):
        transport.end(WSCloseCode.GOING_AWAY)
