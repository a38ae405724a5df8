"""A WebSocket-to-TCP adapter for the tests: a loopback TCP listener whose every connection
is carried over a new WebSocket to the broker's /ws/amqp (subprotocol "amqp"), so that pika
and `lavin.client.wire` speak AMQP over WebSocket unchanged. What the client sends goes out
in binary messages cut wherever its reads end (a message may hold part of a frame or several
frames); binary messages from the broker are written back to the client as they come.

It runs an aiohttp client in an event loop of its own, in a thread. `tls` checks a wss://
broker; `unix_path` reaches the management listener's unix socket (the URL's host is then
only the Host header).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, Self, TypeVar

import aiohttp

READ_SIZE = 64 * 1024
T = TypeVar("T")


class WebSocketBridge:
    def __init__(
        self,
        websocket_url: str,
        *,
        username: str = "guest",
        password: str = "guest",
        tls: ssl.SSLContext | None = None,
        unix_path: str | None = None,
    ) -> None:
        self.websocket_url = websocket_url
        self.tls = tls
        self.unix_path = unix_path
        self.credentials = f"{username}:{password}"
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="websocket-bridge", daemon=True)
        self._server: asyncio.Server | None = None
        self._session: aiohttp.ClientSession | None = None
        self._reading: asyncio.Event | None = None  # cleared: the bridge reads nothing from the broker
        self._websockets: set[aiohttp.ClientWebSocketResponse] = set()
        self._relays: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        return f"amqp://{self.credentials}@127.0.0.1:{self.port}/%2F"

    def __enter__(self) -> Self:
        self._thread.start()
        self._run(self._start())
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self._run(self._stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    def pause_reading(self) -> None:
        """Stop reading from the broker, as a client that does not read."""
        self._loop.call_soon_threadsafe(self._event().clear)

    def resume_reading(self) -> None:
        self._loop.call_soon_threadsafe(self._event().set)

    def vanish(self, partial: bytes) -> None:
        """Send `partial` (part of a frame) on every WebSocket, then drop their TCP connections
        without a close frame, as a client that died."""
        self._run(self._vanish(partial))

    def _event(self) -> asyncio.Event:
        assert self._reading is not None
        return self._reading

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(10)

    async def _start(self) -> None:
        self._reading = asyncio.Event()
        self._reading.set()
        connector = aiohttp.UnixConnector(self.unix_path) if self.unix_path is not None else None
        self._session = aiohttp.ClientSession(connector=connector)
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _stop(self) -> None:
        """Drop every connection at once: a client the broker does not read (blocked) would
        not answer a close frame."""
        assert self._server is not None and self._session is not None
        self._server.close()
        for relay in self._relays:
            relay.cancel()
        await asyncio.gather(*self._relays, return_exceptions=True)
        await self._session.close()

    async def _vanish(self, partial: bytes) -> None:
        for websocket in list(self._websockets):
            await websocket.send_bytes(partial)
            websocket.get_extra_info("socket").shutdown(socket.SHUT_RDWR)  # no close frame: 1006 on the broker's side

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._session is not None
        relay = asyncio.current_task()
        assert relay is not None
        self._relays.add(relay)
        try:
            websocket = await self._session.ws_connect(
                self.websocket_url, protocols=("amqp",), max_msg_size=0, ssl=self.tls or True
            )
        except aiohttp.ClientError:
            self._relays.discard(relay)
            writer.close()
            return
        self._websockets.add(websocket)
        upstream = asyncio.create_task(self._client_to_broker(reader, websocket))
        try:
            await self._broker_to_client(websocket, writer)
            await websocket.close()
        except asyncio.CancelledError:  # by _stop; ending normally keeps asyncio's server quiet
            pass
        finally:
            self._websockets.discard(websocket)
            self._relays.discard(relay)
            upstream.cancel()
            writer.close()

    async def _client_to_broker(self, reader: asyncio.StreamReader, websocket: aiohttp.ClientWebSocketResponse) -> None:
        try:
            while data := await reader.read(READ_SIZE):
                await websocket.send_bytes(data)
        except ConnectionError:
            pass
        await websocket.close()

    async def _broker_to_client(self, websocket: aiohttp.ClientWebSocketResponse, writer: asyncio.StreamWriter) -> None:
        reading = self._event()
        while True:
            await reading.wait()
            message = await websocket.receive()
            if message.type is not aiohttp.WSMsgType.BINARY:
                return
            writer.write(message.data)
            try:
                await writer.drain()
            except ConnectionError:
                return
